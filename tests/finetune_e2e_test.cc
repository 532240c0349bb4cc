// Fine-tuning end to end through the real expertd process: upload, submit,
// watch, activate the result and see generation change while a stream begun
// before the activation finishes on the base model; a kill -9 mid-job that
// resumes to weights bitwise equal to an uninterrupted job; and an expert
// offload job whose experts are 4x the daemon's training device budget.
#include <signal.h>

#include <fstream>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/expertd.grpc.pb.h"
#include "proto/grpc/health/v1/health.grpc.pb.h"
#include "tests/testing/subprocess.h"

namespace expertd {
namespace {

using testing::Subprocess;

constexpr char kAdminToken[] = "e2e-admin-token-0123456789abcdef";
// Tiny qwen3_moe (2 layers, 8 experts, fp32).
constexpr char kTinyModel[] = "tests/data/zoo_hotswap/seed1";
// The same with 64 experts per layer: 24 MiB of expert training state.
constexpr char kOffloadModel[] = "tests/data/zoo_offload";
constexpr uint64_t kOffloadBudget = 6ull << 20;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

bool Terminal(v1::JobStatus s) {
  return s == v1::JOB_STATUS_SUCCEEDED || s == v1::JOB_STATUS_FAILED ||
         s == v1::JOB_STATUS_CANCELLED;
}

class FineTuneE2eTest : public ::testing::Test {
 protected:
  void SetUp() override {
    tmp_ = ::testing::TempDir();
    token_file_ = tmp_ + "/e2e_admin_token";
    std::ofstream(token_file_) << kAdminToken << "\n";
  }

  // Checkpoints take tens of MB a job: a test leaves none behind (stress runs
  // would fill the disk).
  void TearDown() override {
    for (const std::string& dir : dirs_) {
      EXPECT_EQ(std::system(absl::StrCat("rm -rf '", dir, "'").c_str()), 0);
    }
  }

  std::string FreshDir(const std::string& name) {
    const std::string dir = absl::StrCat(tmp_, "/", name);
    EXPECT_EQ(std::system(absl::StrCat("rm -rf '", dir, "'").c_str()), 0);
    dirs_.push_back(dir);
    return dir;
  }

