// Sliding-window attention (Mixtral's "sliding_window") on the engine, with
// an oracle that does not share its code: RoPE makes q . k depend only on the
// distance between two positions, and routing, norms and MLPs act on each
// token alone, so with L layers and a window of W keys the last token's
// logits depend on its last L (W - 1) + 1 tokens only, wherever they sit. The
// whole prompt and those tokens alone (at positions from 0) must then give
// the same logits up to fp32 rounding; one token fewer must not.
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "engine/backend/backend_factory.h"
#include "engine/backend/instrumented_backend.h"
#include "engine/engine.h"
#include "engine/greedy.h"
#include "engine/train/train_model.h"
#include "gtest/gtest.h"
#include "models/checkpoint/checkpoint.h"
#include "nlohmann/json.hpp"
#include "tests/golden/golden_data.h"

namespace expertd::golden {
namespace {

namespace fs = std::filesystem;

// The CPU backend claiming it has no sliding-window attention, as a backend
// without those kernels would.
class NoWindowBackend : public engine::InstrumentedBackend {
 public:
  using InstrumentedBackend::InstrumentedBackend;
  bool HasWindowedAttention() const override { return false; }
};

// A copy of the mixtral fixture with config.json's sliding_window set (0: as
// shipped, null); the weights are a link to the fixture's.
std::string MixtralDirWithWindow(int64_t window) {
  const fs::path src = FixtureDir("mixtral");
  const fs::path dir =
      fs::path(::testing::TempDir()) / ("mixtral_window_" + std::to_string(window));
  fs::create_directories(dir);
  std::ifstream in(src / "config.json");
  std::stringstream text;
  text << in.rdbuf();
  nlohmann::json config = nlohmann::json::parse(text.str());
  if (window > 0) config["sliding_window"] = window;
  std::ofstream(dir / "config.json") << config.dump(2);
  fs::remove(dir / "model.safetensors");
  fs::create_symlink(fs::absolute(src / "model.safetensors"), dir / "model.safetensors");
  return dir.string();
}

// An engine on MixtralDirWithWindow(window). no_window: on NoWindowBackend;
// `status` gets Engine::Create's error.
std::unique_ptr<engine::Engine> MixtralWithWindow(int64_t window, bool no_window = false,
                                                  absl::Status* status = nullptr) {
  auto ckpt = models::Checkpoint::Open(MixtralDirWithWindow(window));
  EXPECT_TRUE(ckpt.ok()) << ckpt.status();
  if (!ckpt.ok()) return nullptr;
  engine::EngineOptions opts;
  opts.backend.threads = 2;
  opts.kv_cache_bytes = 8 << 20;
  opts.kv_block_size = 4;
  if (no_window) {
    opts.backend_factory =
        [](const engine::BackendOptions& b) -> absl::StatusOr<std::unique_ptr<engine::Backend>> {
      auto cpu = engine::CreateBackend(b);
      if (!cpu.ok()) return cpu.status();
      return std::unique_ptr<engine::Backend>(std::make_unique<NoWindowBackend>(std::move(*cpu)));
    };
  }
  auto e =
      engine::Engine::Create(std::shared_ptr<const models::Checkpoint>(std::move(*ckpt)), opts);
  if (status != nullptr) *status = e.status();
  if (status == nullptr) EXPECT_TRUE(e.ok()) << e.status();
  return e.ok() ? std::move(*e) : nullptr;
}

std::vector<float> LastLogits(engine::Engine* e, int64_t id, const std::vector<int32_t>& prompt,
                              int64_t chunk = 0) {
  auto r = engine::RunGreedy(e, id, prompt, 1, chunk);
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? r->last_logits : std::vector<float>{};
}

std::vector<int32_t> Tail(const std::vector<int32_t>& v, size_t n) {
  return std::vector<int32_t>(v.end() - n, v.end());
}

TEST(SlidingWindowTest, LastLogitsDependOnTheReceptiveFieldOnly) {
  auto golden = LoadGolden("mixtral");
  ASSERT_TRUE(golden.ok()) << golden.status();
  const std::vector<int32_t> prompt = golden->cases.at(2).input_ids;  // 33 tokens
  ASSERT_EQ(prompt.size(), 33u);
  const int64_t layers = 3;
  for (int64_t window : {2, 5}) {
    SCOPED_TRACE("window " + std::to_string(window));
    auto e = MixtralWithWindow(window);
    ASSERT_NE(e, nullptr);
    const size_t field = layers * (window - 1) + 1;
    const std::vector<float> whole = LastLogits(e.get(), 1, prompt);
    const std::vector<float> exact = LastLogits(e.get(), 2, Tail(prompt, field));
    const std::vector<float> short_by_one = LastLogits(e.get(), 3, Tail(prompt, field - 1));
    const double err = RelError(exact, whole), off = RelError(short_by_one, whole);
    std::printf("window %lld: receptive field %zu tokens, rel error %.3g; one fewer %.3g\n",
                static_cast<long long>(window), field, err, off);
    EXPECT_LT(err, 1e-5);
    EXPECT_GT(off, 1e-3);
    // Chunks that cut the window (1, 3, 7 tokens) change nothing.
    for (int64_t chunk : {1, 3, 7}) {
      const std::vector<float> split = LastLogits(e.get(), 10 + chunk, prompt, chunk);
      ASSERT_EQ(split.size(), whole.size());
      EXPECT_EQ(0, std::memcmp(split.data(), whole.data(), whole.size() * sizeof(float)))
          << "chunk " << chunk;
    }
  }
}

TEST(SlidingWindowTest, WindowPastThePromptIsNoWindowAndTheGoldenHolds) {
  auto golden = LoadGolden("mixtral");
  ASSERT_TRUE(golden.ok()) << golden.status();
  const std::vector<int32_t> prompt = golden->cases.at(2).input_ids;
  auto plain = MixtralWithWindow(0);
  auto wide = MixtralWithWindow(prompt.size());
  ASSERT_NE(plain, nullptr);
  ASSERT_NE(wide, nullptr);
  const std::vector<float> a = LastLogits(plain.get(), 1, prompt);
  const std::vector<float> b = LastLogits(wide.get(), 1, prompt);
  ASSERT_EQ(a.size(), b.size());
  EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float)));
  EXPECT_LT(RelError(b, golden->cases.at(2).logits_last), 1e-4);
  // A window one key narrower than the prompt changes the last logits.
  auto narrow = MixtralWithWindow(prompt.size() - 1);
  ASSERT_NE(narrow, nullptr);
  EXPECT_GT(RelError(LastLogits(narrow.get(), 1, prompt), a), 1e-6);
}

