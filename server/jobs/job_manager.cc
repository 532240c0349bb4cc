#include "server/jobs/job_manager.h"

#include <algorithm>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "base/log.h"
#include "base/status_macros.h"
#include "google/protobuf/util/message_differencer.h"
#include "server/jobs/job_spec.h"
#include "server/jobs/job_state.h"

namespace expertd::server::jobs {
namespace {

constexpr uint32_t kDefaultPageSize = 20;
constexpr uint32_t kMaxPageSize = 100;

void SetTime(absl::Time t, google::protobuf::Timestamp* out) {
  const int64_t micros = absl::ToUnixMicros(t);
  out->set_seconds(micros / 1000000);
  out->set_nanos(static_cast<int32_t>(micros % 1000000) * 1000);
}

EventDraft Info(std::string message) {
  EventDraft e;
  e.message = std::move(message);
  return e;
}

std::string DescribeProgress(const JobProgressUpdate& p) {
  std::string text = absl::StrFormat("step %d/%d loss %.6g lr %.3g grad_norm %.4g tokens/s %.1f",
                                     p.step, p.total_steps, p.train_loss, p.learning_rate,
                                     p.grad_norm, p.tokens_per_second);
  if (p.validation_loss.has_value()) absl::StrAppendFormat(&text, " val_loss %.6g", *p.validation_loss);
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

std::string JobErrorCodeFor(const absl::Status& status) {
  if (status.ok()) return "";
  if (status.GetPayload(kJobErrorCodeUrl).has_value()) return JobErrorCodeOf(status);
  if (absl::IsResourceExhausted(status)) return "disk_full";
  if (absl::IsPermissionDenied(status)) return "data_dir_unwritable";
  return JobErrorCodeOf(status);
}

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
      SetError(WithJobErrorCode(s, s.GetPayload(kJobErrorCodeUrl).has_value()
                                       ? JobErrorCodeOf(s)
                                       : (absl::IsInvalidArgument(s) ? "checkpoint_invalid"
                                                                     : JobErrorCodeFor(s))));
      return s;
    }
    job_->add_checkpoints(record.id);
    if (!record.model_name.empty()) job_->set_fine_tuned_model(record.model_name);
    EventDraft e = Info(absl::StrCat("checkpoint ", record.id, " at step ", record.step));
    Save(&e);
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
    absl::Status s = manager_->store_->UpdateJob(*job_, e, manager_->options_.clock->Now()).status();
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

JobManager::JobManager(JobManagerOptions options, JobStore* store, FileStore* files,
                       JobExecutor* executor)
    : options_(std::move(options)), store_(store), files_(files), executor_(executor) {}

JobManager::~JobManager() { Shutdown(); }

absl::Status JobManager::Start() {
  {
    absl::MutexLock lock(&mu_);
    if (started_) return absl::FailedPreconditionError("job manager already started");
    started_ = true;
  }
  RETURN_IF_ERROR(Recover());
  thread_ = std::thread([this] { TrainLoop(); });
  return absl::OkStatus();
}

void JobManager::Shutdown() {
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return;
    stopping_ = true;
  }
  shutting_down_.store(true);
  if (thread_.joinable()) thread_.join();
  // Watchers of jobs that stay unfinished learn the manager is gone.
  std::vector<std::string> ids;
  {
    absl::MutexLock lock(&watchers_mu_);
    for (const auto& [id, unused] : watchers_) ids.push_back(id);
  }
  for (const std::string& id : ids) Notify(id);
}

bool JobManager::shutting_down() const { return shutting_down_.load(); }

absl::StatusOr<v1::FineTuneJob> JobManager::LoadJob(const std::string& job_id) {
  ASSIGN_OR_RETURN(std::optional<StoredJob> stored, store_->GetJob(job_id));
  if (!stored.has_value()) return absl::NotFoundError(absl::StrCat("no job '", job_id, "'"));
  return std::move(stored->job);
}

absl::Status JobManager::TransitionLocked(v1::FineTuneJob* job, v1::JobStatus to, EventDraft e) {
  RETURN_IF_ERROR(CheckTransition(job->status(), to));
  const absl::Time now = options_.clock->Now();
  v1::FineTuneJob next = *job;
  next.set_status(to);
  if (to == v1::JOB_STATUS_RUNNING && !next.has_start_time()) SetTime(now, next.mutable_start_time());
  if (IsTerminal(to)) SetTime(now, next.mutable_finish_time());
  RETURN_IF_ERROR(store_->UpdateJob(next, &e, now).status());
  *job = std::move(next);
  return absl::OkStatus();
}

void JobManager::Notify(const std::string& job_id) {
  std::vector<std::shared_ptr<JobWatcher>> wake;
  {
    absl::MutexLock lock(&watchers_mu_);
    auto it = watchers_.find(job_id);
    if (it == watchers_.end()) return;
    for (const std::weak_ptr<JobWatcher>& w : it->second) {
      if (std::shared_ptr<JobWatcher> alive = w.lock()) wake.push_back(std::move(alive));
    }
  }
  for (const std::shared_ptr<JobWatcher>& w : wake) w->Wake();
}

void JobManager::AddWatcher(const std::string& job_id, std::shared_ptr<JobWatcher> watcher) {
  absl::MutexLock lock(&watchers_mu_);
  watchers_[job_id].push_back(std::move(watcher));
}

void JobManager::RemoveWatcher(const std::string& job_id, JobWatcher* watcher) {
  absl::MutexLock lock(&watchers_mu_);
  auto it = watchers_.find(job_id);
  if (it == watchers_.end()) return;
  auto& list = it->second;
  list.erase(std::remove_if(list.begin(), list.end(),
                            [watcher](const std::weak_ptr<JobWatcher>& w) {
                              std::shared_ptr<JobWatcher> alive = w.lock();
                              return alive == nullptr || alive.get() == watcher;
                            }),
             list.end());
  if (list.empty()) watchers_.erase(it);
}

absl::StatusOr<v1::FineTuneJob> JobManager::Submit(const v1::SubmitFineTuneRequest& request) {
  const v1::FineTuneJobSpec& spec = request.spec();
  absl::MutexLock lock(&mu_);
  if (stopping_) return absl::UnavailableError("the daemon is shutting down; submit again later");
  if (!request.request_id().empty()) {
    ASSIGN_OR_RETURN(std::optional<StoredJob> seen, store_->FindJobByRequestId(request.request_id()));
    if (seen.has_value()) {
      if (google::protobuf::util::MessageDifferencer::Equals(seen->job.spec(), spec)) {
        return std::move(seen->job);
      }
      return absl::AlreadyExistsError(absl::StrCat("request_id '", request.request_id(),
                                                   "' was used for job ", seen->job.id(),
                                                   " with a different spec"));
    }
  }
  RETURN_IF_ERROR(ValidateJobSpec(spec));
  RETURN_IF_ERROR(files_->Resolve("spec.training_file", spec.training_file()).status());
  if (!spec.validation_file().empty()) {
    RETURN_IF_ERROR(files_->Resolve("spec.validation_file", spec.validation_file()).status());
  }
  // After the spec checks, so a daemon without an executor still says what
  // is wrong with a spec.
  if (executor_ == nullptr) {
    return absl::FailedPreconditionError(
        "SubmitFineTune: training not available (this daemon runs without a training executor)");
  }
  v1::FineTuneJob job;
  job.set_id(NewRandomId("ftjob-"));
  *job.mutable_spec() = spec;
  job.set_status(v1::JOB_STATUS_VALIDATING);
  const absl::Time now = options_.clock->Now();
  SetTime(now, job.mutable_create_time());
  RETURN_IF_ERROR(store_->InsertJob(job, request.request_id(),
                                    Info(absl::StrCat("created; training_file ",
                                                      spec.training_file())),
                                    now));
  to_validate_.push_back(job.id());
  EXPERTD_LOG(Info, "fine-tune job submitted").With("job_id", job.id());
  return job;
}

absl::StatusOr<v1::FineTuneJob> JobManager::Get(const std::string& job_id) {
  if (job_id.empty()) return absl::InvalidArgumentError("job_id: required");
  return LoadJob(job_id);
}

absl::StatusOr<v1::ListFineTuneJobsResponse> JobManager::List(
    const v1::ListFineTuneJobsRequest& request) {
  uint32_t page_size = request.page_size() == 0 ? kDefaultPageSize : request.page_size();
  page_size = std::min(page_size, kMaxPageSize);
  int64_t before_row = 0;
  if (!request.page_token().empty() &&
      (!absl::SimpleAtoi(request.page_token(), &before_row) || before_row <= 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("page_token: '", request.page_token(), "' is not a token this server gave"));
  }
  // One more than the page: whether another page exists.
  std::vector<int64_t> rows;
  ASSIGN_OR_RETURN(std::vector<v1::FineTuneJob> jobs,
                   store_->ListJobs(before_row, static_cast<int>(page_size) + 1, &rows));
  v1::ListFineTuneJobsResponse response;
  for (size_t i = 0; i < std::min<size_t>(jobs.size(), page_size); ++i) {
    *response.add_jobs() = std::move(jobs[i]);
  }
  // The token is the database row of the page's last job (rows only grow).
  if (jobs.size() > page_size) response.set_next_page_token(absl::StrCat(rows[page_size - 1]));
  return response;
}

absl::StatusOr<v1::FineTuneJob> JobManager::Cancel(const std::string& job_id) {
  if (job_id.empty()) return absl::InvalidArgumentError("job_id: required");
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(v1::FineTuneJob job, LoadJob(job_id));
  if (IsTerminal(job.status())) {
    return absl::FailedPreconditionError(
        absl::StrCat("job ", job_id, " already ended (", JobStatusText(job.status()), ")"));
  }
  if (running_id_ != job_id) {
    RETURN_IF_ERROR(TransitionLocked(&job, v1::JOB_STATUS_CANCELLED, Info("cancelled by operator")));
    Notify(job_id);
    return job;
  }
  cancel_running_ = true;
  // The executor stops at its next step boundary; wait for it, bounded.
  auto stopped = [this, &job_id]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    return running_id_ != job_id;
  };
  mu_.AwaitWithTimeout(absl::Condition(&stopped), options_.cancel_wait);
  return LoadJob(job_id);
}

