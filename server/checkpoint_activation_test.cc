// ActivateCheckpoint through the real daemon (in process, over gRPC and the
// OpenAI HTTP port), with a fake checkpoint catalog over real model
// directories: two qwen3_moe models that differ only in their weights, a
// mixtral one, and a corrupted copy.
#include "server/checkpoint_activation.h"

#include <atomic>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "nlohmann/json.hpp"
#include "proto/expertd.grpc.pb.h"
#include "server/daemon.h"

namespace expertd::server {
namespace {

namespace fs = std::filesystem;

constexpr char kToken[] = "activation-test-admin-token-0123";
constexpr char kBaseDir[] = "tests/data/zoo_hotswap/seed1";
constexpr char kTunedDir[] = "tests/data/zoo_hotswap/seed2";
constexpr char kMixtralDir[] = "tests/data/zoo_hotswap/mixtral";
constexpr int kShort = 24;  // tokens per reference generation
constexpr int kLong = 480;  // the stream that straddles a swap (tiny model: 512 positions)

std::vector<uint32_t> Prompt() { return {11, 257, 42, 99, 300, 7, 64, 128}; }

// Resolves ids from a map; optionally blocks in Resolve until `gate` opens.
class FakeCatalog : public jobs::CheckpointCatalog {
 public:
  void Add(const std::string& id, const std::string& job, const std::string& path,
           const std::string& name) {
    absl::MutexLock lock(&mu_);
    records_[id] = {id, job, path, 1, name};
  }
  void Gate(absl::Notification* entered, absl::Notification* open) {
    absl::MutexLock lock(&mu_);
    entered_ = entered;
    gate_ = open;
  }
  absl::StatusOr<jobs::CheckpointRecord> Resolve(absl::string_view job_id,
                                                 absl::string_view checkpoint_id) override {
    absl::Notification* entered;
    absl::Notification* gate;
    {
      absl::MutexLock lock(&mu_);
      entered = entered_;
      gate = gate_;
      entered_ = gate_ = nullptr;
    }
    if (entered != nullptr) entered->Notify();
    if (gate != nullptr) gate->WaitForNotification();
    absl::MutexLock lock(&mu_);
    for (const auto& [id, record] : records_) {
      if (id == checkpoint_id || (!job_id.empty() && record.job_id == job_id)) return record;
    }
    return absl::NotFoundError(
        absl::StrCat("no checkpoint '", checkpoint_id, "' / job '", job_id, "'"));
  }
  absl::StatusOr<jobs::CheckpointRecord> ResolveAndPin(absl::string_view job_id,
                                                       absl::string_view checkpoint_id) override {
    absl::StatusOr<jobs::CheckpointRecord> record = Resolve(job_id, checkpoint_id);
    absl::MutexLock lock(&mu_);
    if (record.ok()) ++pins_[record->id];
    return record;
  }
  void Unpin(absl::string_view checkpoint_id) override {
    absl::MutexLock lock(&mu_);
    auto it = pins_.find(std::string(checkpoint_id));
    if (it != pins_.end() && --it->second == 0) pins_.erase(it);
  }
  // Checkpoint id -> pins held.
  std::map<std::string, int> pins() {
    absl::MutexLock lock(&mu_);
    return pins_;
  }

 private:
  absl::Mutex mu_;
  std::map<std::string, int> pins_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, jobs::CheckpointRecord> records_ ABSL_GUARDED_BY(mu_);
  absl::Notification* entered_ ABSL_GUARDED_BY(mu_) = nullptr;
  absl::Notification* gate_ ABSL_GUARDED_BY(mu_) = nullptr;
};

// A copy of the base model whose weights file is cut in half.
std::string MakeCorruptCopy() {
  const fs::path dir = fs::path(::testing::TempDir()) / "corrupt_checkpoint";
  fs::remove_all(dir);
  fs::create_directories(dir);
  for (const auto& entry : fs::directory_iterator(kBaseDir)) {
    fs::copy_file(entry.path(), dir / entry.path().filename());
  }
  const fs::path weights = dir / "model.safetensors";
  fs::resize_file(weights, fs::file_size(weights) / 2);
  return dir.string();
}

class CheckpointActivationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    catalog_.Add("ckpt-tuned-1", "job-tuned", fs::absolute(kTunedDir).string(), "tuned");
    catalog_.Add("ckpt-mixtral-1", "job-mixtral", fs::absolute(kMixtralDir).string(), "other");
    catalog_.Add("ckpt-corrupt-1", "job-corrupt", MakeCorruptCopy(), "broken");
  }