// A backend without it refuses the model when it is created, naming the
// field and what to do, instead of failing every step.
TEST(SlidingWindowTest, BackendWithoutItRefusesTheModel) {
  absl::Status status;
  EXPECT_EQ(MixtralWithWindow(5, /*no_window=*/true, &status), nullptr);
  EXPECT_EQ(status.code(), absl::StatusCode::kUnimplemented) << status;
  EXPECT_NE(status.message().find("sliding_window 5"), std::string::npos) << status;
  EXPECT_NE(status.message().find("--backend=cpu"), std::string::npos) << status;
  EXPECT_NE(MixtralWithWindow(0, /*no_window=*/true, &status), nullptr) << status;
}

// The training model's attention reads every key: it refuses a window.
TEST(SlidingWindowTest, TrainingRefusesIt) {
  auto model = train::TrainModel::Load(MixtralDirWithWindow(5));
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.status().code(), absl::StatusCode::kUnimplemented) << model.status();
  EXPECT_NE(model.status().message().find("sliding_window 5"), std::string::npos) << model.status();
  EXPECT_TRUE(train::TrainModel::Load(MixtralDirWithWindow(0)).ok());
  auto gpt_oss = train::TrainModel::Load(FixtureDir("gpt_oss"));
  ASSERT_FALSE(gpt_oss.ok());
  EXPECT_EQ(gpt_oss.status().code(), absl::StatusCode::kUnimplemented) << gpt_oss.status();
  EXPECT_NE(gpt_oss.status().message().find("GptOssForCausalLM"), std::string::npos)
      << gpt_oss.status();
}

}  // namespace
}  // namespace expertd::golden