  // Starts expertd on `model` with --data_dir and waits for its port.
  void StartDaemon(Subprocess* daemon, const std::string& model, const std::string& data_dir,
                   const std::vector<std::string>& extra = {}) {
    const std::string port_file = absl::StrCat(tmp_, "/e2e_port_", ++starts_);
    std::remove(port_file.c_str());
    std::vector<std::string> argv = {testing::RunfilePath("server/expertd"),
                                     "--model_dir=" + model,
                                     "--listen=127.0.0.1:0",
                                     "--port_file=" + port_file,
                                     "--admin_token_file=" + token_file_,
                                     "--data_dir=" + data_dir,
                                     "--train_threads=1",
                                     "--shutdown_grace_seconds=2"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    ASSERT_TRUE(daemon->Start(argv, absl::StrCat(tmp_, "/e2e_daemon_", starts_, ".log")));
    const int port = testing::WaitForPortFile(port_file, absl::Seconds(60));
    ASSERT_GT(port, 0) << "daemon never wrote its port; output:\n" << daemon->Output();
    auto channel = grpc::CreateChannel(absl::StrCat("127.0.0.1:", port),
                                       grpc::InsecureChannelCredentials());
    admin_ = v1::AdminService::NewStub(channel);
    inference_ = v1::InferenceService::NewStub(channel);
    port_ = port;
    ASSERT_TRUE(WaitUntilServing(channel, daemon)) << "never SERVING:\n" << daemon->Output();
  }

  // Polls gRPC health (as testing::ExpertdProcess does) until the model is
  // loaded; false past the deadline or when the daemon exits.
  static bool WaitUntilServing(const std::shared_ptr<grpc::Channel>& channel, Subprocess* daemon) {
    auto stub = grpc::health::v1::Health::NewStub(channel);
    const absl::Time deadline = absl::Now() + absl::Seconds(60);
    while (absl::Now() < deadline && daemon->running()) {
      grpc::ClientContext ctx;
      ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
      grpc::health::v1::HealthCheckRequest req;
      grpc::health::v1::HealthCheckResponse resp;
      if (stub->Check(&ctx, req, &resp).ok() &&
          resp.status() == grpc::health::v1::HealthCheckResponse::SERVING) {
        return true;
      }
      absl::SleepFor(absl::Milliseconds(50));
    }
    return false;
  }

  std::unique_ptr<grpc::ClientContext> AdminContext(absl::Duration timeout = absl::Seconds(60)) {
    auto ctx = std::make_unique<grpc::ClientContext>();
    ctx->AddMetadata("authorization", absl::StrCat("Bearer ", kAdminToken));
    ctx->set_deadline(absl::ToChronoTime(absl::Now() + timeout));
    return ctx;
  }

  // Uploads `path` with expertctl (the operator's tool); the file id.
  std::string Upload(const std::string& path) {
    Subprocess ctl;
    const std::string out = absl::StrCat(tmp_, "/e2e_upload_", ++commands_, ".out");
    EXPECT_TRUE(ctl.Start({testing::RunfilePath("client/expertctl"),
                           absl::StrCat("--server=127.0.0.1:", port_),
                           "--admin_token_file=" + token_file_, "--timeout_seconds=60", "files",
                           "upload", path},
                          out));
    EXPECT_EQ(ctl.Wait(absl::Seconds(90)), 0) << ctl.Output();
    const std::string text = ctl.Output();
    const std::string key = "\"id\": \"";
    const size_t at = text.find(key);
    if (at == std::string::npos) return "";
    const size_t start = at + key.size();
    return text.substr(start, text.find('"', start) - start);
  }

  // A token dataset: `lines` copies of one 12-token sequence, which a
  // fine-tune memorises.
  std::string WriteDataset(const std::string& name, int lines) {
    const std::string path = absl::StrCat(tmp_, "/", name);
    std::ofstream out(path);
    for (int i = 0; i < lines; ++i) {
      out << "{\"token_ids\": [301, 17, 402, 88, 123, 250, 7, 499, 61, 333, 45, 210]}\n";
    }
    return path;
  }

  std::string Submit(const v1::FineTuneJobSpec& spec) {
    v1::SubmitFineTuneRequest req;
    *req.mutable_spec() = spec;
    v1::FineTuneJob job;
    auto ctx = AdminContext();
    grpc::Status st = admin_->SubmitFineTune(ctx.get(), req, &job);
    EXPECT_TRUE(st.ok()) << st.error_message();
    return job.id();
  }

  v1::FineTuneJob Get(const std::string& id) {
    v1::GetFineTuneJobRequest req;
    req.set_job_id(id);
    v1::FineTuneJob job;
    auto ctx = AdminContext();
    grpc::Status st = admin_->GetFineTuneJob(ctx.get(), req, &job);
    EXPECT_TRUE(st.ok()) << st.error_message();
    return job;
  }

  // Watches the job's events from the first until `done(event)` holds; false
  // (a test failure) when the deadline passes or the stream ends first. Every
  // event's message goes to `messages`.
  bool WatchUntil(const std::string& id,
                  const std::function<bool(const v1::FineTuneJobEvent&)>& done,
                  std::vector<std::string>* messages, absl::Duration timeout) {
    v1::WatchFineTuneJobRequest req;
    req.set_job_id(id);
    auto ctx = AdminContext(timeout);
    auto reader = admin_->WatchFineTuneJob(ctx.get(), req);
    v1::FineTuneJobEvent event;
    while (reader->Read(&event)) {
      if (messages != nullptr) messages->push_back(event.message());
      if (done(event)) {
        ctx->TryCancel();
        reader->Finish();
        return true;
      }
    }
    grpc::Status st = reader->Finish();
    ADD_FAILURE() << "watch ended before the condition: " << st.error_message();
    return false;
  }

  // Watches to a terminal status and expects SUCCEEDED; the events' messages.
  std::vector<std::string> WatchToSuccess(const std::string& id, Subprocess* daemon) {
    std::vector<std::string> messages;
    EXPECT_TRUE(WatchUntil(
        id, [](const v1::FineTuneJobEvent& e) { return Terminal(e.status()); }, &messages,
        absl::Seconds(240)));
    const v1::FineTuneJob job = Get(id);
    EXPECT_EQ(job.status(), v1::JOB_STATUS_SUCCEEDED)
        << job.error().code() << ": " << job.error().message() << "\n"
        << daemon->Output();
    return messages;
  }

  // The directory of the last "checkpoint <id> at step N: <dir>" event.
  static std::string LastCheckpointDir(const std::vector<std::string>& messages) {
    std::string dir;
    for (const std::string& m : messages) {
      if (m.rfind("checkpoint ", 0) != 0) continue;
      const size_t colon = m.find(": ");
      if (colon != std::string::npos) dir = m.substr(colon + 2);
    }
    return dir;
  }

  static v1::GenerateRequest Greedy(int max_new) {
    v1::GenerateRequest r;
    for (uint32_t id : {301u, 17u, 402u, 88u}) r.mutable_token_ids()->add_ids(id);
    r.mutable_stopping()->set_max_new_tokens(max_new);
    r.mutable_stopping()->set_ignore_eos(true);
    r.mutable_sampling()->set_temperature(0);
    return r;
  }

  std::vector<uint32_t> GenerateTokens(int max_new) {
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(60)));
    auto reader = inference_->Generate(&ctx, Greedy(max_new));
    std::vector<uint32_t> tokens;
    v1::GenerateResponse msg;
    while (reader->Read(&msg)) tokens.insert(tokens.end(), msg.token_ids().begin(),
                                             msg.token_ids().end());
    grpc::Status st = reader->Finish();
    EXPECT_TRUE(st.ok()) << st.error_message();
    return tokens;
  }