  void StartDaemon(bool with_catalog = true) {
    ServerOptions o;
    o.listen = "127.0.0.1:0";
    o.http_listen = "127.0.0.1:0";
    o.model_dir = kBaseDir;
    o.model_name = "base-model";
    o.backend = "cpu";
    o.threads = 1;
    o.kv_cache_bytes = 8 << 20;
    o.admin_token = kToken;
    o.log_requests = false;
    o.shutdown_grace_seconds = 5;
    daemon_ = std::make_unique<Daemon>(o);
    if (with_catalog) daemon_->SetCheckpointCatalog(&catalog_);
    ASSERT_TRUE(daemon_->Start().ok());
    const absl::Time deadline = absl::Now() + absl::Seconds(60);
    while (!daemon_->load_finished()) {
      ASSERT_LT(absl::Now(), deadline) << "the model never loaded";
      absl::SleepFor(absl::Milliseconds(10));
    }
    ASSERT_TRUE(daemon_->load_status().ok()) << daemon_->load_status();
    channel_ = grpc::CreateChannel("127.0.0.1:" + std::to_string(daemon_->port()),
                                   grpc::InsecureChannelCredentials());
    inference_ = v1::InferenceService::NewStub(channel_);
    admin_ = v1::AdminService::NewStub(channel_);
  }

  void TearDown() override {
    if (daemon_ != nullptr) daemon_->Shutdown();
  }

  static void SetDeadline(grpc::ClientContext* ctx, int seconds = 60) {
    ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(seconds));
  }

  static v1::GenerateRequest GreedyRequest(int max_new_tokens) {
    v1::GenerateRequest req;
    for (uint32_t id : Prompt()) req.mutable_token_ids()->add_ids(id);
    req.mutable_sampling()->set_temperature(0);
    req.mutable_stopping()->set_max_new_tokens(max_new_tokens);
    req.mutable_stopping()->set_ignore_eos(true);
    return req;
  }

  // Greedy tokens from the served model; fails the test on any error.
  std::vector<uint32_t> Greedy(int max_new_tokens) {
    grpc::ClientContext ctx;
    SetDeadline(&ctx);
    v1::GenerateUnaryResponse resp;
    grpc::Status s = inference_->GenerateUnary(&ctx, GreedyRequest(max_new_tokens), &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return {resp.token_ids().begin(), resp.token_ids().end()};
  }

  grpc::Status Activate(const std::string& job_id, const std::string& checkpoint_id,
                        v1::ActivateCheckpointResponse* resp = nullptr,
                        const std::string& token = kToken) {
    grpc::ClientContext ctx;
    SetDeadline(&ctx);
    ctx.AddMetadata("authorization", "Bearer " + token);
    v1::ActivateCheckpointRequest req;
    req.set_job_id(job_id);
    req.set_checkpoint_id(checkpoint_id);
    v1::ActivateCheckpointResponse ignored;
    return admin_->ActivateCheckpoint(&ctx, req, resp != nullptr ? resp : &ignored);
  }

  std::string ServedName() {
    grpc::ClientContext ctx;
    SetDeadline(&ctx);
    v1::ModelInfo info;
    grpc::Status s = inference_->GetModelInfo(&ctx, {}, &info);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return info.model_name();
  }

  uint32_t RunningRequests() {
    grpc::ClientContext ctx;
    SetDeadline(&ctx);
    v1::ServerInfo info;
    grpc::Status s = inference_->GetServerInfo(&ctx, {}, &info);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return info.running_requests();
  }

  std::string OpenAiModelId() {
    httplib::Client client("127.0.0.1", daemon_->http_port());
    auto res = client.Get("/v1/models");
    if (!res || res->status != 200) return "<no answer>";
    nlohmann::json body = nlohmann::json::parse(res->body, nullptr, false);
    if (body.is_discarded() || body["data"].empty()) return "<bad body>";
    return body["data"][0]["id"].get<std::string>();
  }

  FakeCatalog catalog_;
  std::unique_ptr<Daemon> daemon_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::InferenceService::Stub> inference_;
  std::unique_ptr<v1::AdminService::Stub> admin_;
};

