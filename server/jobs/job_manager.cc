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

}  // namespace

std::string JobErrorCodeFor(const absl::Status& status) {
  if (status.ok()) return "";
  if (status.GetPayload(kJobErrorCodeUrl).has_value()) return JobErrorCodeOf(status);
  if (absl::IsResourceExhausted(status)) return "disk_full";
  if (absl::IsPermissionDenied(status)) return "data_dir_unwritable";
  return JobErrorCodeOf(status);
}

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
  validate_thread_ = std::thread([this] { ValidateLoop(); });
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
  if (validate_thread_.joinable()) validate_thread_.join();
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
  if (to == v1::JOB_STATUS_RUNNING && !next.has_start_time())
    SetTime(now, next.mutable_start_time());
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
    ASSIGN_OR_RETURN(std::optional<StoredJob> seen,
                     store_->FindJobByRequestId(request.request_id()));
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
  RETURN_IF_ERROR(
      store_->InsertJob(job, request.request_id(),
                        Info(absl::StrCat("created; training_file ", spec.training_file())), now));
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
    RETURN_IF_ERROR(
        TransitionLocked(&job, v1::JOB_STATUS_CANCELLED, Info("cancelled by operator")));
    Notify(job_id);
    return job;
  }
  if (cancel_running_) return job;  // already requested
  cancel_running_ = true;
  // The executor stops at its next step boundary and FinishRun records
  // CANCELLED; a step may take long, so the caller (a gRPC callback thread)
  // does not wait for it.
  EventDraft e = Info(absl::StrCat("cancel requested at step ", job.progress().step(),
                                   "; the job stops at its next step boundary"));
  RETURN_IF_ERROR(store_->UpdateJob(job, &e, options_.clock->Now()).status());
  Notify(job_id);
  return job;
}

absl::StatusOr<v1::DeleteFileResponse> JobManager::DeleteFile(const std::string& file_id) {
  if (file_id.empty()) return absl::InvalidArgumentError("file_id: required");
  // Under mu_: a Submit naming the file cannot slip between the check and
  // the removal.
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(std::vector<std::string> users, store_->ActiveJobsUsingFile(file_id));
  if (!users.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("file ", file_id, " is used by job ", users.front(),
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
    if (!c.has_value())
      return absl::NotFoundError(absl::StrCat("no checkpoint '", checkpoint_id, "'"));
    return *c;
  }
  ASSIGN_OR_RETURN(v1::FineTuneJob job, LoadJob(std::string(job_id)));
  ASSIGN_OR_RETURN(std::vector<CheckpointRecord> all, store_->Checkpoints(job.id()));
  if (all.empty()) {
    return absl::NotFoundError(absl::StrCat("job ", job_id, " has no checkpoint yet"));
  }
  return all.back();
}

absl::StatusOr<CheckpointRecord> JobManager::ResolveAndPin(absl::string_view job_id,
                                                           absl::string_view checkpoint_id) {
  // Under mu_, as retention decides under it: no deletion between the two.
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(CheckpointRecord record, Resolve(job_id, checkpoint_id));
  ++pins_[record.id];
  return record;
}

void JobManager::Unpin(absl::string_view checkpoint_id) {
  absl::MutexLock lock(&mu_);
  auto it = pins_.find(checkpoint_id);
  if (it != pins_.end() && --it->second <= 0) pins_.erase(it);
}

absl::Status JobManager::Recover() {
  ASSIGN_OR_RETURN(std::vector<std::string> running,
                   store_->JobIdsWithStatus({v1::JOB_STATUS_RUNNING}));
  absl::MutexLock lock(&mu_);
  for (const std::string& id : running) {
    ASSIGN_OR_RETURN(v1::FineTuneJob job, LoadJob(id));
    ASSIGN_OR_RETURN(std::vector<CheckpointRecord> checkpoints, store_->Checkpoints(id));
    const std::string how = checkpoints.empty()
                                ? std::string("no checkpoint yet: restarts from the beginning")
                                : absl::StrCat("resumes from checkpoint ", checkpoints.back().id,
                                               " at step ", checkpoints.back().step);
    EventDraft e;
    e.level = v1::FineTuneJobEvent::LEVEL_WARNING;
    e.message = absl::StrCat("daemon restarted while the job ran; ", how);
    RETURN_IF_ERROR(TransitionLocked(&job, v1::JOB_STATUS_QUEUED, std::move(e)));
  }
  ASSIGN_OR_RETURN(std::vector<std::string> queued,
                   store_->JobIdsWithStatus({v1::JOB_STATUS_QUEUED}));
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

}  // namespace expertd::server::jobs
