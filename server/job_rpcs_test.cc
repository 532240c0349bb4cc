// The job and file RPCs over real gRPC (a server on a free localhost port),
// with the fake executor behind them.
#include <cstdlib>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/expertd.grpc.pb.h"
#include "server/admin_service.h"
#include "server/jobs/fake_job_executor.h"
#include "server/jobs/job_system.h"

namespace expertd::server {
namespace {

constexpr char kToken[] = "s3cret";

class JobRpcsTest : public ::testing::Test {
 protected:
  void Start(jobs::FakeJobExecutor::Script script, uint64_t max_upload = 1 << 20,
             bool with_jobs = true) {
    const std::string name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    const std::string data_dir = absl::StrCat(std::getenv("TEST_TMPDIR"), "/", name);
    ASSERT_EQ(std::system(absl::StrCat("rm -rf '", data_dir, "'").c_str()), 0);
    ServerOptions options;
    options.admin_token = kToken;
    state_ = std::make_unique<ServingState>(options);
    admin_ = std::make_unique<AdminServiceImpl>(state_.get());
    if (with_jobs) {
      auto executor = std::make_unique<jobs::FakeJobExecutor>(script);
      executor_ = executor.get();
      jobs::JobSystemOptions o;
      o.data_dir = data_dir;
      o.max_upload_bytes = max_upload;
      auto system = jobs::JobSystem::Open(o, std::move(executor));
      ASSERT_TRUE(system.ok()) << system.status();
      jobs_ = *std::move(system);
      admin_->SetJobSystem(jobs_.get(), absl::OkStatus());
    }
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(admin_.get());
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    ASSERT_GT(port, 0);
    stub_ = v1::AdminService::NewStub(
        grpc::CreateChannel(absl::StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials()));
  }

  void TearDown() override {
    if (server_ != nullptr) {
      if (jobs_ != nullptr) jobs_->manager()->Shutdown();
      server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
      server_->Wait();
    }
    jobs_.reset();
  }

  static void Auth(grpc::ClientContext* ctx) {
    ctx->AddMetadata("authorization", absl::StrCat("Bearer ", kToken));
    ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  }

  grpc::Status Upload(const std::string& filename, const std::vector<std::string>& chunks,
                      v1::FileInfo* info) {
    grpc::ClientContext ctx;
    Auth(&ctx);
    auto writer = stub_->UploadFile(&ctx, info);
    v1::UploadFileRequest meta;
    meta.mutable_metadata()->set_filename(filename);
    writer->Write(meta);
    for (const std::string& c : chunks) {
      v1::UploadFileRequest part;
      part.set_chunk(c);
      if (!writer->Write(part)) break;
    }
    writer->WritesDone();
    return writer->Finish();
  }

  // Reads the watch stream to its end; the events and the final status.
  grpc::Status Watch(const std::string& job_id, uint64_t after,
                     std::vector<v1::FineTuneJobEvent>* events) {
    grpc::ClientContext ctx;
    Auth(&ctx);
    v1::WatchFineTuneJobRequest request;
    request.set_job_id(job_id);
    request.set_after_sequence(after);
    auto reader = stub_->WatchFineTuneJob(&ctx, request);
    v1::FineTuneJobEvent e;
    while (reader->Read(&e)) events->push_back(e);
    return reader->Finish();
  }

