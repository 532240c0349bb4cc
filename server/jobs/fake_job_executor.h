// FakeJobExecutor: a JobExecutor for tests that trains nothing but behaves as
// the real one does at the seam: it reports progress every step, writes a
// small checkpoint directory through Env (temp name, fsync, rename) every
// `checkpoint_every` steps and records it through the sink, stops at a step
// boundary when asked, and resumes after the step of JobRun.resume_from.
// Tests gate its steps (AllowSteps) to stop it at a known point.
#ifndef EXPERTD_SERVER_JOBS_FAKE_JOB_EXECUTOR_H_
#define EXPERTD_SERVER_JOBS_FAKE_JOB_EXECUTOR_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "base/env.h"
#include "server/jobs/job_executor.h"

namespace expertd::server::jobs {

class FakeJobExecutor final : public JobExecutor {
 public:
  struct Script {
    uint64_t total_steps = 4;
    uint64_t checkpoint_every = 2;
    absl::Status validate_error;  // returned by Validate
    // Validate fails (invalid_training_file) for a dataset containing this.
    std::string invalid_marker;
    uint64_t fail_at_step = 0;    // 0: never; else Run returns run_error there
    absl::Status run_error;
    bool gated = false;  // steps wait for AllowSteps
    // A gated step ignores stop requests while it waits, as a long real
    // step does: only AllowSteps moves it on.
    bool gate_ignores_stop = false;
  };

  explicit FakeJobExecutor(Script script, Env* env = Env::Default())
      : script_(std::move(script)), env_(env) {}

  absl::Status Validate(const JobRun& run) override;
  absl::Status Run(const JobRun& run, JobSink* sink) override;

  // Lets `n` more steps run (gated scripts).
  void AllowSteps(uint64_t n);
  // Waits until `step` steps completed in total across runs; false at the deadline.
  bool WaitForStep(uint64_t step, absl::Duration timeout);
  // Waits until a Run is blocked on the gate; false at the deadline.
  bool WaitUntilBlocked(absl::Duration timeout);

  int validate_calls() const;
  int run_calls() const;
  // JobRun.resume_from of each Run, in order.
  std::vector<std::optional<CheckpointRecord>> resumes() const;

 private:
  absl::Status WriteCheckpoint(const JobRun& run, uint64_t step, JobSink* sink);
  // Waits for the gate or a stop request; false when stopped.
  bool AwaitGate(JobSink* sink);

  const Script script_;
  Env* const env_;
  mutable absl::Mutex mu_;
  uint64_t allowed_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t steps_done_ ABSL_GUARDED_BY(mu_) = 0;
  bool blocked_ ABSL_GUARDED_BY(mu_) = false;
  int validate_calls_ ABSL_GUARDED_BY(mu_) = 0;
  int run_calls_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<std::optional<CheckpointRecord>> resumes_ ABSL_GUARDED_BY(mu_);
};

}  // namespace expertd::server::jobs

#endif  // EXPERTD_SERVER_JOBS_FAKE_JOB_EXECUTOR_H_