TEST_F(CheckpointActivationTest, InFlightStreamKeepsOldWeightsNewRequestsGetNewOnes) {
  StartDaemon();
  const std::vector<uint32_t> base_long = Greedy(kLong);
  ASSERT_EQ(base_long.size(), static_cast<size_t>(kLong));
  const std::vector<uint32_t> base(base_long.begin(), base_long.begin() + kShort);
  EXPECT_EQ(Greedy(kShort), base);  // greedy is deterministic

  // A stream that is running on the base weights when the switch happens.
  // The tiny model may finish it before the switch lands (a loaded machine);
  // then the attempt proves nothing and is repeated, a bounded number of
  // times. Every stream, straddling or not, must give exactly base's tokens.
  bool straddled = false;
  for (int attempt = 0; attempt < 8 && !straddled; ++attempt) {
    grpc::Status s = Activate("", "base");
    ASSERT_TRUE(s.ok()) << s.error_message();
    grpc::ClientContext stream_ctx;
    SetDeadline(&stream_ctx, 120);
    auto reader = inference_->Generate(&stream_ctx, GreedyRequest(kLong));
    std::vector<uint32_t> streamed;
    v1::GenerateResponse msg;
    while (streamed.empty()) {
      ASSERT_TRUE(reader->Read(&msg)) << "the stream ended before its first token";
      streamed.insert(streamed.end(), msg.token_ids().begin(), msg.token_ids().end());
    }
    v1::ActivateCheckpointResponse resp;
    s = Activate("", "ckpt-tuned-1", &resp);
    ASSERT_TRUE(s.ok()) << s.error_message();
    EXPECT_EQ(resp.model_name(), "tuned");
    EXPECT_EQ(resp.checkpoint_id(), "ckpt-tuned-1");
    EXPECT_GT(resp.activate_time().seconds(), 0);
    // Still running (on the replaced model: GetServerInfo counts every live
    // model's requests), so the stream straddles the switch.
    straddled = RunningRequests() >= 1;
    if (straddled) {
      // New requests get the new weights while the stream still runs.
      EXPECT_NE(Greedy(kShort), base);
    }
    while (reader->Read(&msg)) {
      streamed.insert(streamed.end(), msg.token_ids().begin(), msg.token_ids().end());
    }
    grpc::Status stream_status = reader->Finish();
    ASSERT_TRUE(stream_status.ok()) << stream_status.error_message();
    // The stream finishes on the weights it started with.
    EXPECT_EQ(streamed, base_long) << "attempt " << attempt;
  }
  ASSERT_TRUE(straddled) << "no stream was still running when the switch landed";

  // After the switch: the new name everywhere and the new weights' tokens.
  EXPECT_EQ(ServedName(), "tuned");
  EXPECT_EQ(OpenAiModelId(), "tuned");
  const std::vector<uint32_t> tuned = Greedy(kShort);
  EXPECT_NE(tuned, base) << "the second model generates the same tokens: the test is blind";
  EXPECT_EQ(Greedy(kShort), tuned);

  // The previous weights can be re-activated, by "base" and by job id.
  v1::ActivateCheckpointResponse resp;
  grpc::Status s = Activate("", "base", &resp);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(resp.model_name(), "base-model");
  EXPECT_EQ(ServedName(), "base-model");
  EXPECT_EQ(OpenAiModelId(), "base-model");
  EXPECT_EQ(Greedy(kShort), base);
  s = Activate("job-tuned", "", &resp);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(resp.checkpoint_id(), "ckpt-tuned-1");
  EXPECT_EQ(Greedy(kShort), tuned);
  // Activating what is served is a no-op that answers OK.
  s = Activate("", "ckpt-tuned-1", &resp);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(ServedName(), "tuned");

  const std::string metrics = daemon_->metrics()->Render();
  EXPECT_NE(metrics.find("expertd:checkpoint_activations_total{model_name=\"base-model\","
                         "result=\"error\"} 0"),
            std::string::npos)
      << metrics;
  EXPECT_NE(metrics.find("served_model_name=\"tuned\",checkpoint_id=\"ckpt-tuned-1\"} 1"),
            std::string::npos);
}