  std::unique_ptr<ServingState> state_;
  std::unique_ptr<AdminServiceImpl> admin_;
  jobs::FakeJobExecutor* executor_ = nullptr;
  std::unique_ptr<jobs::JobSystem> jobs_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<v1::AdminService::Stub> stub_;
};

TEST_F(JobRpcsTest, UploadSubmitWatchToSuccess) {
  Start({.total_steps = 5, .checkpoint_every = 2});
  v1::FileInfo info;
  ASSERT_TRUE(Upload("train.jsonl", {"{\"text\": ", "\"hello\"}\n"}, &info).ok());
  EXPECT_EQ(info.bytes(), 18u);
  EXPECT_EQ(info.sha256().size(), 64u);

  v1::SubmitFineTuneRequest submit;
  submit.set_request_id("r1");
  submit.mutable_spec()->set_training_file(info.id());
  v1::FineTuneJob job;
  {
    grpc::ClientContext ctx;
    Auth(&ctx);
    ASSERT_TRUE(stub_->SubmitFineTune(&ctx, submit, &job).ok());
  }
  std::vector<v1::FineTuneJobEvent> events;
  ASSERT_TRUE(Watch(job.id(), 0, &events).ok());
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back().status(), v1::JOB_STATUS_SUCCEEDED);
  for (size_t i = 0; i < events.size(); ++i) EXPECT_EQ(events[i].sequence(), i + 1);

  // Replay after a sequence: the same tail.
  std::vector<v1::FineTuneJobEvent> tail;
  ASSERT_TRUE(Watch(job.id(), 4, &tail).ok());
  ASSERT_EQ(tail.size(), events.size() - 4);
  EXPECT_EQ(tail[0].SerializeAsString(), events[4].SerializeAsString());

