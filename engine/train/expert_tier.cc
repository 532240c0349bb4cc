#include "engine/train/expert_tier.h"

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

// Copies `n` floats between a record and a vector (resized on the way in).
void Put(char** at, const std::vector<float>& v) {
  std::memcpy(*at, v.data(), v.size() * sizeof(float));
  *at += v.size() * sizeof(float);
}
void Take(char** at, int64_t n, std::vector<float>* v) {
  v->resize(n);
  std::memcpy(v->data(), *at, n * sizeof(float));
  *at += n * sizeof(float);
}
void Free(std::vector<float>* v) { std::vector<float>().swap(*v); }

}  // namespace

int64_t ExpertTier::RecordBytes(const MlpParams& e) {
  int64_t floats = 0;
  for (const Parameter* w : {e.gate, e.up, e.down}) floats += Numel(*w) * (HasMaster(*w) ? 5 : 4);
  return AlignRecordBytes(floats * static_cast<int64_t>(sizeof(float)));
}

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

absl::Status ExpertTier::BeginStep(AccessSequence sequence) {
  std::unique_lock<std::mutex> lock(mu_);
  changed_.wait(lock, [&] { return !busy_; });
  sequence_ = std::move(sequence);
  cursor_ = 0;
  active_ = true;
  hold_all_ = false;
  changed_.notify_all();
  changed_.wait(lock, [&] { return in_memory_ <= capacity_ || !error_.ok(); });
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

void ExpertTier::EndStep() {
  std::unique_lock<std::mutex> lock(mu_);
  active_ = false;
  changed_.wait(lock, [&] { return !busy_; });
}

absl::Status ExpertTier::Pin(int id, bool advance) {
  std::unique_lock<std::mutex> lock(mu_);
  if (advance && !hold_all_ &&
      !(cursor_ > 0 && sequence_.ids()[cursor_ - 1] == id)) {  // the expert just used
    const size_t pos = sequence_.NextUse(id, cursor_);
    if (pos != AccessSequence::kNever) cursor_ = pos + 1;
  }
  ++stats_.pins;
  if (slots_[id].where != Where::kHost) {
    ++stats_.waits;
    const auto start = std::chrono::steady_clock::now();
    demand_.insert(id);
    changed_.notify_all();
    changed_.wait(lock, [&] { return slots_[id].where == Where::kHost || !error_.ok(); });
    demand_.erase(id);
    stats_.wait_seconds +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (slots_[id].where != Where::kHost) return error_;
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
    RETURN_IF_ERROR(Pin(static_cast<int>(id), /*advance=*/false));
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

ExpertTier::Plan ExpertTier::NextPlan() {
  const bool room = hold_all_ || in_memory_ < capacity_;
  for (int id : demand_) {  // a pinner waits
    if (slots_[id].where != Where::kSsd) continue;
    if (room) return Plan{id, -1, false};
    const int victim = VictimFor(AccessSequence::kNever, /*must=*/true);
    if (victim >= 0) return Plan{id, victim, false};
  }
  if (!active_ || hold_all_) return Plan{};
  if (in_memory_ > capacity_) return Plan{-1, VictimFor(AccessSequence::kNever, true), false};
  const std::vector<int>& ids = sequence_.ids();
  for (size_t pos = cursor_; pos < ids.size() && pos < cursor_ + kPrefetchWindow; ++pos) {
    if (slots_[ids[pos]].where != Where::kSsd) continue;
    if (room) return Plan{ids[pos], -1, true};
    const int victim = VictimFor(pos, /*must=*/false);
    if (victim >= 0) return Plan{ids[pos], victim, true};
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
      const bool write = v.dirty;
      v.where = Where::kEvicting;
      lock.unlock();
      st = Evict(plan.victim, write);
      lock.lock();
      v.where = st.ok() ? Where::kSsd : Where::kHost;  // a failed write keeps the expert
      if (st.ok()) {
        --in_memory_;
        v.dirty = false;
        ++stats_.evictions;
        stats_.clean_drops += write ? 0 : 1;
      }
    }
    if (st.ok() && plan.id >= 0) {
      slots_[plan.id].where = Where::kLoading;
      ++in_memory_;
      lock.unlock();
      st = Load(plan.id);
      lock.lock();
      slots_[plan.id].where = st.ok() ? Where::kHost : Where::kSsd;
      if (!st.ok()) --in_memory_;
      stats_.prefetches += st.ok() && plan.prefetch ? 1 : 0;
    }
    if (!st.ok()) error_ = st;
    busy_ = false;
    changed_.notify_all();
  }
}

absl::Status ExpertTier::Evict(int id, bool write) {
  if (write) {
    Serialize(id, &io_buffer_);
    RETURN_IF_ERROR(file_->WriteRecord(id, &io_buffer_));
  }
  const Expert& e = experts_[id];
  Parameter* const w[3] = {e.weights.gate, e.weights.up, e.weights.down};
  for (int j = 0; j < 3; ++j) {
    Parameter* p = w[j];
    Free(&p->value);
    Free(&p->grad);
    AdamWParamState& s = (*states_)[e.state_index[j]];
    Free(&s.m);
    Free(&s.v);
    Free(&s.master);
  }
  return absl::OkStatus();
}

absl::Status ExpertTier::Load(int id) {
  RETURN_IF_ERROR(file_->ReadRecord(id, &io_buffer_));
  Deserialize(id, &io_buffer_);
  return absl::OkStatus();
}

// Record layout, per weight (gate, up, down), numel n each: value[n],
// grad[n], m[n], v[n], then master[n] for a bf16/fp16 weight; fp32
// little-endian. Which of grad / moments / master hold data is kept in
// saved_ (the file is scratch, only this process reads it).
void ExpertTier::Serialize(int id, AlignedBuffer* buf) {
  const Expert& e = experts_[id];
  Parameter* const w[3] = {e.weights.gate, e.weights.up, e.weights.down};
  char* at = buf->data();
  for (int j = 0; j < 3; ++j) {
    const int64_t n = Numel(*w[j]);
    char* start = at;
    const AdamWParamState& s = (*states_)[e.state_index[j]];
    Put(&at, w[j]->value);
    at = start + n * sizeof(float);
    saved_[id].grad[j] = w[j]->has_grad && !w[j]->grad.empty();
    if (saved_[id].grad[j]) Put(&at, w[j]->grad);
    at = start + 2 * n * sizeof(float);
    saved_[id].moments[j] = !s.m.empty();
    if (saved_[id].moments[j]) {
      Put(&at, s.m);
      Put(&at, s.v);
    }
    at = start + 4 * n * sizeof(float);
    saved_[id].master[j] = !s.master.empty();
    if (saved_[id].master[j]) Put(&at, s.master);
    at = start + (HasMaster(*w[j]) ? 5 : 4) * n * sizeof(float);
  }
}

void ExpertTier::Deserialize(int id, AlignedBuffer* buf) {
  const Expert& e = experts_[id];
  Parameter* const w[3] = {e.weights.gate, e.weights.up, e.weights.down};
  char* at = buf->data();
  for (int j = 0; j < 3; ++j) {
    Parameter* p = w[j];
    const int64_t n = Numel(*p);
    char* start = at;
    AdamWParamState& s = (*states_)[e.state_index[j]];
    Take(&at, n, &p->value);
    // A gradient cleared (ClearGrad) since the record was written stays cleared.
    if (saved_[id].grad[j] && p->has_grad) Take(&at, n, &p->grad);
    at = start + 2 * n * sizeof(float);
    if (saved_[id].moments[j]) {
      Take(&at, n, &s.m);
      Take(&at, n, &s.v);
    }
    at = start + 4 * n * sizeof(float);
    if (saved_[id].master[j]) Take(&at, n, &s.master);
    at = start + (HasMaster(*p) ? 5 : 4) * n * sizeof(float);
  }
}

}  // namespace expertd::train
