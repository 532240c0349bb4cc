// Missed experts computed on the host (--expert_compute=host|auto) through the
// real forward pass: every fixture, bf16 experts and int8 experts, a device
// cache of two experts, with and without a host tier; the logits equal the
// all-resident engine's within fp32 summation tolerance and the greedy tokens
// are identical, and the counters say where the experts ran.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "engine/backend/cpu/cpu_features.h"
#include "engine/engine.h"
#include "engine/experts/expert_store.h"
#include "engine/greedy.h"
#include "gtest/gtest.h"
#include "models/checkpoint/checkpoint.h"

namespace expertd::engine {
namespace {

std::string TempDir(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir ? dir : "/tmp") + "/" + name;
}

std::shared_ptr<const models::Checkpoint> OpenBf16(const std::string& fixture) {
  models::CheckpointOptions co;
  co.weights_file = "model.bf16.safetensors";
  auto c = models::Checkpoint::Open("tests/data/fixtures/" + fixture, co);
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? std::shared_ptr<const models::Checkpoint>(std::move(*c)) : nullptr;
}

// The engine and, when the expert store serves it, the store (owned by the engine).
struct Served {
  std::unique_ptr<Engine> engine;
  ExpertStore* store = nullptr;
};

Served Serve(std::shared_ptr<const models::Checkpoint> ckpt, const ExpertStoreOptions* options,
             MatmulActivations activations = MatmulActivations::kF32) {
  Served s;
  EngineOptions o;
  o.backend.threads = 2;
  o.backend.matmul_activations = activations;
  if (options != nullptr) {
    ExpertStore** slot = &s.store;
    o.expert_provider_factory = [options = *options, slot](const ExpertProviderContext& ctx)
        -> absl::StatusOr<std::unique_ptr<ExpertProvider>> {
      auto store = ExpertStore::Create(ctx, options);
      if (!store.ok()) return store.status();
      *slot = store->get();
      return std::unique_ptr<ExpertProvider>(std::move(*store));
    };
  }
  auto e = Engine::Create(std::move(ckpt), o);
  EXPECT_TRUE(e.ok()) << e.status();
  if (e.ok()) s.engine = std::move(*e);
  return s;
}

void ExpectClose(const GreedyResult& want, const GreedyResult& got, const std::string& what) {
  ASSERT_EQ(want.last_logits.size(), got.last_logits.size()) << what;
  float scale = 0, worst = 0;
  for (size_t i = 0; i < want.last_logits.size(); ++i) {
    scale = std::max(scale, std::fabs(want.last_logits[i]));
    worst = std::max(worst, std::fabs(want.last_logits[i] - got.last_logits[i]));
  }
  EXPECT_LE(worst, 1e-5f * std::max(1.0f, scale)) << what;
  EXPECT_EQ(want.generated, got.generated) << what;
}

struct Mode {
  ExpertComputeMode compute;
  bool host_tier;
};

class HostComputeEngineTest : public ::testing::TestWithParam<std::string> {};

TEST_P(HostComputeEngineTest, EveryModeEqualsTheResidentEngine) {
  const std::string fixture = GetParam();
  auto ckpt = OpenBf16(fixture);
  ASSERT_NE(ckpt, nullptr);
  const std::vector<int32_t> prompt = {1, 17, 30, 42, 7, 99, 25, 3, 11};
  for (const char* dtype : {"bf16", "int8"}) {
    // The reference: every expert resident, in the same storage format.
    ExpertStoreOptions resident_options;
    resident_options.pack_dir = TempDir(fixture + "_" + dtype);
    auto storage = ParseExpertStorage(dtype, std::string(dtype) == "int8" ? 16 : 0);
    ASSERT_TRUE(storage.ok()) << storage.status();
    resident_options.storage = *storage;
    Served resident = Serve(ckpt, &resident_options);
    ASSERT_NE(resident.engine, nullptr);
    auto want = RunGreedy(resident.engine.get(), 1, prompt, /*generate=*/6);
    ASSERT_TRUE(want.ok()) << want.status();
    const Mode modes[] = {{ExpertComputeMode::kHost, true},
                          {ExpertComputeMode::kHost, false},
                          {ExpertComputeMode::kAuto, true},
                          {ExpertComputeMode::kDevice, true}};
    for (Mode mode : modes) {
      ExpertStoreOptions o = resident_options;
      o.device_cache_experts = 2;
      o.host_cache_bytes = mode.host_tier ? (1ull << 30) : 0;
      o.compute = mode.compute;
      o.host_compute_threads = 2;
      o.calibration_tokens = 8;
      const std::string what = fixture + " " + dtype + " " + ExpertComputeModeName(mode.compute) +
                               (mode.host_tier ? " host tier" : " no host tier");
      Served offloaded = Serve(ckpt, &o);
      ASSERT_NE(offloaded.engine, nullptr) << what;
      ASSERT_NE(offloaded.store, nullptr) << what;
      for (int64_t chunk : {0, 4}) {
        auto got = RunGreedy(offloaded.engine.get(), 1 + chunk, prompt, 6, chunk);
        ASSERT_TRUE(got.ok()) << what << ": " << got.status();
        ExpectClose(*want, *got, what + " chunk " + std::to_string(chunk));
      }
      EXPECT_TRUE(offloaded.store->CheckInvariants().ok()) << what;
      const ExpertStoreStats s = offloaded.store->stats();
      const ExpertLayerCounters& t = s.total;
      EXPECT_EQ(t.requests, t.hits + t.prefetch_hits + t.misses + t.host_computes) << what;
      EXPECT_EQ(s.compute, ExpertComputeModeName(mode.compute));
      switch (mode.compute) {
        case ExpertComputeMode::kHost:  // every miss on the host, nothing paged on demand
          EXPECT_GT(t.host_computes, 0) << what;
          EXPECT_EQ(t.misses, 0) << what;
          EXPECT_GT(t.predicted_expert_ns, 0) << what;
          EXPECT_GT(t.measured_expert_ns, 0) << what;
          break;
        case ExpertComputeMode::kDevice:
          EXPECT_EQ(t.host_computes, 0) << what;
          EXPECT_GT(t.misses, 0) << what;
          break;
        case ExpertComputeMode::kAuto:
          EXPECT_GT(t.host_computes + t.misses, 0) << what;
          EXPECT_GT(s.page_bytes_per_s, 0) << what;
          break;
      }
    }
  }
}

TEST_P(HostComputeEngineTest, BatchedPrefillAndDecodeOnTheHostEqualResident) {
  const std::string fixture = GetParam();
  auto ckpt = OpenBf16(fixture);
  ASSERT_NE(ckpt, nullptr);
  ExpertStoreOptions o;
  o.pack_dir = TempDir(fixture + "_batched");
  o.device_cache_experts = 2;
  o.host_cache_bytes = 1ull << 30;
  o.compute = ExpertComputeMode::kAuto;
  o.prefetch = PrefetchKind::kAll;
  o.calibration_tokens = 8;
  Served resident = Serve(ckpt, nullptr);
  Served offloaded = Serve(ckpt, &o);
  ASSERT_NE(offloaded.engine, nullptr);
  StepRequest req;
  for (SequenceId id : {1, 2, 3}) {
    ASSERT_TRUE(resident.engine->AddSequence(id).ok());
    ASSERT_TRUE(offloaded.engine->AddSequence(id).ok());
    std::vector<int32_t> tokens;
    for (int i = 0; i < 7 * static_cast<int>(id); ++i)
      tokens.push_back(static_cast<int32_t>((i * 37 + id * 11) % ckpt->config().vocab_size));
    req.chunks.push_back({id, tokens, /*all_logits=*/true});
  }
  for (int step = 0; step < 3; ++step) {
    auto a = resident.engine->Step(req);
    auto b = offloaded.engine->Step(req);
    ASSERT_TRUE(a.ok()) << a.status();
    ASSERT_TRUE(b.ok()) << b.status();
    for (size_t i = 0; i < a->sequences.size(); ++i) {
      const auto& x = a->sequences[i].logits;
      const auto& y = b->sequences[i].logits;
      ASSERT_EQ(x.size(), y.size());
      for (size_t j = 0; j < x.size(); ++j)
        ASSERT_NEAR(x[j], y[j], 1e-5f * std::max(1.0f, std::fabs(x[j]))) << fixture << " " << j;
    }
    for (auto& c : req.chunks)
      c.tokens = {static_cast<int32_t>((c.id * 5 + step) % ckpt->config().vocab_size)};
  }
  EXPECT_TRUE(offloaded.store->CheckInvariants().ok());
  const ExpertLayerCounters t = offloaded.store->stats().total;
  EXPECT_EQ(t.requests, t.hits + t.prefetch_hits + t.misses + t.host_computes);
}

// Every expert slot of the pack corrupted on disk: the host jobs (and the
// calibration) read them, find the checksums wrong, repair them from the
// checkpoint, and the results stay the resident engine's.
// With bf16 activations the host computes experts in the backend's mode:
// host-computed experts give the resident engine's logits in that mode (which
// differ from the fp32-activation ones by bf16 rounding, far past 1e-5).
TEST(HostComputeBf16ActivationsTest, HostComputedExpertsFollowTheBackendsMode) {
  if (!cpu::CpuSupportsBf16Dot()) GTEST_SKIP() << "the CPU lacks AVX-512-BF16";
  auto ckpt = OpenBf16("olmoe");
  ASSERT_NE(ckpt, nullptr);
  const std::vector<int32_t> prompt = {1, 17, 30, 42, 7, 99, 25, 3, 11};
  ExpertStoreOptions resident_options;
  resident_options.pack_dir = TempDir("olmoe_bf16_activations");
  Served resident = Serve(ckpt, &resident_options, MatmulActivations::kBF16);
  Served fp32 = Serve(ckpt, &resident_options, MatmulActivations::kF32);
  ASSERT_NE(resident.engine, nullptr);
  ASSERT_NE(fp32.engine, nullptr);
  auto want = RunGreedy(resident.engine.get(), 1, prompt, 6);
  auto fp32_result = RunGreedy(fp32.engine.get(), 1, prompt, 6);
  ASSERT_TRUE(want.ok() && fp32_result.ok());
  float moved = 0;
  for (size_t i = 0; i < want->last_logits.size(); ++i)
    moved = std::max(moved, std::fabs(want->last_logits[i] - fp32_result->last_logits[i]));
  EXPECT_GT(moved, 1e-3f);  // the mode changes the result: the check below can tell
  ExpertStoreOptions o = resident_options;
  o.device_cache_experts = 2;
  o.host_cache_bytes = 1ull << 30;
  o.compute = ExpertComputeMode::kHost;
  o.host_compute_threads = 2;
  o.calibration_tokens = 8;
  Served host = Serve(ckpt, &o, MatmulActivations::kBF16);
  ASSERT_NE(host.engine, nullptr);
  auto got = RunGreedy(host.engine.get(), 1, prompt, 6);
  ASSERT_TRUE(got.ok()) << got.status();
  ExpectClose(*want, *got, "olmoe bf16 activations, host compute");
  EXPECT_GT(host.store->stats().total.host_computes, 0);
}

TEST(HostComputeRepairTest, CorruptPackSlotsAreRepairedOnTheHostPath) {
  auto ckpt = OpenBf16("olmoe");
  ASSERT_NE(ckpt, nullptr);
  const std::vector<int32_t> prompt = {1, 17, 30, 42, 7, 99, 25, 3, 11};
  Served resident = Serve(ckpt, nullptr);
  auto want = RunGreedy(resident.engine.get(), 1, prompt, 4);
  ASSERT_TRUE(want.ok()) << want.status();
  ExpertStoreOptions o;
  o.pack_dir = TempDir("olmoe_corrupt");
  o.device_cache_experts = 2;
  o.compute = ExpertComputeMode::kHost;
  o.calibration_tokens = 4;
  std::string pack;
  uint64_t slot_bytes = 0, entries = 0;
  {
    Served first = Serve(ckpt, &o);  // builds the pack
    ASSERT_NE(first.store, nullptr);
    pack = first.store->stats().pack_path;
    slot_bytes = first.store->stats().slot_bytes;
    entries = first.store->layout().num_entries();
  }
  {
    std::fstream f(pack, std::ios::in | std::ios::out | std::ios::binary);
    ASSERT_TRUE(f.good()) << pack;
    f.seekg(0, std::ios::end);
    const uint64_t size = static_cast<uint64_t>(f.tellg());
    for (uint64_t i = 1; i <= entries; ++i) {  // the data region ends the file
      f.seekp(static_cast<std::streamoff>(size - i * slot_bytes + 100));
      f.put('\x5a');
    }
  }
  Served repaired = Serve(ckpt, &o);
  ASSERT_NE(repaired.engine, nullptr);
  auto got = RunGreedy(repaired.engine.get(), 1, prompt, 4);
  ASSERT_TRUE(got.ok()) << got.status();
  ExpectClose(*want, *got, "repaired");
  EXPECT_GT(repaired.store->stats().pack_repairs, 0);
  EXPECT_GT(repaired.store->stats().total.host_computes, 0);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, HostComputeEngineTest,
                         ::testing::Values("mixtral", "qwen2_moe", "qwen2_moe_mixed", "olmoe",
                                           "qwen3_moe", "deepseek_v3", "gpt_oss", "gpt_oss_mxfp4"));

}  // namespace
}  // namespace expertd::engine
