// JobManager: fine-tune jobs through their states (job_state.h), one at a
// time on a dedicated training thread, recorded in the JobStore.
//
//   Submit      checks the spec (InvalidArgument naming the field) and its
//               files, records the job VALIDATING; a repeated request_id
//               returns the first job (same spec) or AlreadyExists.
//   validation  a validation thread of its own checks submitted jobs in
//               order (JobExecutor::Validate -> QUEUED or FAILED), also
//               while another job trains, so a job learns at once whether
//               its dataset is usable.
//   training    the training thread runs the oldest QUEUED job
//               (RUNNING -> SUCCEEDED | FAILED | CANCELLED), recording its
//               events, progress and checkpoints as the executor reports
//               them (JobSink).
//   Cancel      ends a waiting job at once; for a running one it records
//               the request (an event) and returns at once, the job still
//               RUNNING: it stops at its next step boundary and becomes
//               CANCELLED then. Cancel never waits for the executor.
//   Start       re-queues what a previous process left unfinished: a job
//               found RUNNING (kill -9, power loss) resumes from its latest
//               recorded checkpoint (JobRun.resume_from).
//   retention   after each recorded checkpoint, the job's checkpoints older
//               than its newest keep_last_checkpoints are deleted: record
//               and event first, then the directory. The newest and any
//               pinned one (ActivateCheckpoint: loading or served) stay.
//   Shutdown    stops the running job at a step boundary WITHOUT failing it:
//               it goes back to QUEUED and resumes on the next start.
//
// Failures of the job's own I/O (full disk, unwritable --data_dir, a
// database write refused) fail the job with a code ("disk_full",
// "data_dir_unwritable", ...); the daemon keeps serving.
//
// Thread-safe.
#ifndef EXPERTD_SERVER_JOBS_JOB_MANAGER_H_
#define EXPERTD_SERVER_JOBS_JOB_MANAGER_H_

#include <atomic>
#include <deque>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "base/clock.h"
#include "base/env.h"
#include "proto/expertd.pb.h"
#include "server/jobs/file_store.h"
#include "server/jobs/job_executor.h"
#include "server/jobs/job_store.h"

namespace expertd::server::jobs {

// Told when a job has new events (or the manager stops); implemented by
// WatchFineTuneJob's reactor. Wake runs on the thread that changed the job,
// with no manager lock held; it may call Get, Events and shutting_down.
class JobWatcher {
 public:
  virtual ~JobWatcher() = default;
  virtual void Wake() = 0;
};

struct JobManagerOptions {
  Env* env = Env::Default();
  Clock* clock = RealClock::Get();
  // Checkpoints kept per job when its spec does not say
  // (Hyperparameters.keep_last_checkpoints); 0: all.
  uint32_t keep_last_checkpoints = 3;
};

// The job error code for a failure of the manager's own I/O or of an executor
// status without a code: "disk_full" (ResourceExhausted),
// "data_dir_unwritable" (PermissionDenied), else JobErrorCodeOf.
std::string JobErrorCodeFor(const absl::Status& status);

class JobManager final : public CheckpointCatalog {
 public:
  // `executor` may be null: then Submit answers FailedPrecondition
  // ("training not available"). Pointers must outlive the manager.
  JobManager(JobManagerOptions options, JobStore* store, FileStore* files, JobExecutor* executor);
  ~JobManager() override;

  // Recovers unfinished jobs and starts the validation and training
  // threads. Once.
  absl::Status Start();
  // Idempotent; joins both threads.
  void Shutdown();

  absl::StatusOr<v1::FineTuneJob> Submit(const v1::SubmitFineTuneRequest& request);
  absl::StatusOr<v1::FineTuneJob> Get(const std::string& job_id);
  absl::StatusOr<v1::ListFineTuneJobsResponse> List(const v1::ListFineTuneJobsRequest& request);
  absl::StatusOr<v1::FineTuneJob> Cancel(const std::string& job_id);
  // FailedPrecondition while a validating, queued or running job names it.
  absl::StatusOr<v1::DeleteFileResponse> DeleteFile(const std::string& file_id);

  // Events of `job_id` after `after_sequence` (at most `limit`); NotFound
  // for an unknown job.
  absl::StatusOr<std::vector<v1::FineTuneJobEvent>> Events(const std::string& job_id,
                                                           uint64_t after_sequence, int limit);
  // Registers `watcher` for the job's new events until RemoveWatcher (or
  // until it is destroyed: the manager holds it weakly).
  void AddWatcher(const std::string& job_id, std::shared_ptr<JobWatcher> watcher);
  void RemoveWatcher(const std::string& job_id, JobWatcher* watcher);
  bool shutting_down() const;

  // CheckpointCatalog.
  absl::StatusOr<CheckpointRecord> Resolve(absl::string_view job_id,
                                           absl::string_view checkpoint_id) override;
  absl::StatusOr<CheckpointRecord> ResolveAndPin(absl::string_view job_id,
                                                 absl::string_view checkpoint_id) override;
  void Unpin(absl::string_view checkpoint_id) override;

  const std::string& data_dir() const { return files_->data_dir(); }

 private:
  class Sink;
  friend class Sink;

  // Moves job `job` (as read from the store) to `to`, saves it and appends
  // `event`. FailedPrecondition for a transition the table refuses.
  absl::Status TransitionLocked(v1::FineTuneJob* job, v1::JobStatus to, EventDraft event)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<v1::FineTuneJob> LoadJob(const std::string& job_id);
  void FailJob(v1::FineTuneJob* job, const std::string& code, const std::string& message);
  void Notify(const std::string& job_id);
  absl::Status Recover();
  void TrainLoop();
  void ValidateLoop();
  void ValidateJob(const std::string& job_id);
  void RunJob(const std::string& job_id);
  absl::StatusOr<JobRun> MakeRun(const v1::FineTuneJob& job);
  void FinishRun(v1::FineTuneJob* job, const absl::Status& result, const absl::Status& sink_error);
  // Retention after a checkpoint of `job` was recorded (see above). Called
  // on the training thread; a failure is logged and reported as a warning
  // event, never fails the job.
  void PruneCheckpoints(v1::FineTuneJob* job);

  const JobManagerOptions options_;
  JobStore* const store_;
  FileStore* const files_;
  JobExecutor* const executor_;

  mutable absl::Mutex mu_;
  std::deque<std::string> to_validate_ ABSL_GUARDED_BY(mu_);
  std::deque<std::string> to_run_ ABSL_GUARDED_BY(mu_);
  std::set<std::string> validated_ ABSL_GUARDED_BY(mu_);  // in this process
  std::string running_id_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, int> pins_ ABSL_GUARDED_BY(mu_);  // checkpoint id -> pins
  bool cancel_running_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool started_ ABSL_GUARDED_BY(mu_) = false;
  std::atomic<bool> shutting_down_{false};  // stopping_, readable from watchers
  std::thread thread_;           // trains
  std::thread validate_thread_;  // validates

  absl::Mutex watchers_mu_;
  absl::flat_hash_map<std::string, std::vector<std::weak_ptr<JobWatcher>>> watchers_
      ABSL_GUARDED_BY(watchers_mu_);
};

}  // namespace expertd::server::jobs

#endif  // EXPERTD_SERVER_JOBS_JOB_MANAGER_H_
