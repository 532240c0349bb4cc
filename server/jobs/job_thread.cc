// The job thread of JobManager: validating and running jobs, and the JobSink
// the executor reports through (see job_manager.h).
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "base/log.h"
#include "base/status_macros.h"
#include "server/jobs/job_manager.h"
#include "server/jobs/job_state.h"

namespace expertd::server::jobs {
namespace {

EventDraft Info(std::string message) {
  EventDraft e;
  e.message = std::move(message);
  return e;
}

std::string DescribeProgress(const JobProgressUpdate& p) {
  std::string text = absl::StrFormat("step %d/%d loss %.6g lr %.3g grad_norm %.4g tokens/s %.1f",
                                     p.step, p.total_steps, p.train_loss, p.learning_rate,
                                     p.grad_norm, p.tokens_per_second);
  if (p.validation_loss.has_value()) {
    absl::StrAppendFormat(&text, " val_loss %.6g", *p.validation_loss);
  }
  if (p.memory_bytes > 0) absl::StrAppend(&text, " memory_bytes ", p.memory_bytes);
  if (!p.expert_load.empty()) {
    absl::StrAppend(&text, " expert_load [");
    for (size_t l = 0; l < p.expert_load.size(); ++l) {
      absl::StrAppend(&text, l == 0 ? "[" : ",[", absl::StrJoin(p.expert_load[l], ","), "]");
    }
    absl::StrAppend(&text, "]");
  }
  return text;
}

}  // namespace

// The JobSink of the running job: what the executor reports becomes events,
// progress and checkpoint rows. A failed database write stops the job
// (StopRequested) and fails it with the write's code.
class JobManager::Sink final : public JobSink {
 public:
  Sink(JobManager* manager, v1::FineTuneJob* job) : manager_(manager), job_(job) {}

  void Event(v1::FineTuneJobEvent::Level level, std::string message) override {
    EventDraft e;
    e.level = level;
    e.message = std::move(message);
    Save(&e);
  }

  void Progress(const JobProgressUpdate& p) override {
    v1::JobProgress* progress = job_->mutable_progress();
    progress->set_step(p.step);
    progress->set_total_steps(p.total_steps);
    progress->set_epoch(p.epoch);
    progress->set_train_loss(p.train_loss);
    if (p.validation_loss.has_value()) progress->set_validation_loss(*p.validation_loss);
    progress->set_tokens_per_second(p.tokens_per_second);
    progress->set_trained_tokens(p.trained_tokens);
    EventDraft e = Info(DescribeProgress(p));
    e.progress = *progress;
    Save(&e);
  }

  absl::Status CheckpointWritten(const CheckpointRecord& record) override {
    const std::string job_dir = absl::StrCat(manager_->data_dir(), "/jobs/", job_->id());
    absl::Status s;
    if (record.job_id != job_->id() || !absl::StartsWith(record.path, job_dir + "/")) {
      s = absl::InvalidArgumentError(absl::StrCat("checkpoint '", record.id, "' at '", record.path,
                                                  "' is not under this job's directory ", job_dir));
    } else {
      s = manager_->store_->InsertCheckpoint(record, manager_->options_.clock->Now());
    }
    if (!s.ok()) {
      SetError(WithJobErrorCode(
          s, s.GetPayload(kJobErrorCodeUrl).has_value()
                 ? JobErrorCodeOf(s)
                 : (absl::IsInvalidArgument(s) ? "checkpoint_invalid" : JobErrorCodeFor(s))));
      return s;
    }
    job_->add_checkpoints(record.id);
    if (!record.model_name.empty()) job_->set_fine_tuned_model(record.model_name);
    EventDraft e = Info(absl::StrCat("checkpoint ", record.id, " at step ", record.step));
    Save(&e);
    manager_->PruneCheckpoints(job_);
    return absl::OkStatus();
  }

  bool StopRequested() const override {
    absl::MutexLock lock(&manager_->mu_);
    return manager_->cancel_running_ || manager_->stopping_ || !error_.ok();
  }

  absl::Status error() const {
    absl::MutexLock lock(&manager_->mu_);
    return error_;
  }

 private:
  void Save(EventDraft* e) {
    absl::Status s =
        manager_->store_->UpdateJob(*job_, e, manager_->options_.clock->Now()).status();
    if (!s.ok()) {
      SetError(WithJobErrorCode(s, JobErrorCodeFor(s)));
      return;
    }
    manager_->Notify(job_->id());
  }