  static v1::FineTuneJobSpec Spec(const std::string& file_id, int epochs, int checkpoint_every,
                                  double lr) {
    v1::FineTuneJobSpec spec;
    spec.set_training_file(file_id);
    spec.set_seed(7);
    v1::Hyperparameters* h = spec.mutable_hyperparameters();
    h->set_n_epochs(epochs);
    h->set_batch_size(2);
    h->set_max_seq_len(12);  // one example a row: packing would make one row of them all
    h->set_learning_rate(lr);
    h->set_lr_scheduler("constant");
    if (checkpoint_every > 0) h->set_checkpoint_every_steps(checkpoint_every);
    return spec;
  }

  // Runs `spec` once on a daemon that is SIGKILLed right after its first
  // checkpoint is recorded and restarted on the same --data_dir; the final
  // checkpoint's model.safetensors, and whether the job said it resumed.
  std::string KilledAndResumed(const std::string& model, const std::string& dataset,
                               const v1::FineTuneJobSpec& spec_without_file,
                               const std::vector<std::string>& extra,
                               std::vector<std::string>* all_messages) {
    const std::string data_dir = FreshDir("killed_data");
    std::string job_id;
    {
      Subprocess daemon;
      StartDaemon(&daemon, model, data_dir, extra);
      v1::FineTuneJobSpec spec = spec_without_file;
      spec.set_training_file(Upload(dataset));
      job_id = Submit(spec);
      // The checkpoint event follows the checkpoint's record in the database:
      // kill at once, many steps before the job can end.
      EXPECT_TRUE(WatchUntil(
          job_id,
          [](const v1::FineTuneJobEvent& e) { return e.message().rfind("checkpoint ", 0) == 0; },
          all_messages, absl::Seconds(240)));
      daemon.Signal(SIGKILL);
      daemon.Wait(absl::Seconds(60));
      EXPECT_EQ(daemon.term_signal(), SIGKILL);
    }
    Subprocess daemon;
    StartDaemon(&daemon, model, data_dir, extra);
    const v1::FineTuneJob restarted = Get(job_id);
    EXPECT_GE(restarted.checkpoints_size(), 1);
    EXPECT_LT(restarted.progress().step(), restarted.progress().total_steps())
        << "the job ended before the kill; give it more steps";
    std::vector<std::string> after = WatchToSuccess(job_id, &daemon);
    all_messages->insert(all_messages->end(), after.begin(), after.end());
    bool resumed = false;
    for (const std::string& m : after) resumed = resumed || m.find("resumed at step") == 0;
    EXPECT_TRUE(resumed) << "no 'resumed at step' event after the restart";
    const std::string dir = LastCheckpointDir(after);
    EXPECT_FALSE(dir.empty());
    daemon.Signal(SIGTERM);
    daemon.Wait(absl::Seconds(60));
    return ReadFile(dir + "/model.safetensors");
  }

