#include "server/jobs/fake_job_executor.h"

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace expertd::server::jobs {

absl::Status FakeJobExecutor::Validate(const JobRun& run) {
  {
    absl::MutexLock lock(&mu_);
    ++validate_calls_;
  }
  RETURN_IF_ERROR(script_.validate_error);
  // Reads the dataset as the real executor does: it must exist.
  ASSIGN_OR_RETURN(std::string data, ReadFileToString(env_, run.training_file_path));
  if (!script_.invalid_marker.empty() &&
      data.find(script_.invalid_marker) != std::string::npos) {
    return WithJobErrorCode(
        absl::InvalidArgumentError(absl::StrCat("line 1: contains ", script_.invalid_marker)),
        "invalid_training_file");
  }
  return absl::OkStatus();
}

bool FakeJobExecutor::AwaitGate(JobSink* sink) {
  absl::MutexLock lock(&mu_);
  blocked_ = true;
  // The sink's StopRequested has no wake-up; a short bounded wait re-checks it.
  while (allowed_ == 0) {
    mu_.Unlock();
    const bool stop = !script_.gate_ignores_stop && sink->StopRequested();
    mu_.Lock();
    if (stop) {
      blocked_ = false;
      return false;
    }
    auto allowed = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return allowed_ > 0; };
    mu_.AwaitWithTimeout(absl::Condition(&allowed), absl::Milliseconds(2));
  }
  --allowed_;
  blocked_ = false;
  return true;
}

absl::Status FakeJobExecutor::Run(const JobRun& run, JobSink* sink) {
  uint64_t start = 0;
  {
    absl::MutexLock lock(&mu_);
    ++run_calls_;
    resumes_.push_back(run.resume_from);
  }
  if (run.resume_from.has_value()) {
    start = run.resume_from->step;
    sink->Event(v1::FineTuneJobEvent::LEVEL_INFO, absl::StrCat("resumed at step ", start));
  }
  for (uint64_t step = start + 1; step <= script_.total_steps; ++step) {
    if (sink->StopRequested()) return absl::CancelledError("stop requested");
    if (script_.gated && !AwaitGate(sink)) return absl::CancelledError("stop requested");
    if (step == script_.fail_at_step) return script_.run_error;
    JobProgressUpdate p;
    p.step = step;
    p.total_steps = script_.total_steps;
    p.train_loss = 2.0 / static_cast<double>(step);
    p.learning_rate = 1e-5;
    p.tokens_per_second = 1000;
    p.trained_tokens = step * 64;
    p.expert_load = {{3, 5}, {4, 4}};
    sink->Progress(p);
    if (script_.checkpoint_every > 0 &&
        (step % script_.checkpoint_every == 0 || step == script_.total_steps)) {
      RETURN_IF_ERROR(WriteCheckpoint(run, step, sink));
    }
    absl::MutexLock lock(&mu_);
    ++steps_done_;
  }
  return absl::OkStatus();
}

absl::Status FakeJobExecutor::WriteCheckpoint(const JobRun& run, uint64_t step, JobSink* sink) {
  const std::string dir = absl::StrCat(run.job_dir, "/checkpoint-", step);
  absl::Status s = CreateDirs(env_, dir);
  if (s.ok()) s = WriteFileAtomically(env_, dir + "/state.txt", absl::StrCat("step ", step, "\n"));
  if (!s.ok()) {
    return WithJobErrorCode(s,
                            absl::IsResourceExhausted(s) ? "disk_full" : "checkpoint_write_failed");
  }
  CheckpointRecord record;
  record.id = absl::StrCat("ckpt-", run.job_id, "-", step);
  record.job_id = run.job_id;
  record.path = dir;
  record.step = step;
  record.model_name = absl::StrCat("fake-model:", run.job_id);
  return sink->CheckpointWritten(record);
}

void FakeJobExecutor::AllowSteps(uint64_t n) {
  absl::MutexLock lock(&mu_);
  allowed_ += n;
}

bool FakeJobExecutor::WaitForStep(uint64_t step, absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  auto done = [this, step]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return steps_done_ >= step; };
  return mu_.AwaitWithTimeout(absl::Condition(&done), timeout);
}

bool FakeJobExecutor::WaitUntilBlocked(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  auto blocked = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return blocked_; };
  return mu_.AwaitWithTimeout(absl::Condition(&blocked), timeout);
}

int FakeJobExecutor::validate_calls() const {
  absl::MutexLock lock(&mu_);
  return validate_calls_;
}

int FakeJobExecutor::run_calls() const {
  absl::MutexLock lock(&mu_);
  return run_calls_;
}

std::vector<std::optional<CheckpointRecord>> FakeJobExecutor::resumes() const {
  absl::MutexLock lock(&mu_);
  return resumes_;
}

}  // namespace expertd::server::jobs
