#include "server/jobs/job_system.h"

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace expertd::server::jobs {

absl::StatusOr<std::unique_ptr<JobSystem>> JobSystem::Open(JobSystemOptions options,
                                                           std::unique_ptr<JobExecutor> executor) {
  if (options.data_dir.empty()) return absl::InvalidArgumentError("--data_dir: required");
  absl::Status made = CreateDirs(options.env, options.data_dir);
  if (!made.ok()) {
    return absl::Status(made.code(), absl::StrCat("--data_dir: ", made.message()));
  }
  std::unique_ptr<JobSystem> system(new JobSystem());
  system->executor_ = std::move(executor);
  ASSIGN_OR_RETURN(system->store_, JobStore::Open(options.data_dir + "/expertd.db"));
  FileStoreOptions file_options;
  file_options.env = options.env;
  file_options.clock = options.clock;
  file_options.data_dir = options.data_dir;
  file_options.max_upload_bytes = options.max_upload_bytes;
  ASSIGN_OR_RETURN(system->files_, FileStore::Open(file_options, system->store_.get()));
  JobManagerOptions manager_options;
  manager_options.env = options.env;
  manager_options.clock = options.clock;
  manager_options.keep_last_checkpoints = options.keep_last_checkpoints;
  system->manager_ = std::make_unique<JobManager>(manager_options, system->store_.get(),
                                                  system->files_.get(), system->executor_.get());
  RETURN_IF_ERROR(system->manager_->Start());
  return system;
}

JobSystem::~JobSystem() {
  if (manager_ != nullptr) manager_->Shutdown();
}

}  // namespace expertd::server::jobs