absl::StatusOr<v1::DeleteFileResponse> JobManager::DeleteFile(const std::string& file_id) {
  if (file_id.empty()) return absl::InvalidArgumentError("file_id: required");
  // Under mu_: a Submit naming the file cannot slip between the check and
  // the removal.
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(std::vector<std::string> users, store_->ActiveJobsUsingFile(file_id));
  if (!users.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "file ", file_id, " is used by job ", users.front(),
        " (validating, queued or running); cancel it or wait for it to end"));
  }
  RETURN_IF_ERROR(files_->Delete(file_id));
  v1::DeleteFileResponse response;
  response.set_file_id(file_id);
  response.set_deleted(true);
  return response;
}

absl::StatusOr<std::vector<v1::FineTuneJobEvent>> JobManager::Events(const std::string& job_id,
                                                                     uint64_t after_sequence,
                                                                     int limit) {
  return store_->EventsAfter(job_id, after_sequence, limit);
}

absl::StatusOr<CheckpointRecord> JobManager::Resolve(absl::string_view job_id,
                                                     absl::string_view checkpoint_id) {
  if (job_id.empty() == checkpoint_id.empty()) {
    return absl::InvalidArgumentError("set exactly one of job_id and checkpoint_id");
  }
  if (!checkpoint_id.empty()) {
    ASSIGN_OR_RETURN(std::optional<CheckpointRecord> c,
                     store_->GetCheckpoint(std::string(checkpoint_id)));
    if (!c.has_value()) return absl::NotFoundError(absl::StrCat("no checkpoint '", checkpoint_id, "'"));
    return *c;
  }
  ASSIGN_OR_RETURN(v1::FineTuneJob job, LoadJob(std::string(job_id)));
  ASSIGN_OR_RETURN(std::vector<CheckpointRecord> all, store_->Checkpoints(job.id()));
  if (all.empty()) {
    return absl::NotFoundError(absl::StrCat("job ", job_id, " has no checkpoint yet"));
  }
  return all.back();
}