  void SetError(absl::Status s) {
    absl::MutexLock lock(&manager_->mu_);
    if (error_.ok()) error_ = std::move(s);
  }

  JobManager* const manager_;
  v1::FineTuneJob* const job_;  // the running job; only the training thread touches it
  absl::Status error_ ABSL_GUARDED_BY(manager_->mu_);
};

void JobManager::TrainLoop() {
  while (true) {
    std::string id;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
        return stopping_ || !to_run_.empty();
      };
      mu_.Await(absl::Condition(&ready));
      if (stopping_) return;
      id = to_run_.front();
      to_run_.pop_front();
    }
    RunJob(id);
  }
}

// Validation has a thread of its own so that a job submitted while another
// trains is validated (QUEUED or FAILED) at once instead of after that run.
void JobManager::ValidateLoop() {
  while (true) {
    std::string id;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
        return stopping_ || !to_validate_.empty();
      };
      mu_.Await(absl::Condition(&ready));
      if (stopping_) return;
      id = to_validate_.front();
      to_validate_.pop_front();
    }
    ValidateJob(id);
  }
}

void JobManager::FailJob(v1::FineTuneJob* job, const std::string& code,
                         const std::string& message) {
  absl::MutexLock lock(&mu_);
  // A Cancel may have ended the job meanwhile; the stored state wins.
  absl::StatusOr<v1::FineTuneJob> stored = LoadJob(job->id());
  if (stored.ok() && IsTerminal(stored->status())) return;
  if (stored.ok()) job->set_status(stored->status());
  job->mutable_error()->set_code(code);
  job->mutable_error()->set_message(message);
  EventDraft e;
  e.level = v1::FineTuneJobEvent::LEVEL_ERROR;
  e.message = absl::StrCat("failed: ", code, ": ", message);
  absl::Status s = TransitionLocked(job, v1::JOB_STATUS_FAILED, std::move(e));
  if (!s.ok()) {
    // The database refused even this: the job keeps its recorded state and
    // is picked up again after a restart. The daemon goes on.
    EXPERTD_LOG(Error, "cannot record a job failure").With("job_id", job->id()).With("error", s);
  }
  EXPERTD_LOG(Warn, "fine-tune job failed").With("job_id", job->id()).With("code", code);
  Notify(job->id());
}

absl::StatusOr<JobRun> JobManager::MakeRun(const v1::FineTuneJob& job) {
  JobRun run;
  run.job_id = job.id();
  run.spec = job.spec();
  absl::StatusOr<std::string> train =
      files_->Resolve("spec.training_file", job.spec().training_file());
  if (!train.ok()) return WithJobErrorCode(train.status(), "invalid_training_file");
  run.training_file_path = *train;
  if (!job.spec().validation_file().empty()) {
    absl::StatusOr<std::string> val =
        files_->Resolve("spec.validation_file", job.spec().validation_file());
    if (!val.ok()) return WithJobErrorCode(val.status(), "invalid_validation_file");
    run.validation_file_path = *val;
  }
  run.job_dir = absl::StrCat(files_->data_dir(), "/jobs/", job.id());
  absl::Status made = CreateDirs(options_.env, run.job_dir);
  if (!made.ok()) {
    // ENOSPC is a full disk; anything else (EACCES, EROFS, a file in the
    // way) means the directory cannot be written.
    return WithJobErrorCode(
        absl::Status(made.code(),
                     absl::StrCat("cannot create the job directory: ", made.message())),
        absl::IsResourceExhausted(made) ? "disk_full" : "data_dir_unwritable");
  }
  ASSIGN_OR_RETURN(std::vector<CheckpointRecord> checkpoints, store_->Checkpoints(job.id()));
  if (!checkpoints.empty()) run.resume_from = checkpoints.back();
  return run;
}

