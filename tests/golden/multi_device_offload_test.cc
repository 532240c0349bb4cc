// MoEShard with expert offloading: each CPU virtual device packs, caches and
// pages only its slice of every expert (1/D of the bytes), and the engine
// returns what the resident single-device engine returns: last logits within
// 1e-5 relative and the same greedy tokens, for 1..4 devices, with a device
// cache too small for a layer's experts (so experts are paged every step),
// for fp32 and int8 storage.
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/engine.h"
#include "engine/experts/expert_store.h"
#include "engine/greedy.h"
#include "engine/parallel/multi_device_experts.h"
#include "gtest/gtest.h"
#include "models/checkpoint/checkpoint.h"
#include "tests/golden/fp8_checkpoint.h"
#include "tests/golden/golden_data.h"

namespace expertd::engine::parallel {
namespace {

std::string TempDir(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir ? dir : "/tmp") + "/" + name;
}

std::unique_ptr<Engine> MakeEngine(std::shared_ptr<const models::Checkpoint> ckpt,
                                   ExpertProviderFactory experts) {
  EngineOptions opts;
  opts.backend.threads = 1;
  opts.expert_provider_factory = std::move(experts);
  auto e = Engine::Create(std::move(ckpt), opts);
  EXPECT_TRUE(e.ok()) << e.status();
  return e.ok() ? std::move(*e) : nullptr;
}

struct Outputs {
  std::vector<std::vector<float>> logits;
  std::vector<std::vector<int32_t>> tokens;
};

Outputs RunCases(Engine* engine, const golden::Golden& g) {
  Outputs out;
  for (const golden::GoldenCase& c : g.cases) {
    absl::StatusOr<GreedyResult> r = RunGreedy(engine, 1, c.input_ids, /*generate=*/8);
    EXPECT_TRUE(r.ok()) << c.name << ": " << r.status();
    if (!r.ok()) return out;
    out.logits.push_back(r->last_logits);
    out.tokens.push_back(r->generated);
  }
  return out;
}

class MultiDeviceOffloadTest : public ::testing::TestWithParam<std::string> {};

TEST_P(MultiDeviceOffloadTest, EachDevicePagesOnlyItsShardAndTokensMatchOneDevice) {
  const std::string dtype = GetParam();
  auto opened = models::Checkpoint::Open(golden::FixtureDir("mixtral"));
  ASSERT_TRUE(opened.ok()) << opened.status();
  std::shared_ptr<const models::Checkpoint> ckpt(std::move(*opened));
  const models::ModelConfig& c = ckpt->config();
  absl::StatusOr<golden::Golden> g = golden::LoadGolden("mixtral");
  ASSERT_TRUE(g.ok()) << g.status();
  absl::StatusOr<ExpertStorage> storage = ParseExpertStorage(dtype, 0);
  ASSERT_TRUE(storage.ok()) << storage.status();

  // The reference: one device, every expert resident in the same format.
  ExpertStoreOptions one;
  one.pack_dir = TempDir("offload_reference_" + dtype);
  one.storage = *storage;
  std::unique_ptr<Engine> single = MakeEngine(ckpt, ExpertStoreFactory(one));
  ASSERT_NE(single, nullptr);
  const Outputs reference = RunCases(single.get(), *g);
  ASSERT_EQ(reference.tokens.size(), g->cases.size());

  int64_t moe_layers = 0;
  for (bool m : c.is_moe_layer) moe_layers += m;
  const uint64_t entries = moe_layers * c.num_experts;
  for (int devices = 1; devices <= 4; ++devices) {
    auto counters = std::make_shared<MultiDeviceCounters>();
    MultiDeviceOptions o;
    o.devices = devices;
    o.device_backend.threads = 1;
    o.collectives.timeout = absl::Seconds(60);
    o.counters = counters;
    ExpertStoreOptions so;
    so.pack_dir = TempDir(absl::StrCat("offload_", dtype, "_", devices));
    so.device_cache_experts = 2;  // < top_k distinct experts per step: pages every layer
    so.storage = *storage;
    // Odd device counts also prefetch speculatively (the stores see the
    // router inputs); prefetching must never change results.
    if (devices % 2 == 1) so.prefetch = PrefetchKind::kSpeculative;
    o.offload = so;
    std::unique_ptr<Engine> multi = MakeEngine(ckpt, MultiDeviceExpertsFactory(o));
    ASSERT_NE(multi, nullptr);
    const Outputs run = RunCases(multi.get(), *g);
    ASSERT_EQ(run.tokens.size(), reference.tokens.size());
    for (size_t i = 0; i < run.tokens.size(); ++i) {
      EXPECT_LT(golden::RelError(run.logits[i], reference.logits[i]), 1e-5)
          << dtype << " devices=" << devices << " " << g->cases[i].name;
      EXPECT_EQ(run.tokens[i], reference.tokens[i])
          << dtype << " devices=" << devices << " " << g->cases[i].name;
    }
    // Each device's pack holds exactly its slice's bytes: 1/D of every
    // expert (mixtral: 128 columns in int8 groups of 32 or fp32 columns).
    const MultiDeviceCounters::Snapshot s = counters->Get();
    ASSERT_EQ(s.device_expert_bytes.size(), static_cast<size_t>(devices));
    const int64_t unit = dtype == "int8" ? 32 : 1;
    uint64_t total = 0;
    for (int d = 0; d < devices; ++d) {
      const ShardRange cols = ExpertColumns(c.moe_intermediate_size, unit, devices, d);
      uint64_t per_expert = 3ull * cols.size() * c.hidden_size * 4;  // fp32 values
      if (dtype == "int8") {
        per_expert = 3ull * cols.size() * c.hidden_size +                  // int8 values
                     2ull * cols.size() * (c.hidden_size / 32) * 2 +       // gate/up f16 scales
                     1ull * c.hidden_size * (cols.size() / 32) * 2;        // down f16 scales
      }
      EXPECT_EQ(s.device_expert_bytes[d], per_expert * entries) << dtype << " device " << d;
      total += s.device_expert_bytes[d];
      if (cols.size() > 0) EXPECT_GT(s.device_work[d], 0) << "device " << d;
    }
    uint64_t whole = 3ull * c.moe_intermediate_size * c.hidden_size * 4 * entries;
    if (dtype == "int8") {
      whole = (3ull * c.moe_intermediate_size * c.hidden_size +
               3ull * c.moe_intermediate_size * c.hidden_size / 32 * 2) *
              entries;
    }
    EXPECT_EQ(total, whole) << "the shards together are every expert once";
    multi.reset();
    std::filesystem::remove_all(so.pack_dir);
  }
  std::filesystem::remove_all(one.pack_dir);
}

INSTANTIATE_TEST_SUITE_P(Storage, MultiDeviceOffloadTest, ::testing::Values("f32", "int8"));

// An FP8 checkpoint (deepseek_v3, 16x16 blocks: its 48-wide experts are 3
// block units, so 2 and 4 devices split unevenly and one device is empty at
// 4): each device packs its slice's FP8 codes with the slice of the scale
// grid; tokens equal the resident single-device FP8 engine, and the slices
// add up to the single store's bytes.
TEST(MultiDeviceOffload, Fp8ExpertsArePagedAsBlockAlignedShards) {
  fp8::Fp8CheckpointOptions fo;
  fo.block_rows = fo.block_cols = 16;
  const std::string fp8_dir = TempDir("offload_fp8_ckpt");
  ASSERT_TRUE(fp8::WriteFp8Checkpoint(golden::FixtureDir("deepseek_v3"), fp8_dir,
                                      TempDir("offload_fp8_dequant"), fo)
                  .ok());
  auto opened = models::Checkpoint::Open(fp8_dir);
  ASSERT_TRUE(opened.ok()) << opened.status();
  std::shared_ptr<const models::Checkpoint> ckpt(std::move(*opened));
  absl::StatusOr<golden::Golden> g = golden::LoadGolden("deepseek_v3");
  ASSERT_TRUE(g.ok()) << g.status();
  ExpertStoreOptions one;
  one.pack_dir = TempDir("offload_fp8_reference");
  ExpertStore* reference_store = nullptr;
  std::unique_ptr<Engine> single =
      MakeEngine(ckpt, [&](const ExpertProviderContext& ctx)
                           -> absl::StatusOr<std::unique_ptr<ExpertProvider>> {
        auto s = ExpertStore::Create(ctx, one);
        if (!s.ok()) return s.status();
        reference_store = s->get();
        return std::unique_ptr<ExpertProvider>(std::move(*s));
      });
  ASSERT_NE(single, nullptr);
  ASSERT_NE(reference_store, nullptr);
  const uint64_t whole =
      reference_store->layout().expert_bytes * reference_store->layout().num_entries();
  const Outputs reference = RunCases(single.get(), *g);
  for (int devices = 1; devices <= 4; ++devices) {
    auto counters = std::make_shared<MultiDeviceCounters>();
    MultiDeviceOptions o;
    o.devices = devices;
    o.device_backend.threads = 1;
    o.collectives.timeout = absl::Seconds(60);
    o.counters = counters;
    ExpertStoreOptions so;
    so.pack_dir = TempDir(absl::StrCat("offload_fp8_", devices));
    so.device_cache_experts = 2;
    o.offload = so;
    std::unique_ptr<Engine> multi = MakeEngine(ckpt, MultiDeviceExpertsFactory(o));
    ASSERT_NE(multi, nullptr);
    const Outputs run = RunCases(multi.get(), *g);
    ASSERT_EQ(run.tokens.size(), reference.tokens.size());
    for (size_t i = 0; i < run.tokens.size(); ++i) {
      EXPECT_LT(golden::RelError(run.logits[i], reference.logits[i]), 1e-5)
          << "devices=" << devices << " " << g->cases[i].name;
      EXPECT_EQ(run.tokens[i], reference.tokens[i])
          << "devices=" << devices << " " << g->cases[i].name;
    }
    // Each device's pack holds its slice's codes and scale blocks: its share
    // of the whole, up to the pack's 64-byte alignment of each of the six
    // arrays (codes and scales of gate, up, down) per expert.
    const MultiDeviceCounters::Snapshot s = counters->Get();
    const uint64_t entries = reference_store->layout().num_entries(), slack = entries * 6 * 64;
    const int64_t inter = ckpt->config().moe_intermediate_size;
    uint64_t total = 0;
    for (int d = 0; d < devices; ++d) {
      const ShardRange cols = ExpertColumns(inter, 16, devices, d);
      const double share = static_cast<double>(whole) * cols.size() / inter;
      EXPECT_LE(std::abs(static_cast<double>(s.device_expert_bytes[d]) - share), slack)
          << "devices=" << devices << " device " << d;
      total += s.device_expert_bytes[d];
    }
    EXPECT_GE(total, whole);
    EXPECT_LE(total, whole + devices * slack);
    if (devices == 4) EXPECT_EQ(s.device_expert_bytes[3], 0u) << "3 units over 4 devices";
    multi.reset();
    std::filesystem::remove_all(so.pack_dir);
  }
  single.reset();
  std::filesystem::remove_all(one.pack_dir);
}

TEST(MultiDeviceOffload, ExpertParallelismWithOffloadIsRefused) {
  auto opened = models::Checkpoint::Open(golden::FixtureDir("mixtral"));
  ASSERT_TRUE(opened.ok());
  MultiDeviceOptions o;
  o.mode = MoeParallelism::kExpert;
  o.offload = ExpertStoreOptions{};
  EngineOptions opts;
  opts.expert_provider_factory = MultiDeviceExpertsFactory(o);
  absl::StatusOr<std::unique_ptr<Engine>> e =
      Engine::Create(std::shared_ptr<const models::Checkpoint>(std::move(*opened)), opts);
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(std::string(e.status().message()).find("MoEShard"), std::string::npos) << e.status();
}

}  // namespace
}  // namespace expertd::engine::parallel