// The OpenAI API shares the scheduler: a streamed completion started before
// the switch finishes on the old weights, a later one names the new model.
TEST_F(CheckpointActivationTest, OpenAiStreamStartedBeforeTheSwitchKeepsOldWeights) {
  StartDaemon();
  std::string prompt = "[";
  for (uint32_t id : Prompt()) prompt += (prompt.size() > 1 ? "," : "") + std::to_string(id);
  prompt += "]";
  auto body = [&](const std::string& model, bool stream) {
    return absl::StrCat(R"({"model": ")", model, R"(", "prompt": )", prompt, R"(, "max_tokens": )",
                        kLong, R"(, "temperature": 0, "ignore_eos": true, "stream": )",
                        stream ? "true" : "false", "}");
  };
  httplib::Client client("127.0.0.1", daemon_->http_port());
  client.set_read_timeout(120, 0);
  auto whole = client.Post("/v1/completions", body("base-model", false), "application/json");
  ASSERT_TRUE(whole && whole->status == 200);
  const std::string base_text =
      nlohmann::json::parse(whole->body)["choices"][0]["text"].get<std::string>();
  ASSERT_FALSE(base_text.empty());

  bool straddled = false;
  for (int attempt = 0; attempt < 8 && !straddled; ++attempt) {
    grpc::Status s = Activate("", "base");
    ASSERT_TRUE(s.ok()) << s.error_message();
    std::string sse;
    absl::Notification first_chunk;
    httplib::Request req;
    req.method = "POST";
    req.path = "/v1/completions";
    req.set_header("Content-Type", "application/json");
    req.body = body("base-model", true);
    req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
      sse.append(data, n);
      if (!first_chunk.HasBeenNotified()) first_chunk.Notify();
      return true;
    };
    int stream_status = 0;  // the HTTP status; 0: no response
    std::thread reader([&] {
      httplib::Result r = client.send(req);
      if (r) stream_status = r->status;
    });
    ASSERT_TRUE(first_chunk.WaitForNotificationWithTimeout(absl::Seconds(60)));
    s = Activate("", "ckpt-tuned-1");
    ASSERT_TRUE(s.ok()) << s.error_message();
    straddled = RunningRequests() >= 1;
    reader.join();
    ASSERT_EQ(stream_status, 200);
    std::string text;
    for (absl::string_view line : absl::StrSplit(sse, '\n')) {
      if (!absl::ConsumePrefix(&line, "data: ") || line == "[DONE]") continue;
      nlohmann::json chunk = nlohmann::json::parse(line, nullptr, false);
      ASSERT_FALSE(chunk.is_discarded()) << line;
      ASSERT_TRUE(chunk.contains("choices")) << line;  // an error event would not have them
      EXPECT_EQ(chunk["model"], "base-model");
      text += chunk["choices"][0]["text"].get<std::string>();
    }
    EXPECT_EQ(text, base_text) << "attempt " << attempt;
  }
  ASSERT_TRUE(straddled) << "no stream was still running when the switch landed";
  auto after = client.Post("/v1/completions", body("tuned", false), "application/json");
  ASSERT_TRUE(after && after->status == 200);
  EXPECT_NE(nlohmann::json::parse(after->body)["choices"][0]["text"].get<std::string>(), base_text);
  auto old_name = client.Post("/v1/completions", body("base-model", false), "application/json");
  ASSERT_TRUE(old_name);
  EXPECT_EQ(old_name->status, 404);
}

