// LoadDriver: issues one benchmark run's requests and collects their records.
//
// Load shapes:
//   closed loop  `concurrency` requests in flight; each completion starts the
//                next one (vLLM: --request-rate inf --max-concurrency N).
//   open loop    arrivals from an ArrivalProcess (Poisson or gamma) at
//                planned times, optionally capped at `max_concurrency` in
//                flight (a capped request waits on the client; its latency
//                counts from when it is actually sent, as in vLLM).
// Phases: the first `warmup_requests` requests, and every request issued in
// the first `warmup_s` seconds, are warm-up: issued like the others (so the
// measured requests see a loaded server) but marked and left out of the
// results. Measurement starts when the first measured request is issued and
// ends when the last one finishes; it issues `num_requests` requests, or
// issues for `duration_s` seconds, then waits for those in flight.
//
// Interrupt() (any thread, e.g. on SIGINT) stops issuing and cancels every
// call in flight; Run() then returns the partial records.
#ifndef EXPERTD_CLIENT_BENCH_LOAD_DRIVER_H_
#define EXPERTD_CLIENT_BENCH_LOAD_DRIVER_H_

#include <functional>
#include <limits>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "client/bench/arrivals.h"
#include "client/bench/request_record.h"
#include "client/bench/request_runner.h"
#include "client/bench/workload.h"

namespace expertd::bench {

struct LoadOptions {
  bool open_loop = false;
  int64_t concurrency = 1;                                        // closed loop
  double request_rate = std::numeric_limits<double>::infinity();  // open loop (inf: all at once)
  double burstiness = 1.0;                                        // open loop
  int64_t max_concurrency = 0;                                    // open loop cap; 0 = none
  int64_t num_requests = 100;  // measured requests; 0: use duration_s
  double duration_s = 0;       // issue measured requests for this long (with num_requests == 0)
  int64_t warmup_requests = 0;
  double warmup_s = 0;
  uint64_t seed = 0;               // the arrival process's seed (the workload has its own)
  double progress_interval_s = 5;  // progress line on stderr (0: none)
};

struct RunResult {
  std::vector<RequestRecord> records;  // every finished request (warm-up too), by index
  int64_t issued = 0;                  // measured requests issued
  int64_t warmup_issued = 0;
  double measure_start_s = 0;  // first measured request issued
  double measure_end_s = 0;    // last measured request finished
  bool interrupted = false;
};

class LoadDriver {
 public:
  // The pointers must outlive Run(). `on_measure_start` (may be empty) runs on
  // Run()'s thread when measurement begins, `on_measure_end` when the last
  // measured request has finished (e.g. to snapshot server counters).
  LoadDriver(LoadOptions options, Workload* workload, GenerateRunner* runner,
             RequestOptions request_options);

  RunResult Run(const std::function<void()>& on_measure_start,
                const std::function<void()>& on_measure_end);
  void Interrupt();

 private:
  bool WaitUntil(double t_s);  // false if interrupted
  bool WaitForSlot();          // false if interrupted
  bool IsWarmup(int64_t issued_total, double now_s) const;
  void Launch(const PlannedRequest& planned, bool warmup, double scheduled_s);
  void Drain();
  void PrintProgress(double now_s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const LoadOptions options_;
  Workload* const workload_;
  GenerateRunner* const runner_;
  const RequestOptions request_options_;
  ArrivalProcess arrivals_;

  absl::Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  int64_t in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<RequestRecord> records_ ABSL_GUARDED_BY(mu_);
  double last_progress_s_ = 0;
  int64_t issued_ = 0;
  int64_t warmup_issued_ = 0;
};

}  // namespace expertd::bench

#endif  // EXPERTD_CLIENT_BENCH_LOAD_DRIVER_H_
