// JobSystem: the job store, the file store and the job manager over one
// --data_dir, opened and closed together by the daemon.
//
//   --data_dir/expertd.db     the SQLite records (docs/jobs.md)
//   --data_dir/files/<id>     uploaded files
//   --data_dir/jobs/<job id>/ each job's working directory and checkpoints
#ifndef EXPERTD_SERVER_JOBS_JOB_SYSTEM_H_
#define EXPERTD_SERVER_JOBS_JOB_SYSTEM_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "server/jobs/file_store.h"
#include "server/jobs/job_executor.h"
#include "server/jobs/job_manager.h"
#include "server/jobs/job_store.h"

namespace expertd::server::jobs {

struct JobSystemOptions {
  std::string data_dir;  // created when absent
  uint64_t max_upload_bytes = 1ull << 30;
  Env* env = Env::Default();
  Clock* clock = RealClock::Get();
  uint32_t keep_last_checkpoints = 3;  // JobManagerOptions::keep_last_checkpoints
};

class JobSystem {
 public:
  // Opens the records, recovers unfinished jobs and starts the training
  // thread. `executor` may be null (jobs then cannot be submitted).
  static absl::StatusOr<std::unique_ptr<JobSystem>> Open(JobSystemOptions options,
                                                         std::unique_ptr<JobExecutor> executor);
  // Shuts the manager down (the running job stops, resumable).
  ~JobSystem();

  JobStore* store() { return store_.get(); }
  FileStore* files() { return files_.get(); }
  JobManager* manager() { return manager_.get(); }

 private:
  JobSystem() = default;
  std::unique_ptr<JobExecutor> executor_;
  std::unique_ptr<JobStore> store_;
  std::unique_ptr<FileStore> files_;
  std::unique_ptr<JobManager> manager_;
};

}  // namespace expertd::server::jobs

#endif  // EXPERTD_SERVER_JOBS_JOB_SYSTEM_H_
