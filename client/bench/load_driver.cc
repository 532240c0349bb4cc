#include "client/bench/load_driver.h"

#include <algorithm>
#include <cstdio>

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace expertd::bench {

LoadDriver::LoadDriver(LoadOptions options, Workload* workload, GenerateRunner* runner,
                       RequestOptions request_options)
    : options_(options),
      workload_(workload),
      runner_(runner),
      request_options_(std::move(request_options)),
      arrivals_(options.request_rate, options.burstiness, DeriveSeed(options.seed, 4)) {}

void LoadDriver::Interrupt() {
  absl::MutexLock lock(&mu_);
  stop_ = true;
}

bool LoadDriver::WaitUntil(double t_s) {
  absl::MutexLock lock(&mu_);
  while (!stop_) {
    const double left = t_s - runner_->Now();
    if (left <= 0) break;
    const absl::Duration wait = absl::Seconds(std::min(left, 1.0));
    if (mu_.AwaitWithTimeout(absl::Condition(&stop_), wait)) break;
    PrintProgress(runner_->Now());
  }
  return !stop_;
}

bool LoadDriver::WaitForSlot() {
  int64_t limit = options_.open_loop ? options_.max_concurrency : options_.concurrency;
  if (limit <= 0) limit = INT64_MAX;
  auto ready = [this, limit]()
                   ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stop_ || in_flight_ < limit; };
  absl::MutexLock lock(&mu_);
  while (!mu_.AwaitWithTimeout(absl::Condition(&ready), absl::Seconds(1)))
    PrintProgress(runner_->Now());
  return !stop_;
}

bool LoadDriver::IsWarmup(int64_t issued_total, double now_s) const {
  return issued_total < options_.warmup_requests || now_s < options_.warmup_s;
}

void LoadDriver::Launch(const PlannedRequest& planned, bool warmup, double scheduled_s) {
  RequestRecord record;
  record.index = planned.index;
  record.warmup = warmup;
  record.scheduled_s = scheduled_s;
  record.input_tokens = planned.input_tokens;
  record.max_new_tokens = planned.max_new_tokens;
  record.prompt_hash = planned.prompt_hash;
  {
    absl::MutexLock lock(&mu_);
    ++in_flight_;
  }
  (warmup ? warmup_issued_ : issued_)++;
  runner_->Start(BuildGenerateRequest(planned, request_options_), std::move(record),
                 [this](RequestRecord r) {
                   absl::MutexLock lock(&mu_);
                   records_.push_back(std::move(r));
                   --in_flight_;
                 });
}

void LoadDriver::Drain() {
  bool cancelled = false;
  while (true) {
    bool stop;
    {
      absl::MutexLock lock(&mu_);
      auto idle = [this, &cancelled]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return in_flight_ == 0 || (stop_ && !cancelled);
      };
      // Re-checks every second for progress output.
      mu_.AwaitWithTimeout(absl::Condition(&idle), absl::Seconds(1));
      if (in_flight_ == 0) return;
      stop = stop_;
      PrintProgress(runner_->Now());
    }
    if (stop && !cancelled) {
      runner_->CancelAll();
      cancelled = true;
    }
  }
}

void LoadDriver::PrintProgress(double now_s) {
  if (options_.progress_interval_s <= 0 || now_s - last_progress_s_ < options_.progress_interval_s)
    return;
  last_progress_s_ = now_s;
  std::fprintf(stderr,
               "expert-bench: t=%.1fs issued=%lld (+%lld warm-up) finished=%zu in_flight=%lld\n",
               now_s, static_cast<long long>(issued_), static_cast<long long>(warmup_issued_),
               records_.size(), static_cast<long long>(in_flight_));
}

RunResult LoadDriver::Run(const std::function<void()>& on_measure_start,
                          const std::function<void()>& on_measure_end) {
  RunResult result;
  bool measuring = false;
  double next_arrival_s = 0;
  while (options_.num_requests == 0 || issued_ < options_.num_requests) {
    double scheduled_s = -1;
    if (options_.open_loop) {
      scheduled_s = next_arrival_s;
      if (!WaitUntil(scheduled_s)) break;
      next_arrival_s += arrivals_.NextGapSeconds();
    }
    if (!WaitForSlot()) break;
    const double now = runner_->Now();
    const bool warmup = IsWarmup(issued_ + warmup_issued_, now);
    if (!warmup && !measuring) {
      measuring = true;
      result.measure_start_s = now;
      std::fprintf(stderr, "expert-bench: measuring (after %lld warm-up requests)\n",
                   static_cast<long long>(warmup_issued_));
      if (on_measure_start) on_measure_start();
    }
    if (!warmup && options_.num_requests == 0 &&
        now >= result.measure_start_s + options_.duration_s)
      break;
    Launch(workload_->Next(), warmup, scheduled_s);
  }
  Drain();
  if (measuring && on_measure_end) on_measure_end();
  absl::MutexLock lock(&mu_);
  result.interrupted = stop_;
  result.issued = issued_;
  result.warmup_issued = warmup_issued_;
  result.records = std::move(records_);
  std::sort(result.records.begin(), result.records.end(),
            [](const RequestRecord& a, const RequestRecord& b) { return a.index < b.index; });
  result.measure_end_s = result.measure_start_s;
  for (const RequestRecord& r : result.records) {
    if (!r.warmup) result.measure_end_s = std::max(result.measure_end_s, r.end_s);
  }
  return result;
}

}  // namespace expertd::bench