  // The same job uninterrupted in a fresh --data_dir.
  std::string Uninterrupted(const std::string& model, const std::string& dataset,
                            const v1::FineTuneJobSpec& spec_without_file,
                            const std::vector<std::string>& extra) {
    Subprocess daemon;
    StartDaemon(&daemon, model, FreshDir("straight_data"), extra);
    v1::FineTuneJobSpec spec = spec_without_file;
    spec.set_training_file(Upload(dataset));
    const std::string dir = LastCheckpointDir(WatchToSuccess(Submit(spec), &daemon));
    EXPECT_FALSE(dir.empty());
    daemon.Signal(SIGTERM);
    daemon.Wait(absl::Seconds(60));
    return ReadFile(dir + "/model.safetensors");
  }

  std::string tmp_, token_file_;
  std::vector<std::string> dirs_;
  int port_ = 0;
  int starts_ = 0;
  int commands_ = 0;
  std::unique_ptr<v1::AdminService::Stub> admin_;
  std::unique_ptr<v1::InferenceService::Stub> inference_;
};

// The operator's whole path: the fine-tune changes what the model generates,
// and a stream that began before the activation finishes on the base model.
TEST_F(FineTuneE2eTest, ActivatedFineTuneChangesGenerationButNotAStreamInFlight) {
  Subprocess daemon;
  StartDaemon(&daemon, kTinyModel, FreshDir("proof_data"));
  // Long enough (400 tokens) that the in-flight stream is still generating
  // while the activation loads the checkpoint.
  const std::vector<uint32_t> base = GenerateTokens(400);
  ASSERT_EQ(base.size(), 400u);

  const std::string job_id =
      Submit(Spec(Upload(WriteDataset("proof.jsonl", 8)), /*epochs=*/6, 0, /*lr=*/0.01));
  const std::vector<std::string> events = WatchToSuccess(job_id, &daemon);
  ASSERT_FALSE(LastCheckpointDir(events).empty());

  // A stream the base model has begun answering.
  grpc::ClientContext stream_ctx;
  stream_ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(60)));
  auto reader = inference_->Generate(&stream_ctx, Greedy(400));
  std::vector<uint32_t> in_flight;
  v1::GenerateResponse msg;
  ASSERT_TRUE(reader->Read(&msg));
  in_flight.assign(msg.token_ids().begin(), msg.token_ids().end());

  v1::ActivateCheckpointRequest activate;
  activate.set_job_id(job_id);
  v1::ActivateCheckpointResponse activated;
  auto ctx = AdminContext();
  grpc::Status st = admin_->ActivateCheckpoint(ctx.get(), activate, &activated);
  ASSERT_TRUE(st.ok()) << st.error_message() << daemon.Output();
  EXPECT_EQ(activated.checkpoint_id(), Get(job_id).checkpoints().rbegin()->c_str());

  while (reader->Read(&msg)) in_flight.insert(in_flight.end(), msg.token_ids().begin(),
                                              msg.token_ids().end());
  st = reader->Finish();
  ASSERT_TRUE(st.ok()) << st.error_message();
  EXPECT_EQ(in_flight, base) << "a stream begun before the activation changed model";

  const std::vector<uint32_t> tuned = GenerateTokens(48);
  ASSERT_EQ(tuned.size(), 48u);
  EXPECT_NE(tuned, std::vector<uint32_t>(base.begin(), base.begin() + 48))
      << "the activated fine-tune generates what the base model does";
  // The fine-tune memorised the dataset's sequence: its continuation follows.
  const std::vector<uint32_t> memorised = {123, 250, 7, 499, 61, 333, 45, 210};
  EXPECT_EQ(std::vector<uint32_t>(tuned.begin(), tuned.begin() + 8), memorised);
}

