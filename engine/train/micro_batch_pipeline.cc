#include "engine/train/micro_batch_pipeline.h"

#include <condition_variable>
#include <mutex>
#include <thread>

#include "base/status_macros.h"

namespace expertd::train {

absl::Status RunThreeStages(size_t count, bool threaded,
                            const std::array<std::function<absl::Status(size_t)>, 3>& stage) {
  if (!threaded) {
    for (size_t t = 0; t < count; ++t) {
      for (const auto& fn : stage) RETURN_IF_ERROR(fn(t));
    }
    return absl::OkStatus();
  }
  std::mutex mu;
  std::condition_variable cv;
  std::array<size_t, 3> done = {0, 0, 0};
  absl::Status error;
  auto worker = [&](int k) {
    for (size_t t = 0; t < count; ++t) {
      {
        std::unique_lock<std::mutex> lock(mu);
        cv.wait(lock, [&] {
          return !error.ok() || ((k == 0 || done[k - 1] > t) && (k == 2 || done[k + 1] + 2 > t));
        });
        if (!error.ok()) return;
      }
      absl::Status st = stage[k](t);
      {
        std::lock_guard<std::mutex> lock(mu);
        if (!st.ok() && error.ok()) error = st;
        if (st.ok()) done[k] = t + 1;
      }
      cv.notify_all();
      if (!st.ok()) return;
    }
  };
  std::thread dispatch(worker, 0), combine(worker, 2);
  worker(1);
  dispatch.join();
  combine.join();
  return error;
}

namespace {

int64_t FloatBytes(const std::vector<float>& v) {
  return static_cast<int64_t>(v.size() * sizeof(float));
}

void CopyActs(const MlpActivations& src, MlpActivations* dst) {
  dst->rows = src.rows;
  dst->gate.assign(src.gate.begin(), src.gate.end());
  dst->up.assign(src.up.begin(), src.up.end());
  dst->act.assign(src.act.begin(), src.act.end());
  dst->out.assign(src.out.begin(), src.out.end());
}

}  // namespace

int64_t HostSlice::bytes() const {
  return FloatBytes(acts.gate) + FloatBytes(acts.up) + FloatBytes(acts.act) + FloatBytes(acts.out);
}

int64_t CopySlice(const MlpActivations& acts, HostSlice* dst) {
  CopyActs(acts, &dst->acts);
  return dst->bytes();
}

int64_t RestoreSlice(const HostSlice& src, MlpActivations* acts) {
  CopyActs(src.acts, acts);
  return src.bytes();
}

int MicroBatchProfile::Range(int64_t max_rows) {
  int range = 0;
  while ((int64_t{1} << (range + 1)) <= max_rows) ++range;
  return range;
}

MicroBatchProfile::Choice MicroBatchProfile::Choose(int64_t max_rows, int fixed_micro_batches,
                                                    ActivationRestore fixed_restore) const {
  std::vector<Choice> candidates;
  const int lo = fixed_micro_batches > 0 ? fixed_micro_batches : 2;
  const int hi = fixed_micro_batches > 0 ? fixed_micro_batches : 8;
  for (int n = lo; n <= hi; ++n) {
    for (ActivationRestore r : {ActivationRestore::kRecompute, ActivationRestore::kOffload}) {
      if (fixed_restore == ActivationRestore::kAuto || fixed_restore == r) {
        candidates.push_back({n, r});
      }
    }
  }
  auto it = seconds_.find(Range(max_rows));
  Choice best = candidates.front();
  double best_seconds = -1;
  for (const Choice& c : candidates) {
    if (it == seconds_.end()) return c;
    auto seen = it->second.find({c.micro_batches, static_cast<int>(c.restore)});
    if (seen == it->second.end()) return c;  // still profiling this range
    if (best_seconds < 0 || seen->second < best_seconds) {
      best = c;
      best_seconds = seen->second;
    }
  }
  return best;
}

void MicroBatchProfile::Record(int64_t max_rows, Choice c, double seconds) {
  seconds_[Range(max_rows)].emplace(std::make_pair(c.micro_batches, static_cast<int>(c.restore)),
                                    seconds);
}

}  // namespace expertd::train
