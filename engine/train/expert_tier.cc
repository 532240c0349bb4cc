#include "engine/train/expert_tier.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "base/log.h"
#include "base/status_macros.h"

namespace expertd::train {

namespace {

constexpr size_t kPrefetchWindow = 64;  // sequence positions the prefetcher looks ahead

int64_t Numel(const Parameter& p) {
  int64_t n = 1;
  for (int64_t d : p.shape) n *= d;
  return n;
}

bool HasMaster(const Parameter& p) { return p.dtype != models::DType::kF32; }

// Copies floats between a record buffer and a vector (resized on the way in).
void Put(char* at, const std::vector<float>& v) {
  std::memcpy(at, v.data(), v.size() * sizeof(float));
}
void Take(const char* at, int64_t n, std::vector<float>* v) {
  v->resize(n);
  std::memcpy(v->data(), at, n * sizeof(float));
}
void Free(std::vector<float>* v) { std::vector<float>().swap(*v); }

// A record: three sections, each on a kRecordAlignment boundary, so a load
// reads only what its use needs: values (value[n] of gate, up, down),
// gradients (grad[n] of each), state (m[n], v[n] and, for a bf16/fp16
// weight, master[n] of each); fp32 little-endian.
struct Layout {
  int64_t value[3], grad[3], m[3], v[3], master[3];  // byte offsets in the record
  int64_t grads_offset = 0, state_offset = 0, bytes = 0;
};

Layout LayoutOf(const MlpParams& e) {
  const Parameter* w[3] = {e.gate, e.up, e.down};
  Layout l;
  const int64_t f = sizeof(float);
  int64_t at = 0;
  for (int j = 0; j < 3; ++j) l.value[j] = at, at += Numel(*w[j]) * f;
  l.grads_offset = at = AlignRecordBytes(at);
  for (int j = 0; j < 3; ++j) l.grad[j] = at, at += Numel(*w[j]) * f;
  l.state_offset = at = AlignRecordBytes(at);
  for (int j = 0; j < 3; ++j) {
    l.m[j] = at, at += Numel(*w[j]) * f;
    l.v[j] = at, at += Numel(*w[j]) * f;
    l.master[j] = at, at += HasMaster(*w[j]) ? Numel(*w[j]) * f : 0;
  }
  l.bytes = AlignRecordBytes(at);
  return l;
}

}  // namespace

int64_t ExpertTier::RecordBytes(const MlpParams& e) { return LayoutOf(e).bytes; }

absl::StatusOr<std::unique_ptr<ExpertTier>> ExpertTier::Create(
    const std::string& dir, std::vector<Expert> experts, size_t capacity,
    std::vector<AdamWParamState>* states) {
  if (experts.empty() || capacity < 2) {
    return absl::InternalError("the SSD tier needs experts and room for two on the host");
  }
  int64_t record = 0;
  for (const Expert& e : experts) record = std::max(record, RecordBytes(e.weights));
  ASSIGN_OR_RETURN(std::unique_ptr<RecordFile> file,
                   RecordFile::Create(dir + "/expert_training_state.bin", record,
                                      static_cast<int64_t>(experts.size())));
  if (!file->direct_io()) {
    EXPERTD_LOG(Warn, "SSD tier: the file system refused O_DIRECT; buffered I/O instead")
        .With("path", file->path());
  }
  return std::unique_ptr<ExpertTier>(
      new ExpertTier(std::move(experts), capacity, std::move(file), states));
}

ExpertTier::ExpertTier(std::vector<Expert> experts, size_t capacity,
                       std::unique_ptr<RecordFile> file, std::vector<AdamWParamState>* states)
    : experts_(std::move(experts)),
      capacity_(capacity),
      file_(std::move(file)),
      states_(states),
      io_buffer_(file_->record_bytes()),
      slots_(experts_.size()),
      in_memory_(experts_.size()) {
  for (size_t id = 0; id < experts_.size(); ++id) {
    const MlpParams& w = experts_[id].weights;
    for (const Parameter* p : {w.gate, w.up, w.down}) ids_[p] = static_cast<int>(id);
  }
  saved_.resize(experts_.size());
  thread_ = std::thread([this] { Run(); });
}

ExpertTier::~ExpertTier() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  changed_.notify_all();
  thread_.join();
}

int ExpertTier::IdOf(const Parameter* w) const {
  auto it = ids_.find(w);
  return it == ids_.end() ? -1 : it->second;
}

absl::Status ExpertTier::BeginStep(AccessSequence sequence, size_t state_from) {
  std::unique_lock<std::mutex> lock(mu_);
  changed_.wait(lock, [&] { return !busy_; });
  sequence_ = std::move(sequence);
  cursor_ = 0;
  state_from_ = state_from;
  active_ = true;
  hold_all_ = false;
  changed_.notify_all();
  changed_.wait(lock, [&] { return in_memory_ <= capacity_ || !error_.ok(); });
  stats_.host_peak = static_cast<int64_t>(in_memory_);
  return error_;
}