// kill -9 after a checkpoint: the restarted daemon resumes the job, and its
// final weights are bitwise those of the same job never interrupted.
TEST_F(FineTuneE2eTest, KillNineMidJobResumesToTheUninterruptedWeightsBitwise) {
  const std::string dataset = WriteDataset("resume.jsonl", 32);
  // 32 lines / batch 2 = 16 steps an epoch; 3 epochs; a checkpoint every 4 steps.
  const v1::FineTuneJobSpec spec = Spec("", 3, 4, 0.001);
  std::vector<std::string> messages;
  const std::string resumed = KilledAndResumed(kTinyModel, dataset, spec, {}, &messages);
  const std::string straight = Uninterrupted(kTinyModel, dataset, spec, {});
  ASSERT_FALSE(straight.empty());
  EXPECT_EQ(resumed.size(), straight.size());
  EXPECT_TRUE(resumed == straight) << "resumed weights differ from the uninterrupted job's";
}

// Expert offload through the daemon: experts' training state 4x the
// --train_device_memory_bytes budget; the job places them on the host, says
// so, completes, and a kill -9 loses nothing.
TEST_F(FineTuneE2eTest, OffloadedExpertsFourTimesTheBudgetTrainAndSurviveKillNine) {
  const std::string dataset = WriteDataset("offload.jsonl", 32);
  // 32 steps, a checkpoint every 8 (each ~20 MB with the AdamW state).
  v1::FineTuneJobSpec spec = Spec("", 2, 8, 0.001);
  spec.mutable_schedule()->set_offload_experts(true);
  const std::vector<std::string> flags = {
      absl::StrCat("--train_device_memory_bytes=", kOffloadBudget)};
  std::vector<std::string> messages;
  const std::string resumed = KilledAndResumed(kOffloadModel, dataset, spec, flags, &messages);
  // "experts host: experts (N bytes with gradients and AdamW state) ..."
  int64_t expert_bytes = -1;
  for (const std::string& m : messages) {
    const std::string prefix = "experts host: experts (";
    if (m.rfind(prefix, 0) != 0) continue;
    const size_t end = m.find(' ', prefix.size());
    ASSERT_TRUE(absl::SimpleAtoi(m.substr(prefix.size(), end - prefix.size()), &expert_bytes)) << m;
    EXPECT_NE(m.find(absl::StrCat(kOffloadBudget, " bytes")), std::string::npos) << m;
  }
  ASSERT_GT(expert_bytes, 0) << "no 'experts host' placement event";
  EXPECT_GE(expert_bytes, 4 * static_cast<int64_t>(kOffloadBudget));
  const std::string straight = Uninterrupted(kOffloadModel, dataset, spec, flags);
  ASSERT_FALSE(straight.empty());
  EXPECT_TRUE(resumed == straight) << "resumed offload weights differ from the uninterrupted job's";
}

// The SSD tier through the daemon: with schedule.host_memory_bytes below the
// experts' training state the job keeps the rest in an SSD tier file in its
// directory, says host+ssd, completes, and a kill -9 loses nothing.
TEST_F(FineTuneE2eTest, SsdTierJobTrainsAndSurvivesKillNine) {
  const std::string dataset = WriteDataset("ssd.jsonl", 32);
  v1::FineTuneJobSpec spec = Spec("", 2, 8, 0.001);
  spec.mutable_schedule()->set_offload_experts(true);
  spec.mutable_schedule()->set_host_memory_bytes(2 * kOffloadBudget);
  const std::vector<std::string> flags = {
      absl::StrCat("--train_device_memory_bytes=", kOffloadBudget)};
  std::vector<std::string> messages;
  const std::string resumed = KilledAndResumed(kOffloadModel, dataset, spec, flags, &messages);
  bool tiered = false;
  for (const std::string& m : messages) {
    if (m.rfind("experts host+ssd: ", 0) != 0) continue;
    tiered = true;
    EXPECT_NE(m.find(absl::StrCat("--host_memory_bytes=", 2 * kOffloadBudget)), std::string::npos)
        << m;
    EXPECT_NE(m.find("expert_training_state.bin"), std::string::npos) << m;
  }
  EXPECT_TRUE(tiered) << "no 'experts host+ssd' placement event";
  const std::string straight = Uninterrupted(kOffloadModel, dataset, spec, flags);
  ASSERT_FALSE(straight.empty());
  EXPECT_TRUE(resumed == straight) << "resumed SSD-tier weights differ from the uninterrupted job's";
}

}  // namespace
}  // namespace expertd
