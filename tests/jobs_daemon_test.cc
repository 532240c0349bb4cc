// The job system through the real binaries: expertd with --data_dir, driven
// by expertctl's files/finetune commands and by gRPC; then a restart on the
// same --data_dir, and a daemon without one.
#include <sys/wait.h>

#include <cstdio>
#include <fstream>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/expertd.grpc.pb.h"
#include "tests/testing/subprocess.h"

namespace expertd {
namespace {

using testing::Subprocess;

constexpr char kAdminToken[] = "jobs-admin-token-0123456789";

struct CommandResult {
  int exit_code = -1;
  std::string output;
};

class JobsDaemonTest : public ::testing::Test {
 protected:
  void SetUp() override {
    tmp_ = ::testing::TempDir();
    token_file_ = tmp_ + "/jobs_admin_token";
    std::ofstream(token_file_) << kAdminToken << "\n";
    data_dir_ = tmp_ + "/jobs_data";
    ASSERT_EQ(std::system(absl::StrCat("rm -rf '", data_dir_, "'").c_str()), 0);
  }

  void StartDaemon(Subprocess* daemon, const std::vector<std::string>& extra) {
    const std::string port_file = absl::StrCat(tmp_, "/jobs_port_", ++starts_);
    std::remove(port_file.c_str());
    std::vector<std::string> argv = {testing::RunfilePath("server/expertd"),
                                     "--model_dir=tests/data/fixtures/qwen2_moe_mixed",
                                     "--listen=127.0.0.1:0",
                                     "--port_file=" + port_file,
                                     "--admin_token_file=" + token_file_,
                                     "--shutdown_grace_seconds=2"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    ASSERT_TRUE(daemon->Start(argv, absl::StrCat(tmp_, "/jobs_daemon_", starts_, ".log")));
    port_ = testing::WaitForPortFile(port_file, absl::Seconds(60));
    ASSERT_GT(port_, 0) << "daemon never wrote its port; output:\n" << daemon->Output();
  }

  // Runs expertctl against the daemon and waits for it (bounded).
  CommandResult Expertctl(const std::vector<std::string>& args) {
    std::vector<std::string> argv = {testing::RunfilePath("client/expertctl"),
                                     absl::StrCat("--server=127.0.0.1:", port_),
                                     "--admin_token_file=" + token_file_, "--timeout_seconds=60"};
    argv.insert(argv.end(), args.begin(), args.end());
    Subprocess ctl;
    const std::string out = absl::StrCat(tmp_, "/expertctl_", ++commands_, ".out");
    CommandResult r;
    if (!ctl.Start(argv, out)) return r;
    r.exit_code = ctl.Wait(absl::Seconds(90));
    r.output = ctl.Output();
    return r;
  }

  static std::string JsonField(const std::string& json, const std::string& field) {
    const std::string key = "\"" + field + "\": \"";
    const size_t at = json.find(key);
    if (at == std::string::npos) return "";
    const size_t start = at + key.size();
    return json.substr(start, json.find('"', start) - start);
  }

  std::string tmp_, token_file_, data_dir_;
  int port_ = 0;
  int starts_ = 0;
  int commands_ = 0;
};

TEST_F(JobsDaemonTest, FilesAndJobsThroughExpertctlSurviveARestart) {
  const std::string dataset = tmp_ + "/train.jsonl";
  const std::string text = "{\"text\": \"hello world\"}\n{\"text\": \"again\"}\n";
  std::ofstream(dataset) << text;
  std::string file_id;
  {
    Subprocess daemon;
    StartDaemon(&daemon, {"--data_dir=" + data_dir_, "--max_upload_bytes=1MiB"});
    CommandResult up = Expertctl({"files", "upload", dataset});
    ASSERT_EQ(up.exit_code, 0) << up.output;
    file_id = JsonField(up.output, "id");
    ASSERT_EQ(file_id.rfind("file-", 0), 0u) << up.output;
    EXPECT_EQ(JsonField(up.output, "filename"), "train.jsonl");
    // uint64 prints as a JSON string.
    EXPECT_EQ(JsonField(up.output, "bytes"), std::to_string(text.size())) << up.output;

    // A path outside --data_dir is refused, naming the field.
    CommandResult outside = Expertctl({"finetune", "create", "--training_file=../../etc/passwd"});
    EXPECT_EQ(outside.exit_code, 1) << outside.output;
    EXPECT_NE(outside.output.find("spec.training_file"), std::string::npos) << outside.output;

    CommandResult list = Expertctl({"finetune", "list"});
    EXPECT_EQ(list.exit_code, 0) << list.output;
    CommandResult watch = Expertctl({"finetune", "watch", "ftjob-0000000000000000"});
    EXPECT_EQ(watch.exit_code, 1);
    EXPECT_NE(watch.output.find("NOT_FOUND"), std::string::npos) << watch.output;
    daemon.Signal(SIGTERM);
    ASSERT_EQ(daemon.Wait(absl::Seconds(60)), 0) << daemon.Output();
  }
  {
    // The records are on disk: a new daemon on the same --data_dir lists the file.
    Subprocess daemon;
    StartDaemon(&daemon, {"--data_dir=" + data_dir_});
    CommandResult files = Expertctl({"files", "list"});
    ASSERT_EQ(files.exit_code, 0) << files.output;
    EXPECT_NE(files.output.find(file_id), std::string::npos) << files.output;
    CommandResult del = Expertctl({"files", "delete", file_id});
    EXPECT_EQ(del.exit_code, 0) << del.output;
    CommandResult again = Expertctl({"files", "delete", file_id});
    EXPECT_EQ(again.exit_code, 1);
    EXPECT_NE(again.output.find("NOT_FOUND"), std::string::npos) << again.output;
    daemon.Signal(SIGTERM);
    ASSERT_EQ(daemon.Wait(absl::Seconds(60)), 0) << daemon.Output();
  }
}

// The whole path with the real training executor: upload a dataset, submit,
// watch to success, and find the checkpoint on the job.
TEST_F(JobsDaemonTest, UploadSubmitWatchToSuccessWithTheTrainingExecutor) {
  const std::string dataset = tmp_ + "/tokens.jsonl";
  {
    std::ofstream out(dataset);
    for (int i = 0; i < 8; ++i) {
      out << "{\"token_ids\": [" << (i * 7) % 512 << ", " << (i * 13 + 1) % 512 << ", "
          << (i * 31 + 2) % 512 << ", " << (i * 3 + 5) % 512 << ", 9, 11]}\n";
    }
  }
  Subprocess daemon;
  StartDaemon(&daemon, {"--data_dir=" + data_dir_, "--train_threads=1"});
  CommandResult up = Expertctl({"files", "upload", dataset});
  ASSERT_EQ(up.exit_code, 0) << up.output;
  const std::string file_id = JsonField(up.output, "id");
  CommandResult created =
      Expertctl({"finetune", "create", "--training_file=" + file_id, "--epochs=1",
                 "--batch_size=4", "--learning_rate=0.001", "--request_id=e2e-1"});
  ASSERT_EQ(created.exit_code, 0) << created.output << daemon.Output();
  const std::string job_id = JsonField(created.output, "id");
  ASSERT_EQ(job_id.rfind("ftjob-", 0), 0u) << created.output;
  CommandResult watch = Expertctl({"finetune", "watch", job_id});
  ASSERT_EQ(watch.exit_code, 0) << watch.output << daemon.Output();
  EXPECT_NE(watch.output.find("SUCCEEDED"), std::string::npos) << watch.output;
  EXPECT_NE(watch.output.find("step 1/1  loss "), std::string::npos) << watch.output;
  CommandResult got = Expertctl({"finetune", "get", job_id});
  ASSERT_EQ(got.exit_code, 0) << got.output;
  EXPECT_NE(got.output.find("\"checkpoints\""), std::string::npos) << got.output;
  EXPECT_NE(got.output.find("JOB_STATUS_SUCCEEDED"), std::string::npos) << got.output;
}

// `finetune activate` (by job, by checkpoint id, an unknown job) and
// `finetune cancel` (a long job, cancelled while it waits or runs; then
// again, after it ended) through expertctl and the real training executor.
TEST_F(JobsDaemonTest, ActivateAndCancelThroughExpertctl) {
  const std::string dataset = tmp_ + "/tokens.jsonl";
  {
    std::ofstream out(dataset);
    for (int i = 0; i < 8; ++i) {
      out << "{\"token_ids\": [" << (i * 5 + 3) % 512 << ", " << (i * 11 + 7) % 512
          << ", 9, 11, 13]}\n";
    }
  }
  Subprocess daemon;
  StartDaemon(&daemon, {"--data_dir=" + data_dir_, "--train_threads=1"});
  CommandResult up = Expertctl({"files", "upload", dataset});
  ASSERT_EQ(up.exit_code, 0) << up.output;
  const std::string file_id = JsonField(up.output, "id");

  CommandResult created = Expertctl({"finetune", "create", "--training_file=" + file_id,
                                     "--epochs=1", "--batch_size=8", "--suffix=short"});
  ASSERT_EQ(created.exit_code, 0) << created.output << daemon.Output();
  const std::string job_id = JsonField(created.output, "id");
  CommandResult watch = Expertctl({"finetune", "watch", job_id});
  ASSERT_EQ(watch.exit_code, 0) << watch.output << daemon.Output();
  CommandResult got = Expertctl({"finetune", "get", job_id});
  ASSERT_EQ(got.exit_code, 0) << got.output;
  const std::string model_name = JsonField(got.output, "fine_tuned_model");
  EXPECT_NE(model_name.find(":ft-short"), std::string::npos) << got.output;

  CommandResult activated = Expertctl({"finetune", "activate", job_id});
  ASSERT_EQ(activated.exit_code, 0) << activated.output << daemon.Output();
  EXPECT_EQ(JsonField(activated.output, "model_name"), model_name) << activated.output;
  const std::string checkpoint_id = JsonField(activated.output, "checkpoint_id");
  ASSERT_EQ(checkpoint_id.rfind("ckpt-", 0), 0u) << activated.output;
  EXPECT_NE(got.output.find(checkpoint_id), std::string::npos) << got.output;
  CommandResult info = Expertctl({"info"});
  ASSERT_EQ(info.exit_code, 0) << info.output;
  EXPECT_EQ(JsonField(info.output, "model_name"), model_name) << info.output;
  CommandResult by_id = Expertctl({"finetune", "activate", "--checkpoint_id=" + checkpoint_id});
  EXPECT_EQ(by_id.exit_code, 0) << by_id.output;
  EXPECT_EQ(JsonField(by_id.output, "checkpoint_id"), checkpoint_id) << by_id.output;
  CommandResult unknown = Expertctl({"finetune", "activate", "ftjob-0000000000000000"});
  EXPECT_EQ(unknown.exit_code, 1);
  EXPECT_NE(unknown.output.find("NOT_FOUND"), std::string::npos) << unknown.output;
  CommandResult both = Expertctl({"finetune", "activate", job_id, "--checkpoint_id=x"});
  EXPECT_EQ(both.exit_code, 2) << both.output;  // usage: one of the two

  // 1000 epochs of one step each: the cancel lands long before the end.
  CommandResult long_job = Expertctl(
      {"finetune", "create", "--training_file=" + file_id, "--epochs=1000", "--batch_size=8"});
  ASSERT_EQ(long_job.exit_code, 0) << long_job.output;
  const std::string long_id = JsonField(long_job.output, "id");
  CommandResult cancel = Expertctl({"finetune", "cancel", long_id});
  ASSERT_EQ(cancel.exit_code, 0) << cancel.output;
  // A waiting job ends at once; a running one is still RUNNING in the reply.
  const std::string replied = JsonField(cancel.output, "status");
  EXPECT_TRUE(replied == "JOB_STATUS_CANCELLED" || replied == "JOB_STATUS_RUNNING")
      << cancel.output;
  CommandResult watched = Expertctl({"finetune", "watch", long_id});
  EXPECT_EQ(watched.exit_code, 1) << watched.output;  // cancelled is not success
  CommandResult ended = Expertctl({"finetune", "get", long_id});
  ASSERT_EQ(ended.exit_code, 0) << ended.output;
  EXPECT_EQ(JsonField(ended.output, "status"), "JOB_STATUS_CANCELLED") << ended.output;
  CommandResult again = Expertctl({"finetune", "cancel", long_id});
  EXPECT_EQ(again.exit_code, 1) << again.output;
  EXPECT_NE(again.output.find("FAILED_PRECONDITION"), std::string::npos) << again.output;
  EXPECT_TRUE(daemon.running());
}

TEST_F(JobsDaemonTest, UploadPastTheCapIsRefused) {
  Subprocess daemon;
  StartDaemon(&daemon, {"--data_dir=" + data_dir_, "--max_upload_bytes=16"});
  const std::string big = tmp_ + "/big.jsonl";
  std::ofstream(big) << std::string(64, 'x');
  CommandResult up = Expertctl({"files", "upload", big});
  EXPECT_EQ(up.exit_code, 1);
  EXPECT_NE(up.output.find("RESOURCE_EXHAUSTED"), std::string::npos) << up.output;
}

TEST_F(JobsDaemonTest, WithoutDataDirJobRpcsSaySo) {
  Subprocess daemon;
  StartDaemon(&daemon, {});
  CommandResult list = Expertctl({"files", "list"});
  EXPECT_EQ(list.exit_code, 1);
  EXPECT_NE(list.output.find("FAILED_PRECONDITION"), std::string::npos) << list.output;
  EXPECT_NE(list.output.find("--data_dir"), std::string::npos) << list.output;
}

TEST_F(JobsDaemonTest, UnusableDataDirKeepsTheDaemonServing) {
  const std::string blocker = tmp_ + "/not_a_dir";
  std::ofstream(blocker) << "x";
  Subprocess daemon;
  StartDaemon(&daemon, {"--data_dir=" + blocker + "/data"});
  CommandResult list = Expertctl({"finetune", "list"});
  EXPECT_EQ(list.exit_code, 1);
  EXPECT_NE(list.output.find("FAILED_PRECONDITION"), std::string::npos) << list.output;
  EXPECT_NE(list.output.find("unusable"), std::string::npos) << list.output;
  EXPECT_TRUE(daemon.running());
}

}  // namespace
}  // namespace expertd