void ExpertTier::WaitForIo() {
  std::unique_lock<std::mutex> lock(mu_);
  changed_.wait(lock, [&] {
    if (busy_ || !error_.ok()) return !busy_;
    const Plan plan = NextPlan();
    return plan.id < 0 && plan.victim < 0;
  });
}

void ExpertTier::ReviseSequence(AccessSequence sequence, size_t unchanged, size_t state_from) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    sequence_ = std::move(sequence);
    cursor_ = std::min(cursor_, unchanged);
    state_from_ = state_from;
  }
  changed_.notify_all();  // the I/O thread re-plans on the new future
}

void ExpertTier::EndStep() {
  std::unique_lock<std::mutex> lock(mu_);
  active_ = false;
  changed_.wait(lock, [&] { return !busy_; });
}

bool ExpertTier::Ready(int id, Need need) const {
  const Slot& s = slots_[id];
  return s.where == Where::kHost && (need == Need::kWeights || s.state);
}

absl::Status ExpertTier::Pin(int id, Need need, bool advance) {
  std::unique_lock<std::mutex> lock(mu_);
  if (advance && !hold_all_ &&
      !(cursor_ > 0 && sequence_.ids()[cursor_ - 1] == id)) {  // the expert just used
    const size_t pos = sequence_.NextUse(id, cursor_);
    if (pos != AccessSequence::kNever) {
      if (active_) stats_.skipped_uses += static_cast<int64_t>(pos - cursor_);
      cursor_ = pos + 1;
    } else if (active_) {
      ++stats_.unplanned_pins;
    }
  }
  ++stats_.pins;
  if (!Ready(id, need)) {
    ++stats_.waits;
    const auto start = std::chrono::steady_clock::now();
    demand_[id] = need;
    changed_.notify_all();
    changed_.wait(lock, [&] { return Ready(id, need) || !error_.ok(); });
    demand_.erase(id);
    stats_.wait_seconds +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (!Ready(id, need)) return error_;
  }
  ++slots_[id].pins;
  changed_.notify_all();
  return absl::OkStatus();
}

void ExpertTier::Unpin(int id, bool dirty) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    --slots_[id].pins;
    slots_[id].dirty |= dirty;
  }
  changed_.notify_all();
}

absl::Status ExpertTier::HoldAll() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    hold_all_ = true;
  }
  for (size_t id = 0; id < experts_.size(); ++id) {
    RETURN_IF_ERROR(Pin(static_cast<int>(id), Need::kAll, /*advance=*/false));
    Unpin(static_cast<int>(id), false);
  }
  return absl::OkStatus();
}

ExpertTier::Stats ExpertTier::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

size_t ExpertTier::NextUse(int id) const { return sequence_.NextUse(id, cursor_); }

int ExpertTier::VictimFor(size_t next_use, bool must) {
  std::vector<int> candidates;
  for (size_t id = 0; id < slots_.size(); ++id) {
    const Slot& s = slots_[id];
    if (s.where == Where::kHost && s.pins == 0 && !demand_.count(static_cast<int>(id))) {
      candidates.push_back(static_cast<int>(id));
    }
  }
  if (candidates.empty()) return -1;
  const int victim = BeladyVictim(sequence_, cursor_, candidates);
  // A prefetch only pays when what it evicts is needed later than what it loads.
  if (!must && NextUse(victim) <= next_use) return -1;
  return victim;
}

bool ExpertTier::PlanLoad(int id, Need need, bool prefetch, size_t next_use, Plan* plan) {
  const Slot& s = slots_[id];
  if (s.where == Where::kHost && need == Need::kAll && !s.state) {
    *plan = Plan{id, -1, prefetch, true};  // its state only: no room needed
    return true;
  }
  if (s.where != Where::kSsd) return false;
  int victim = -1;
  if (!hold_all_ && in_memory_ >= capacity_) {
    victim = VictimFor(next_use, /*must=*/!prefetch);
    if (victim < 0) return false;
  }
  *plan = Plan{id, victim, prefetch, need == Need::kAll};
  return true;
}

ExpertTier::Plan ExpertTier::NextPlan() {
  Plan plan;
  for (const auto& [id, need] : demand_) {  // a pinner waits
    if (PlanLoad(id, need, false, AccessSequence::kNever, &plan)) return plan;
  }
  if (!active_ || hold_all_) return Plan{};
  if (in_memory_ > capacity_) return Plan{-1, VictimFor(AccessSequence::kNever, true)};
  const std::vector<int>& ids = sequence_.ids();
  for (size_t pos = cursor_; pos < ids.size() && pos < cursor_ + kPrefetchWindow; ++pos) {
    const Slot& s = slots_[ids[pos]];
    const Need need = pos >= state_from_ ? Need::kAll : Need::kWeights;
    if (s.where == Where::kHost && (need == Need::kWeights || s.state)) continue;
    if (s.where != Where::kSsd && s.where != Where::kHost) continue;  // in flight
    if (PlanLoad(ids[pos], need, true, pos, &plan)) return plan;
    break;  // nothing resident is used later than the next missing expert
  }
  return Plan{};
}