TEST_F(CheckpointActivationTest, RefusedCheckpointsLeaveTheServedModelServing) {
  StartDaemon();
  const std::vector<uint32_t> base = Greedy(kShort);

  grpc::Status s = Activate("", "ckpt-mixtral-1");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << s.error_message();
  EXPECT_NE(s.error_message().find("architecture"), std::string::npos) << s.error_message();
  EXPECT_NE(s.error_message().find("Mixtral"), std::string::npos) << s.error_message();

  s = Activate("job-corrupt", "");
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.error_message().find("ckpt-corrupt-1"), std::string::npos) << s.error_message();

  s = Activate("", "ckpt-unknown");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND) << s.error_message();
  s = Activate("job-tuned", "ckpt-tuned-1");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
  s = Activate("", "");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
  s = Activate("", "ckpt-tuned-1", nullptr, "wrong-token");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED) << s.error_message();

  EXPECT_EQ(ServedName(), "base-model");
  EXPECT_EQ(Greedy(kShort), base);
  EXPECT_NE(daemon_->metrics()->Render().find("result=\"error\"} 3"), std::string::npos);
}

// The served checkpoint, and only it, stays pinned in the catalog, so the
// job system's retention never deletes it; a refused one is not pinned.
TEST_F(CheckpointActivationTest, OnlyTheServedCheckpointStaysPinned) {
  StartDaemon();
  using Pins = std::map<std::string, int>;
  ASSERT_TRUE(Activate("", "ckpt-tuned-1").ok());
  EXPECT_EQ(catalog_.pins(), (Pins{{"ckpt-tuned-1", 1}}));
  ASSERT_TRUE(Activate("job-tuned", "").ok());  // already served: no second pin
  EXPECT_EQ(catalog_.pins(), (Pins{{"ckpt-tuned-1", 1}}));
  EXPECT_FALSE(Activate("", "ckpt-mixtral-1").ok());  // refused: the served one stays
  EXPECT_FALSE(Activate("job-corrupt", "").ok());
  EXPECT_EQ(catalog_.pins(), (Pins{{"ckpt-tuned-1", 1}}));
  ASSERT_TRUE(Activate("", "base").ok());
  EXPECT_EQ(catalog_.pins(), Pins{});
}

TEST_F(CheckpointActivationTest, WithoutJobSystemOnlyBaseCanBeActivated) {
  StartDaemon(/*with_catalog=*/false);
  grpc::Status s = Activate("", "ckpt-tuned-1");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(s.error_message().find("job system not enabled (--data_dir)"), std::string::npos)
      << s.error_message();
  v1::ActivateCheckpointResponse resp;
  s = Activate("", "base", &resp);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(resp.model_name(), "base-model");
}

TEST_F(CheckpointActivationTest, SecondActivationWhileOneLoadsIsAborted) {
  StartDaemon();
  absl::Notification entered, open;
  catalog_.Gate(&entered, &open);
  grpc::Status first;
  std::thread t([&] { first = Activate("", "ckpt-tuned-1"); });
  entered.WaitForNotification();  // the first activation is in progress
  grpc::Status second = Activate("", "base");
  EXPECT_EQ(second.error_code(), grpc::StatusCode::ABORTED) << second.error_message();
  EXPECT_NE(second.error_message().find("ckpt-tuned-1"), std::string::npos);
  open.Notify();
  t.join();
  EXPECT_TRUE(first.ok()) << first.error_message();
  EXPECT_EQ(ServedName(), "tuned");
  // Once the first returned, the next one runs.
  grpc::Status third = Activate("", "base");
  EXPECT_TRUE(third.ok()) << third.error_message();
  EXPECT_EQ(ServedName(), "base-model");
}