  v1::FineTuneJob got;
  {
    grpc::ClientContext ctx;
    Auth(&ctx);
    v1::GetFineTuneJobRequest get;
    get.set_job_id(job.id());
    ASSERT_TRUE(stub_->GetFineTuneJob(&ctx, get, &got).ok());
  }
  EXPECT_EQ(got.status(), v1::JOB_STATUS_SUCCEEDED);
  EXPECT_EQ(got.checkpoints_size(), 3);
  v1::ListFilesResponse files;
  {
    grpc::ClientContext ctx;
    Auth(&ctx);
    ASSERT_TRUE(stub_->ListFiles(&ctx, v1::ListFilesRequest(), &files).ok());
  }
  ASSERT_EQ(files.files_size(), 1);
  EXPECT_EQ(files.files(0).id(), info.id());
  {
    grpc::ClientContext ctx;
    Auth(&ctx);
    v1::DeleteFileRequest del;
    del.set_file_id(info.id());
    v1::DeleteFileResponse deleted;
    ASSERT_TRUE(stub_->DeleteFile(&ctx, del, &deleted).ok());
    EXPECT_TRUE(deleted.deleted());
  }
}

TEST_F(JobRpcsTest, EveryRpcNeedsTheAdminToken) {
  Start({});
  grpc::ClientContext ctx;
  v1::ListFilesResponse files;
  EXPECT_EQ(stub_->ListFiles(&ctx, v1::ListFilesRequest(), &files).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  grpc::ClientContext bad;
  bad.AddMetadata("authorization", "Bearer wrong");
  v1::FineTuneJob job;
  EXPECT_EQ(stub_->SubmitFineTune(&bad, v1::SubmitFineTuneRequest(), &job).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  grpc::ClientContext up;
  v1::FileInfo info;
  auto writer = stub_->UploadFile(&up, &info);
  writer->WritesDone();
  EXPECT_EQ(writer->Finish().error_code(), grpc::StatusCode::UNAUTHENTICATED);
  grpc::ClientContext watch;
  v1::WatchFineTuneJobRequest request;
  auto reader = stub_->WatchFineTuneJob(&watch, request);
  v1::FineTuneJobEvent e;
  EXPECT_FALSE(reader->Read(&e));
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::UNAUTHENTICATED);
}

TEST_F(JobRpcsTest, UploadErrors) {
  Start({}, /*max_upload=*/8);
  v1::FileInfo info;
  grpc::Status big = Upload("big.jsonl", {"12345", "6789"}, &info);
  EXPECT_EQ(big.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_NE(big.error_message().find("--max_upload_bytes"), std::string::npos);
  EXPECT_EQ(Upload("a/b", {"x"}, &info).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  {
    grpc::ClientContext ctx;
    Auth(&ctx);
    auto writer = stub_->UploadFile(&ctx, &info);
    v1::UploadFileRequest part;
    part.set_chunk("no metadata");
    writer->Write(part);
    writer->WritesDone();
    EXPECT_EQ(writer->Finish().error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  }
  v1::ListFilesResponse files;
  grpc::ClientContext ctx;
  Auth(&ctx);
  ASSERT_TRUE(stub_->ListFiles(&ctx, v1::ListFilesRequest(), &files).ok());
  EXPECT_EQ(files.files_size(), 0);
}

TEST_F(JobRpcsTest, WatchFollowsLiveAndTheClientCanCancel) {
  Start({.total_steps = 50, .gated = true});
  v1::FileInfo info;
  ASSERT_TRUE(Upload("t.jsonl", {"{}\n"}, &info).ok());
  v1::SubmitFineTuneRequest submit;
  submit.mutable_spec()->set_training_file(info.id());
  v1::FineTuneJob job;
  {
    grpc::ClientContext ctx;
    Auth(&ctx);
    ASSERT_TRUE(stub_->SubmitFineTune(&ctx, submit, &job).ok());
  }
  grpc::ClientContext ctx;
  Auth(&ctx);
  v1::WatchFineTuneJobRequest request;
  request.set_job_id(job.id());
  auto reader = stub_->WatchFineTuneJob(&ctx, request);
  // Live: each allowed step arrives as a progress event.
  v1::FineTuneJobEvent e;
  for (uint64_t step = 1; step <= 3; ++step) {
    executor_->AllowSteps(1);
    bool seen = false;
    while (!seen && reader->Read(&e)) seen = e.has_progress() && e.progress().step() == step;
    ASSERT_TRUE(seen) << "step " << step;
  }
  ctx.TryCancel();
  while (reader->Read(&e)) {
  }
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
  // The job and the server go on.
  grpc::ClientContext cancel_ctx;
  Auth(&cancel_ctx);
  v1::CancelFineTuneJobRequest cancel;
  cancel.set_job_id(job.id());
  v1::FineTuneJob cancelled;
  ASSERT_TRUE(stub_->CancelFineTuneJob(&cancel_ctx, cancel, &cancelled).ok());
  // Cancel does not wait for the step boundary: the job may still run.
  EXPECT_TRUE(cancelled.status() == v1::JOB_STATUS_RUNNING ||
              cancelled.status() == v1::JOB_STATUS_CANCELLED)
      << cancelled.status();
  std::vector<v1::FineTuneJobEvent> all;
  ASSERT_TRUE(Watch(job.id(), 0, &all).ok());
  EXPECT_EQ(all.back().status(), v1::JOB_STATUS_CANCELLED);
}

TEST_F(JobRpcsTest, WithoutDataDirTheJobRpcsSaySo) {
  Start({}, 1 << 20, /*with_jobs=*/false);
  grpc::ClientContext ctx;
  Auth(&ctx);
  v1::FineTuneJob job;
  grpc::Status s = stub_->SubmitFineTune(&ctx, v1::SubmitFineTuneRequest(), &job);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(s.error_message().find("--data_dir"), std::string::npos);
}

TEST_F(JobRpcsTest, UnknownJobIsNotFound) {
  Start({});
  grpc::ClientContext ctx;
  Auth(&ctx);
  v1::GetFineTuneJobRequest get;
  get.set_job_id("ftjob-none");
  v1::FineTuneJob job;
  EXPECT_EQ(stub_->GetFineTuneJob(&ctx, get, &job).error_code(), grpc::StatusCode::NOT_FOUND);
  std::vector<v1::FineTuneJobEvent> events;
  EXPECT_EQ(Watch("ftjob-none", 0, &events).error_code(), grpc::StatusCode::NOT_FOUND);
}

}  // namespace
}  // namespace expertd::server