void JobManager::ValidateJob(const std::string& job_id) {
  absl::StatusOr<v1::FineTuneJob> job = LoadJob(job_id);
  if (!job.ok() || job->status() != v1::JOB_STATUS_VALIDATING) return;  // cancelled meanwhile
  absl::StatusOr<JobRun> run = MakeRun(*job);
  absl::Status s = run.ok() ? executor_->Validate(*run) : run.status();
  if (!s.ok()) {
    FailJob(&*job, JobErrorCodeFor(s), std::string(s.message()));
    return;
  }
  absl::MutexLock lock(&mu_);
  *job = LoadJob(job_id).value_or(*job);  // a Cancel may have landed during Validate
  if (job->status() != v1::JOB_STATUS_VALIDATING) return;
  absl::Status moved = TransitionLocked(&*job, v1::JOB_STATUS_QUEUED, Info("validated; queued"));
  if (!moved.ok()) {
    EXPERTD_LOG(Error, "cannot queue a validated job").With("job_id", job_id).With("error", moved);
    return;
  }
  validated_.insert(job_id);
  to_run_.push_back(job_id);
  Notify(job_id);
}

void JobManager::RunJob(const std::string& job_id) {
  absl::StatusOr<v1::FineTuneJob> loaded = LoadJob(job_id);
  if (!loaded.ok() || loaded->status() != v1::JOB_STATUS_QUEUED) return;  // cancelled meanwhile
  v1::FineTuneJob job = *std::move(loaded);
  absl::StatusOr<JobRun> run = MakeRun(job);
  absl::Status s = run.status();
  bool validated;
  {
    absl::MutexLock lock(&mu_);
    validated = validated_.count(job_id) > 0;
  }
  // A job queued by an earlier process is validated again by this one.
  if (s.ok() && !validated) s = executor_->Validate(*run);
  if (!s.ok()) {
    FailJob(&job, JobErrorCodeFor(s), std::string(s.message()));
    return;
  }
  {
    absl::MutexLock lock(&mu_);
    job = LoadJob(job_id).value_or(job);
    if (job.status() != v1::JOB_STATUS_QUEUED || stopping_) return;
    const std::string how =
        run->resume_from.has_value()
            ? absl::StrCat("running; resumed from checkpoint ", run->resume_from->id, " at step ",
                           run->resume_from->step)
            : std::string("running");
    absl::Status moved = TransitionLocked(&job, v1::JOB_STATUS_RUNNING, Info(how));
    if (!moved.ok()) {
      EXPERTD_LOG(Error, "cannot start a job").With("job_id", job_id).With("error", moved);
      return;
    }
    running_id_ = job_id;
    cancel_running_ = false;
    Notify(job_id);
  }
  EXPERTD_LOG(Info, "fine-tune job running").With("job_id", job_id);
  Sink sink(this, &job);
  const absl::Status result = executor_->Run(*run, &sink);
  FinishRun(&job, result, sink.error());
}

void JobManager::FinishRun(v1::FineTuneJob* job, const absl::Status& result,
                           const absl::Status& sink_error) {
  bool cancelled, stopping;
  {
    absl::MutexLock lock(&mu_);
    cancelled = cancel_running_;
    stopping = stopping_;
  }
  if (!sink_error.ok()) {
    // The job's own records could not be written (full disk, ...).
    FailJob(job, JobErrorCodeOf(sink_error), std::string(sink_error.message()));
  } else if (result.ok() || (absl::IsCancelled(result) && (cancelled || stopping))) {
    absl::MutexLock lock(&mu_);
    v1::JobStatus to;
    EventDraft e;
    if (result.ok()) {
      to = v1::JOB_STATUS_SUCCEEDED;
      e = Info(absl::StrCat("succeeded; fine_tuned_model ", job->fine_tuned_model()));
    } else if (cancelled) {
      to = v1::JOB_STATUS_CANCELLED;
      e = Info(absl::StrCat("cancelled by operator at step ", job->progress().step()));
    } else {
      to = v1::JOB_STATUS_QUEUED;
      e = Info(absl::StrCat("stopped by daemon shutdown at step ", job->progress().step(),
                            "; resumes from its last checkpoint on the next start"));
    }
    absl::Status s = TransitionLocked(job, to, std::move(e));
    if (!s.ok()) {
      EXPERTD_LOG(Error, "cannot record the end of a job")
          .With("job_id", job->id())
          .With("error", s);
    }
    Notify(job->id());
  } else {
    const absl::Status error =
        absl::IsCancelled(result)
            ? WithJobErrorCode(absl::InternalError(absl::StrCat(
                                   "the executor stopped without a request: ", result.message())),
                               "internal_error")
            : result;
    FailJob(job, JobErrorCodeFor(error), std::string(error.message()));
  }
  absl::MutexLock lock(&mu_);
  running_id_.clear();
  cancel_running_ = false;
}

}  // namespace expertd::server::jobs