TEST_F(CheckpointActivationTest, RequestsDuringRepeatedSwitchesAllSucceed) {
  StartDaemon();
  const std::vector<uint32_t> base = Greedy(kShort);
  Activate("", "ckpt-tuned-1");
  const std::vector<uint32_t> tuned = Greedy(kShort);
  ASSERT_NE(base, tuned);

  std::atomic<bool> stop{false};
  std::atomic<int> completed{0}, wrong{0};
  std::vector<std::thread> clients;
  for (int c = 0; c < 3; ++c) {
    clients.emplace_back([&] {
      while (!stop.load()) {
        // Each answer is wholly one model's: never a mix within a sequence.
        std::vector<uint32_t> got = Greedy(kShort);
        if (got != base && got != tuned) wrong.fetch_add(1);
        completed.fetch_add(1);
      }
    });
  }
  for (int i = 0; i < 6; ++i) {
    grpc::Status s = Activate("", i % 2 == 0 ? "base" : "ckpt-tuned-1");
    ASSERT_TRUE(s.ok()) << s.error_message();
  }
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  const int after_switches = completed.load();
  while (completed.load() < after_switches + 3) {  // the clients still get answers
    ASSERT_LT(absl::Now(), deadline);
    absl::SleepFor(absl::Milliseconds(5));
  }
  stop.store(true);
  for (std::thread& t : clients) t.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_EQ(ServedName(), "tuned");
  // Stats are published after each step, a moment after the last answer.
  while (RunningRequests() != 0) {
    ASSERT_LT(absl::Now(), deadline) << "requests still counted as running";
    absl::SleepFor(absl::Milliseconds(5));
  }
}

TEST(CheckServingCompatibleTest, NamesTheFirstDifference) {
  models::ModelConfig a;
  a.architecture = models::Architecture::kQwen3Moe;
  a.model_type = "qwen3_moe";
  a.vocab_size = 512;
  models::ModelConfig b = a;
  EXPECT_TRUE(CheckServingCompatible(a, nullptr, b, nullptr).ok());
  b.vocab_size = 1024;
  absl::Status s = CheckServingCompatible(a, nullptr, b, nullptr);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("vocab_size is 1024 in the checkpoint but 512"), std::string::npos)
      << s;
}

// A replaced model lives while a request holds it, and is destroyed (off the
// caller's thread) once the last holder lets go.
TEST(ServingStateTest, ReplacedModelIsReleasedWhenItsLastHolderLetsGo) {
  ServingState state(ServerOptions{});
  auto first = std::make_shared<LoadedModel>();
  first->name = "first";
  std::weak_ptr<LoadedModel> first_weak = first;
  state.SetModel(std::move(first));
  std::shared_ptr<const LoadedModel> held = state.model();  // a request in flight
  auto second = std::make_shared<LoadedModel>();
  second->name = "second";
  state.SetModel(std::move(second));
  EXPECT_EQ(state.model()->name, "second");
  ASSERT_EQ(state.live_models().size(), 2u);
  EXPECT_EQ(state.live_models()[1]->name, "first");
  EXPECT_FALSE(first_weak.expired());
  held.reset();
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (!first_weak.expired()) {
    ASSERT_LT(absl::Now(), deadline) << "the replaced model was never released";
    absl::SleepFor(absl::Milliseconds(1));
  }
  EXPECT_EQ(state.live_models().size(), 1u);
}

}  // namespace
}  // namespace expertd::server