absl::Status JobManager::Recover() {
  ASSIGN_OR_RETURN(std::vector<std::string> running, store_->JobIdsWithStatus({v1::JOB_STATUS_RUNNING}));
  absl::MutexLock lock(&mu_);
  for (const std::string& id : running) {
    ASSIGN_OR_RETURN(v1::FineTuneJob job, LoadJob(id));
    ASSIGN_OR_RETURN(std::vector<CheckpointRecord> checkpoints, store_->Checkpoints(id));
    const std::string how =
        checkpoints.empty()
            ? std::string("no checkpoint yet: restarts from the beginning")
            : absl::StrCat("resumes from checkpoint ", checkpoints.back().id, " at step ",
                           checkpoints.back().step);
    EventDraft e;
    e.level = v1::FineTuneJobEvent::LEVEL_WARNING;
    e.message = absl::StrCat("daemon restarted while the job ran; ", how);
    RETURN_IF_ERROR(TransitionLocked(&job, v1::JOB_STATUS_QUEUED, std::move(e)));
  }
  ASSIGN_OR_RETURN(std::vector<std::string> queued, store_->JobIdsWithStatus({v1::JOB_STATUS_QUEUED}));
  ASSIGN_OR_RETURN(std::vector<std::string> validating,
                   store_->JobIdsWithStatus({v1::JOB_STATUS_VALIDATING}));
  to_run_.assign(queued.begin(), queued.end());
  to_validate_.assign(validating.begin(), validating.end());
  if (!queued.empty() || !validating.empty()) {
    EXPERTD_LOG(Info, "fine-tune jobs recovered")
        .With("queued", static_cast<int64_t>(queued.size()))
        .With("validating", static_cast<int64_t>(validating.size()));
  }
  return absl::OkStatus();
}

void JobManager::TrainLoop() {
  while (true) {
    std::string id;
    bool validate = false;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
        return stopping_ || !to_validate_.empty() || !to_run_.empty();
      };
      mu_.Await(absl::Condition(&ready));
      if (stopping_) return;
      validate = !to_validate_.empty();
      std::deque<std::string>& from = validate ? to_validate_ : to_run_;
      id = from.front();
      from.pop_front();
    }
    if (validate) {
      ValidateJob(id);
    } else {
      RunJob(id);
    }
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
  absl::StatusOr<std::string> train = files_->Resolve("spec.training_file", job.spec().training_file());
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
        absl::Status(made.code(), absl::StrCat("cannot create the job directory: ", made.message())),
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
      EXPERTD_LOG(Error, "cannot record the end of a job").With("job_id", job->id()).With("error", s);
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