void ExpertTier::Run() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    Plan plan;
    changed_.wait(lock, [&] {
      if (stop_) return true;
      if (!error_.ok()) return false;
      plan = NextPlan();
      return plan.id >= 0 || plan.victim >= 0;
    });
    if (stop_) return;
    busy_ = true;
    absl::Status st;
    if (plan.victim >= 0) {
      Slot& v = slots_[plan.victim];
      const bool write = v.dirty, state = v.state;
      v.where = Where::kEvicting;
      lock.unlock();
      st = Evict(plan.victim, write, state);
      lock.lock();
      v.where = st.ok() ? Where::kSsd : Where::kHost;  // a failed write keeps the expert
      if (st.ok()) {
        --in_memory_;
        v.dirty = false;
        v.state = false;
        ++stats_.evictions;
        stats_.clean_drops += write ? 0 : 1;
      }
    }
    if (st.ok() && plan.id >= 0) {
      Slot& s = slots_[plan.id];
      const bool weights = s.where == Where::kSsd;  // else on the host: only its state
      const Where before = s.where;
      s.where = Where::kLoading;
      if (weights) ++in_memory_;
      stats_.host_peak = std::max(stats_.host_peak, static_cast<int64_t>(in_memory_));
      lock.unlock();
      st = Load(plan.id, weights, plan.state);
      lock.lock();
      s.where = st.ok() ? Where::kHost : before;
      if (!st.ok() && weights) --in_memory_;
      if (st.ok()) s.state = weights ? plan.state : true;
      stats_.prefetches += st.ok() && plan.prefetch ? 1 : 0;
    }
    if (!st.ok()) error_ = st;
    busy_ = false;
    changed_.notify_all();
  }
}

absl::Status ExpertTier::Evict(int id, bool write, bool state) {
  const Expert& e = experts_[id];
  Parameter* const w[3] = {e.weights.gate, e.weights.up, e.weights.down};
  if (write) {
    const Layout l = LayoutOf(e.weights);
    char* buf = io_buffer_.data();
    bool grads = false;
    for (int j = 0; j < 3; ++j) {
      Put(buf + l.value[j], w[j]->value);
      saved_[id].grad[j] = w[j]->has_grad && !w[j]->grad.empty();
      if (saved_[id].grad[j]) Put(buf + l.grad[j], w[j]->grad);
      grads = grads || saved_[id].grad[j];
      if (!state) continue;  // the record's state section is still current
      const AdamWParamState& s = (*states_)[e.state_index[j]];
      saved_[id].moments[j] = !s.m.empty();
      if (saved_[id].moments[j]) Put(buf + l.m[j], s.m), Put(buf + l.v[j], s.v);
      saved_[id].master[j] = !s.master.empty();
      if (saved_[id].master[j]) Put(buf + l.master[j], s.master);
    }
    const int64_t end = state ? l.bytes : grads ? l.state_offset : l.grads_offset;
    RETURN_IF_ERROR(file_->WritePart(id, 0, end, &io_buffer_));
  }
  for (int j = 0; j < 3; ++j) {
    Free(&w[j]->value);
    Free(&w[j]->grad);
    AdamWParamState& s = (*states_)[e.state_index[j]];
    Free(&s.m);
    Free(&s.v);
    Free(&s.master);
  }
  return absl::OkStatus();
}

// Reads the values (and the gradients a parameter still has: one cleared
// since the record was written stays cleared) when `weights`, the AdamW
// state when `state`.
absl::Status ExpertTier::Load(int id, bool weights, bool state) {
  const Expert& e = experts_[id];
  Parameter* const w[3] = {e.weights.gate, e.weights.up, e.weights.down};
  const Layout l = LayoutOf(e.weights);
  bool grads = false;
  for (int j = 0; j < 3; ++j) grads = grads || (saved_[id].grad[j] && w[j]->has_grad);
  if (weights) {
    RETURN_IF_ERROR(file_->ReadPart(id, 0, grads ? l.state_offset : l.grads_offset, &io_buffer_));
  }
  if (state) {
    RETURN_IF_ERROR(file_->ReadPart(id, l.state_offset, l.bytes - l.state_offset, &io_buffer_));
  }
  const char* buf = io_buffer_.data();
  for (int j = 0; j < 3; ++j) {
    const int64_t n = Numel(*w[j]);
    if (weights) {
      Take(buf + l.value[j], n, &w[j]->value);
      if (saved_[id].grad[j] && w[j]->has_grad) Take(buf + l.grad[j], n, &w[j]->grad);
    }
    if (!state) continue;
    AdamWParamState& s = (*states_)[e.state_index[j]];
    if (saved_[id].moments[j]) Take(buf + l.m[j], n, &s.m), Take(buf + l.v[j], n, &s.v);
    if (saved_[id].master[j]) Take(buf + l.master[j], n, &s.master);
  }
  return absl::OkStatus();
}

}  // namespace expertd::train
