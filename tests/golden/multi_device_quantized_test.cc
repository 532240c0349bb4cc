// MoEShard and expert parallelism with block-scaled experts, against the
// single-device engine on the same weights, for 1..4 CPU virtual devices:
// - FP8 checkpoints (E4M3 codes + block scales, written from the fixtures by
//   the FP8 oracle's writer) with blocks that divide the expert width over
//   the devices unevenly, or not at all (fewer blocks than devices);
// - int8 / int4 / mxfp4 experts quantized at load, against the single-device
//   engine paging the same formats from the expert pack.
// Last logits within 1e-5 relative, identical greedy tokens; under MoEShard
// exactly the devices that hold a shard compute.
#include <cstdlib>
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

std::shared_ptr<const models::Checkpoint> Open(const std::string& dir) {
  auto c = models::Checkpoint::Open(dir);
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? std::shared_ptr<const models::Checkpoint>(std::move(*c)) : nullptr;
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

// Runs `ckpt` over 1..4 devices in both strategies with `storage` and
// compares with `reference`.
void ExpectMatchesOneDevice(const std::string& arch, std::shared_ptr<const models::Checkpoint> ckpt,
                            const ExpertShardStorage& storage, const Outputs& reference,
                            const golden::Golden& g) {
  const models::ModelConfig& config = ckpt->config();
  absl::StatusOr<int64_t> unit = ExpertShardUnit(config, storage);
  ASSERT_TRUE(unit.ok()) << unit.status();
  for (MoeParallelism mode : {MoeParallelism::kShard, MoeParallelism::kExpert}) {
    for (int devices = 1; devices <= 4; ++devices) {
      auto counters = std::make_shared<MultiDeviceCounters>();
      MultiDeviceOptions o;
      o.devices = devices;
      o.mode = mode;
      o.device_backend.threads = 1;
      o.collectives.timeout = absl::Seconds(60);
      o.counters = counters;
      o.storage = storage;
      std::unique_ptr<Engine> multi = MakeEngine(ckpt, MultiDeviceExpertsFactory(o));
      ASSERT_NE(multi, nullptr);
      const Outputs run = RunCases(multi.get(), g);
      ASSERT_EQ(run.tokens.size(), reference.tokens.size());
      const std::string what = absl::StrCat(arch, " ", MoeParallelismName(mode),
                                            " devices=", devices, " unit=", *unit);
      for (size_t i = 0; i < run.tokens.size(); ++i) {
        EXPECT_LT(golden::RelError(run.logits[i], reference.logits[i]), 1e-5)
            << what << " " << g.cases[i].name;
        EXPECT_EQ(run.tokens[i], reference.tokens[i]) << what << " " << g.cases[i].name;
      }
      const MultiDeviceCounters::Snapshot s = counters->Get();
      ASSERT_EQ(s.device_work.size(), static_cast<size_t>(devices));
      if (mode != MoeParallelism::kShard) continue;
      for (int d = 0; d < devices; ++d) {
        const ShardRange cols = ExpertColumns(config.moe_intermediate_size, *unit, devices, d);
        EXPECT_EQ(s.device_work[d] > 0, cols.size() > 0) << what << " device " << d;
      }
    }
  }
}

struct Fp8Case {
  std::string arch;
  int64_t block_rows, block_cols;
};

class MultiDeviceFp8Test : public ::testing::TestWithParam<Fp8Case> {};

TEST_P(MultiDeviceFp8Test, ShardsFp8ExpertsOnBlockBoundaries) {
  const Fp8Case& c = GetParam();
  const std::string name = absl::StrCat(c.arch, "_", c.block_rows, "x", c.block_cols);
  fp8::Fp8CheckpointOptions o;
  o.block_rows = c.block_rows;
  o.block_cols = c.block_cols;
  ASSERT_TRUE(fp8::WriteFp8Checkpoint(golden::FixtureDir(c.arch), TempDir(name + "_fp8"),
                                      TempDir(name + "_dequant"), o)
                  .ok());
  auto ckpt = Open(TempDir(name + "_fp8"));
  ASSERT_NE(ckpt, nullptr);
  ASSERT_TRUE(ckpt->config().fp8.enabled);
  absl::StatusOr<golden::Golden> g = golden::LoadGolden(c.arch);
  ASSERT_TRUE(g.ok()) << g.status();
  std::unique_ptr<Engine> single = MakeEngine(ckpt, nullptr);
  ASSERT_NE(single, nullptr);
  const Outputs reference = RunCases(single.get(), *g);
  ExpectMatchesOneDevice(name, ckpt, ExpertShardStorage{}, reference, *g);
}

// deepseek_v3's experts are 48 wide: 16-column blocks give 3 units (D = 2
// and 4 uneven, one device empty at D = 4), 128-column blocks one ragged
// unit (only device 0 holds anything); mixtral's 128 over 16-column blocks
// give 8 units (D = 3 uneven).
INSTANTIATE_TEST_SUITE_P(Fixtures, MultiDeviceFp8Test,
                         ::testing::Values(Fp8Case{"deepseek_v3", 16, 16},
                                           Fp8Case{"deepseek_v3", 128, 128},
                                           Fp8Case{"mixtral", 32, 16}),
                         [](const ::testing::TestParamInfo<Fp8Case>& info) {
                           return absl::StrCat(info.param.arch, "_", info.param.block_rows, "x",
                                               info.param.block_cols);
                         });

struct QuantCase {
  std::string arch, dtype;
  int64_t group_size;
};

class MultiDeviceQuantTest : public ::testing::TestWithParam<QuantCase> {};

TEST_P(MultiDeviceQuantTest, ShardsQuantizedExpertsOnGroupBoundaries) {
  const QuantCase& c = GetParam();
  absl::StatusOr<ExpertStorage> storage = ParseExpertStorage(c.dtype, c.group_size);
  ASSERT_TRUE(storage.ok()) << storage.status();
  ExpertShardStorage shard;
  shard.format = storage->format;
  shard.group_size = storage->group_size;
  shard.block_rows = storage->block_rows;
  shard.scale_dtype = storage->scale_dtype;

  auto ckpt = Open(golden::FixtureDir(c.arch));
  ASSERT_NE(ckpt, nullptr);
  absl::StatusOr<golden::Golden> g = golden::LoadGolden(c.arch);
  ASSERT_TRUE(g.ok()) << g.status();
  // The reference: one device paging the same format from the expert pack
  // (room for every expert, so all end up resident).
  ExpertStoreOptions so;
  so.pack_dir = TempDir(absl::StrCat(c.arch, "_", c.dtype, "_pack"));
  so.storage = *storage;
  std::unique_ptr<Engine> single = MakeEngine(ckpt, ExpertStoreFactory(so));
  ASSERT_NE(single, nullptr);
  const Outputs reference = RunCases(single.get(), *g);
  ExpectMatchesOneDevice(absl::StrCat(c.arch, "_", c.dtype), ckpt, shard, reference, *g);
}

// mixtral: hidden 64, experts 128 wide: 4 groups of 32 (D = 3 uneven).
INSTANTIATE_TEST_SUITE_P(Formats, MultiDeviceQuantTest,
                         ::testing::Values(QuantCase{"mixtral", "int8", 32},
                                           QuantCase{"mixtral", "int4", 32},
                                           QuantCase{"mixtral", "mxfp4", 0},
                                           QuantCase{"qwen3_moe", "int8", 32}),
                         [](const ::testing::TestParamInfo<QuantCase>& info) {
                           return absl::StrCat(info.param.arch, "_", info.param.dtype);
                         });

TEST(MultiDeviceQuant, GroupThatDoesNotDivideTheExpertIsAClearError) {
  auto ckpt = Open(golden::FixtureDir("mixtral"));
  ASSERT_NE(ckpt, nullptr);
  ExpertShardStorage bad;
  bad.format = WeightFormat::kInt8;
  bad.scale_dtype = ScaleDType::kF16;
  bad.group_size = 48;  // does not divide hidden 64
  absl::StatusOr<int64_t> unit = ExpertShardUnit(ckpt->config(), bad);
  ASSERT_FALSE(unit.ok());
  EXPECT_EQ(unit.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(unit.status().message()).find("group size 48"), std::string::npos);
  MultiDeviceOptions o;
  o.storage = bad;
  EngineOptions opts;
  opts.expert_provider_factory = MultiDeviceExpertsFactory(o);
  EXPECT_EQ(Engine::Create(ckpt, opts).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ExpertColumnsTest, CutsOnUnitsAndCoversTheWidthOnce) {
  for (int64_t inter : {1, 48, 100, 128}) {
    for (int64_t unit : {1, 16, 32, 128}) {
      for (int d = 1; d <= 5; ++d) {
        int64_t next = 0;
        for (int r = 0; r < d; ++r) {
          const ShardRange s = ExpertColumns(inter, unit, d, r);
          EXPECT_EQ(s.begin, next);
          if (s.size() > 0 && s.end < inter) {
            EXPECT_EQ(s.end % unit, 0);
          }
          next = s.end;
        }
        EXPECT_EQ(next, inter);
      }
    }
  }
}

}  // namespace
}  // namespace expertd::engine::parallel
