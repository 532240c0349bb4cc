// The streaming reactors of the job RPCs: UploadFile (client streaming:
// metadata first, then the bytes) and WatchFineTuneJob (server streaming:
// replay after `after_sequence`, then follow live until the job ends).
#ifndef EXPERTD_SERVER_JOB_REACTORS_H_
#define EXPERTD_SERVER_JOB_REACTORS_H_

#include <deque>
#include <memory>
#include <string>

#include "absl/synchronization/mutex.h"
#include "grpcpp/grpcpp.h"
#include "proto/expertd.pb.h"
#include "server/jobs/file_store.h"
#include "server/jobs/job_manager.h"

namespace expertd::server {

// Deletes itself when done. Nothing is stored unless the client half-closes
// after valid metadata and bytes within the cap.
class UploadFileReactor final : public grpc::ServerReadReactor<v1::UploadFileRequest> {
 public:
  UploadFileReactor(grpc::CallbackServerContext* ctx, jobs::FileStore* files,
                    v1::FileInfo* response);
  void OnReadDone(bool ok) override;
  void OnDone() override { delete this; }

 private:
  grpc::CallbackServerContext* const ctx_;
  jobs::FileStore* const files_;
  v1::FileInfo* const response_;
  v1::UploadFileRequest request_;
  std::unique_ptr<jobs::FileUpload> upload_;
};

// Lives in a shared_ptr (the manager wakes it through a weak reference) and
// releases itself in OnDone. Start with WatchJobReactor::Start.
class WatchJobReactor final : public grpc::ServerWriteReactor<v1::FineTuneJobEvent>,
                              public jobs::JobWatcher,
                              public std::enable_shared_from_this<WatchJobReactor> {
 public:
  // The reactor for the call (the job must exist; the caller checked).
  static WatchJobReactor* Start(jobs::JobManager* manager, std::string job_id,
                                uint64_t after_sequence);

  void Wake() override { Pump(); }
  void OnWriteDone(bool ok) override;
  void OnCancel() override;
  void OnDone() override;

  WatchJobReactor(jobs::JobManager* manager, std::string job_id, uint64_t after_sequence)
      : manager_(manager), job_id_(std::move(job_id)), next_after_(after_sequence) {}

 private:
  // Writes the next event, or ends the call when the job ended and every
  // event was written; otherwise waits for Wake.
  void Pump();

  jobs::JobManager* const manager_;
  const std::string job_id_;
  absl::Mutex mu_;
  uint64_t next_after_ ABSL_GUARDED_BY(mu_);
  std::deque<v1::FineTuneJobEvent> pending_ ABSL_GUARDED_BY(mu_);
  v1::FineTuneJobEvent in_flight_;  // written only when no write is in flight
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  std::shared_ptr<WatchJobReactor> keep_alive_;  // reset in OnDone
};

}  // namespace expertd::server

#endif  // EXPERTD_SERVER_JOB_REACTORS_H_
