// AdminService: fine-tune jobs, checkpoint activation, expert statistics.
// Every call is authenticated first (server/admin_auth.h).
#ifndef EXPERTD_SERVER_ADMIN_SERVICE_H_
#define EXPERTD_SERVER_ADMIN_SERVICE_H_

#include "absl/status/status.h"
#include "proto/expertd.grpc.pb.h"
#include "server/checkpoint_activation.h"
#include "server/jobs/job_system.h"
#include "server/serving_state.h"

namespace expertd::server {

class AdminServiceImpl final : public v1::AdminService::CallbackService {
 public:
  // `activator` (null: ActivateCheckpoint answers FAILED_PRECONDITION) must
  // outlive the service. The checkpoint catalog is set on the activator.
  explicit AdminServiceImpl(ServingState* state, CheckpointActivator* activator = nullptr)
      : state_(state), activator_(activator) {}

  // The job system behind the fine-tune and file RPCs (not owned), or null
  // with the reason those RPCs then answer FAILED_PRECONDITION. Call before
  // the server starts.
  void SetJobSystem(jobs::JobSystem* jobs, absl::Status unavailable);

  grpc::ServerUnaryReactor* SubmitFineTune(grpc::CallbackServerContext* ctx,
                                           const v1::SubmitFineTuneRequest* request,
                                           v1::FineTuneJob* response) override;
  grpc::ServerUnaryReactor* GetFineTuneJob(grpc::CallbackServerContext* ctx,
                                           const v1::GetFineTuneJobRequest* request,
                                           v1::FineTuneJob* response) override;
  grpc::ServerUnaryReactor* ListFineTuneJobs(grpc::CallbackServerContext* ctx,
                                             const v1::ListFineTuneJobsRequest* request,
                                             v1::ListFineTuneJobsResponse* response) override;
  grpc::ServerUnaryReactor* CancelFineTuneJob(grpc::CallbackServerContext* ctx,
                                              const v1::CancelFineTuneJobRequest* request,
                                              v1::FineTuneJob* response) override;
  grpc::ServerWriteReactor<v1::FineTuneJobEvent>* WatchFineTuneJob(
      grpc::CallbackServerContext* ctx, const v1::WatchFineTuneJobRequest* request) override;
  grpc::ServerUnaryReactor* ActivateCheckpoint(grpc::CallbackServerContext* ctx,
                                               const v1::ActivateCheckpointRequest* request,
                                               v1::ActivateCheckpointResponse* response) override;
  grpc::ServerUnaryReactor* GetExpertStats(grpc::CallbackServerContext* ctx,
                                           const v1::GetExpertStatsRequest* request,
                                           v1::ExpertStats* response) override;
  grpc::ServerReadReactor<v1::UploadFileRequest>* UploadFile(grpc::CallbackServerContext* ctx,
                                                            v1::FileInfo* response) override;
  grpc::ServerUnaryReactor* ListFiles(grpc::CallbackServerContext* ctx,
                                      const v1::ListFilesRequest* request,
                                      v1::ListFilesResponse* response) override;
  grpc::ServerUnaryReactor* DeleteFile(grpc::CallbackServerContext* ctx,
                                       const v1::DeleteFileRequest* request,
                                       v1::DeleteFileResponse* response) override;

 private:
  // Authentication result for this call's metadata.
  grpc::Status Authenticate(grpc::CallbackServerContext* ctx) const;

  // Authentication, then the job system: OK or the status to answer.
  grpc::Status CheckJobs(grpc::CallbackServerContext* ctx) const;

  ServingState* const state_;             // not owned
  CheckpointActivator* const activator_;  // not owned; may be null
  jobs::JobSystem* jobs_ = nullptr;
  absl::Status jobs_unavailable_ = absl::FailedPreconditionError(
      "fine-tune jobs and files need --data_dir (the daemon runs without one)");
};

}  // namespace expertd::server

#endif  // EXPERTD_SERVER_ADMIN_SERVICE_H_
