// The engine over several CPU virtual devices (MoEShard and expert
// parallelism) against the single-device engine, on every fixture the engine
// supports: last-position logits within 1e-5 relative, identical greedy
// tokens, for 1..4 devices.
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"

#include "engine/engine.h"
#include "engine/greedy.h"
#include "engine/model/weight_source.h"
#include "engine/parallel/multi_device_experts.h"
#include "gtest/gtest.h"
#include "models/checkpoint/checkpoint.h"
#include "tests/golden/golden_data.h"

namespace expertd::engine::parallel {
namespace {

const std::vector<std::string> kArchs = {"mixtral", "qwen2_moe", "qwen2_moe_mixed",
                                         "olmoe",   "qwen3_moe", "deepseek_v3"};

absl::StatusOr<std::unique_ptr<Engine>> MakeEngine(const std::string& arch,
                                                   ExpertProviderFactory experts) {
  auto ckpt = models::Checkpoint::Open(golden::FixtureDir(arch));
  if (!ckpt.ok()) return ckpt.status();
  EngineOptions opts;
  opts.backend.threads = 1;
  opts.expert_provider_factory = std::move(experts);
  return Engine::Create(std::shared_ptr<const models::Checkpoint>(std::move(*ckpt)), opts);
}

MultiDeviceOptions Devices(int devices, MoeParallelism mode,
                           std::shared_ptr<MultiDeviceCounters> counters) {
  MultiDeviceOptions o;
  o.devices = devices;
  o.mode = mode;
  o.device_backend.threads = 1;
  o.collectives.timeout = absl::Seconds(60);
  o.counters = std::move(counters);
  return o;
}

struct CaseOutputs {
  std::vector<std::vector<float>> logits;
  std::vector<std::vector<int32_t>> tokens;
};

CaseOutputs RunCases(Engine* engine, const golden::Golden& g) {
  CaseOutputs run;
  for (const golden::GoldenCase& c : g.cases) {
    absl::StatusOr<GreedyResult> r = RunGreedy(engine, 1, c.input_ids, /*generate=*/16);
    EXPECT_TRUE(r.ok()) << c.name << ": " << r.status();
    if (!r.ok()) return run;
    run.logits.push_back(r->last_logits);
    run.tokens.push_back(r->generated);
  }
  return run;
}

class MultiDeviceEngineTest
    : public ::testing::TestWithParam<std::tuple<std::string, MoeParallelism>> {};

TEST_P(MultiDeviceEngineTest, MatchesOneDeviceOnEveryCaseForOneToFourDevices) {
  const auto [arch, mode] = GetParam();
  absl::StatusOr<std::unique_ptr<Engine>> single = MakeEngine(arch, nullptr);
  if (absl::IsUnimplemented(single.status())) GTEST_SKIP() << arch << ": " << single.status();
  ASSERT_TRUE(single.ok()) << single.status();
  absl::StatusOr<golden::Golden> g = golden::LoadGolden(arch);
  ASSERT_TRUE(g.ok()) << g.status();
  const CaseOutputs reference = RunCases(single->get(), *g);
  ASSERT_EQ(reference.tokens.size(), g->cases.size());
  for (int devices = 1; devices <= 4; ++devices) {
    auto counters = std::make_shared<MultiDeviceCounters>();
    absl::StatusOr<std::unique_ptr<Engine>> multi =
        MakeEngine(arch, MultiDeviceExpertsFactory(Devices(devices, mode, counters)));
    ASSERT_TRUE(multi.ok()) << multi.status();
    const CaseOutputs run = RunCases(multi->get(), *g);
    ASSERT_EQ(run.tokens.size(), g->cases.size());
    for (size_t i = 0; i < g->cases.size(); ++i) {
      EXPECT_LT(golden::RelError(run.logits[i], reference.logits[i]), 1e-5)
          << arch << " " << MoeParallelismName(mode) << " devices=" << devices << " "
          << g->cases[i].name;
      EXPECT_EQ(run.tokens[i], reference.tokens[i])
          << arch << " " << MoeParallelismName(mode) << " devices=" << devices << " "
          << g->cases[i].name;
    }
    const MultiDeviceCounters::Snapshot s = counters->Get();
    EXPECT_EQ(s.dropped_assignments, 0);
    ASSERT_EQ(s.device_work.size(), static_cast<size_t>(devices));
    if (mode == MoeParallelism::kShard) {
      // Every device computed its share of every routed row: within one
      // column per expert of the mean.
      for (int64_t w : s.device_work) EXPECT_GT(w, 0);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, MultiDeviceEngineTest,
                         ::testing::Combine(::testing::ValuesIn(kArchs),
                                            ::testing::Values(MoeParallelism::kShard,
                                                              MoeParallelism::kExpert)),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_" +
                                  MoeParallelismName(std::get<1>(info.param));
                         });

TEST(MultiDeviceEngine, ExpertParallelismIsBitwiseOneDeviceAndShardIsClose) {
  absl::StatusOr<std::unique_ptr<Engine>> single = MakeEngine("mixtral", nullptr);
  ASSERT_TRUE(single.ok());
  absl::StatusOr<golden::Golden> g = golden::LoadGolden("mixtral");
  ASSERT_TRUE(g.ok());
  const CaseOutputs reference = RunCases(single->get(), *g);
  auto ep = MakeEngine("mixtral",
                       MultiDeviceExpertsFactory(Devices(3, MoeParallelism::kExpert, nullptr)));
  ASSERT_TRUE(ep.ok());
  const CaseOutputs run = RunCases(ep->get(), *g);
  ASSERT_EQ(run.logits.size(), reference.logits.size());
  for (size_t i = 0; i < run.logits.size(); ++i) EXPECT_EQ(run.logits[i], reference.logits[i]);
}

// MoEShard's devices with the grouped expert GEMM (forced, and the rule on
// 2-thread devices) give bitwise the logits of one GEMM per expert.
TEST(MultiDeviceEngine, ShardGroupedExpertGemmIsBitwisePerExpert) {
  for (const std::string arch : {"mixtral", "deepseek_v3"}) {
    absl::StatusOr<golden::Golden> g = golden::LoadGolden(arch);
    ASSERT_TRUE(g.ok());
    std::vector<CaseOutputs> runs;
    for (ExpertGemm gemm : {ExpertGemm::kPerExpert, ExpertGemm::kGrouped, ExpertGemm::kAuto}) {
      MultiDeviceOptions o = Devices(2, MoeParallelism::kShard, nullptr);
      o.device_backend.threads = 2;
      o.expert_gemm = gemm;
      auto engine = MakeEngine(arch, MultiDeviceExpertsFactory(o));
      ASSERT_TRUE(engine.ok()) << engine.status();
      runs.push_back(RunCases(engine->get(), *g));
    }
    for (size_t r = 1; r < runs.size(); ++r) {
      ASSERT_EQ(runs[r].logits.size(), runs[0].logits.size());
      for (size_t i = 0; i < runs[0].logits.size(); ++i)
        EXPECT_EQ(runs[r].logits[i], runs[0].logits[i]) << arch << " run " << r << " case " << i;
      EXPECT_EQ(runs[r].tokens, runs[0].tokens) << arch;
    }
  }
}

// MoEShard's per-expert GEMMs reading and adding into the token rows in
// place (the CPU's row maps) give bitwise the logits of gathering the rows
// and scatter-adding the outputs (what a backend without them runs).
TEST(MultiDeviceEngine, ShardRowMapsAreBitwiseGatherAndScatter) {
  for (const std::string arch : {"mixtral", "deepseek_v3"}) {
    absl::StatusOr<golden::Golden> g = golden::LoadGolden(arch);
    ASSERT_TRUE(g.ok());
    std::vector<CaseOutputs> runs;
    for (bool row_maps : {true, false}) {
      MultiDeviceOptions o = Devices(3, MoeParallelism::kShard, nullptr);
      o.device_backend.matmul_row_maps = row_maps;
      o.expert_gemm = ExpertGemm::kPerExpert;
      auto engine = MakeEngine(arch, MultiDeviceExpertsFactory(o));
      ASSERT_TRUE(engine.ok()) << engine.status();
      runs.push_back(RunCases(engine->get(), *g));
    }
    ASSERT_EQ(runs[1].logits.size(), runs[0].logits.size());
    ASSERT_FALSE(runs[0].logits.empty());
    for (size_t i = 0; i < runs[0].logits.size(); ++i)
      EXPECT_EQ(runs[1].logits[i], runs[0].logits[i]) << arch << " case " << i;
    EXPECT_EQ(runs[1].tokens, runs[0].tokens) << arch;
  }
}

// Two "pods" of two devices each, meeting by the rendezvous address like
// pods of a LeaderWorkerSet: node 0 runs the engine, node 1 follows it layer
// by layer until node 0's engine goes away; the tokens are the single
// device's.
TEST(MultiDeviceEngine, TwoNodesOfTwoDevicesMatchOneDevice) {
  auto ckpt = models::Checkpoint::Open(golden::FixtureDir("mixtral"));
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  std::shared_ptr<const models::Checkpoint> shared(std::move(*ckpt));
  absl::StatusOr<golden::Golden> g = golden::LoadGolden("mixtral");
  ASSERT_TRUE(g.ok());
  absl::StatusOr<std::unique_ptr<Engine>> single = MakeEngine("mixtral", nullptr);
  ASSERT_TRUE(single.ok());
  const CaseOutputs reference = RunCases(single->get(), *g);
  int round = 0;
  for (MoeParallelism mode : {MoeParallelism::kShard, MoeParallelism::kExpert}) {
    auto node = [&](int rank) {
      MultiDeviceOptions o = Devices(2, mode, nullptr);
      RendezvousSpec spec;
      spec.num_nodes = 2;
      spec.node_rank = rank;
      spec.devices_per_node = 2;
      spec.address = absl::StrCat("multi-node-test-", round, ":29500");
      o.nodes = spec;
      return o;
    };
    CheckpointWeightSource weights(shared);
    absl::Status follower_status = absl::UnknownError("not run");
    std::thread follower([&] {
      ExpertProviderContext ctx{nullptr, &shared->config(), &weights};
      follower_status = RunMultiDeviceFollower(ctx, node(1));
    });
    {
      EngineOptions opts;
      opts.backend.threads = 1;
      opts.expert_provider_factory = MultiDeviceExpertsFactory(node(0));
      absl::StatusOr<std::unique_ptr<Engine>> leader = Engine::Create(shared, opts);
      ASSERT_TRUE(leader.ok()) << leader.status();
      const CaseOutputs run = RunCases(leader->get(), *g);
      ASSERT_EQ(run.tokens.size(), reference.tokens.size());
      for (size_t i = 0; i < run.tokens.size(); ++i) {
        EXPECT_EQ(run.tokens[i], reference.tokens[i]) << MoeParallelismName(mode);
        EXPECT_LT(golden::RelError(run.logits[i], reference.logits[i]), 1e-5);
      }
    }  // node 0's provider goes away: the follower stops
    follower.join();
    EXPECT_TRUE(follower_status.ok()) << follower_status;
    ++round;
  }
  MultiDeviceOptions bad = Devices(2, MoeParallelism::kShard, nullptr);
  bad.nodes = RendezvousSpec{2, 1, 2, "x:1"};
  EngineOptions opts;
  opts.expert_provider_factory = MultiDeviceExpertsFactory(bad);
  EXPECT_EQ(Engine::Create(shared, opts).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(MultiDeviceEngine, CapacityFactorDropsAndCounts) {
  auto counters = std::make_shared<MultiDeviceCounters>();
  MultiDeviceOptions o = Devices(2, MoeParallelism::kExpert, counters);
  o.capacity_factor = 0.25;  // a quarter of the uniform share per expert
  auto engine = MakeEngine("mixtral", MultiDeviceExpertsFactory(o));
  ASSERT_TRUE(engine.ok()) << engine.status();
  absl::StatusOr<GreedyResult> r = RunGreedy(engine->get(), 1, std::vector<int32_t>(33, 7), 0);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_GT(counters->Get().dropped_assignments, 0);
}

TEST(MultiDeviceEngine, BadOptionsAreClearErrors) {
  MultiDeviceOptions o = Devices(0, MoeParallelism::kShard, nullptr);
  EXPECT_EQ(MakeEngine("mixtral", MultiDeviceExpertsFactory(o)).status().code(),
            absl::StatusCode::kInvalidArgument);
  o = Devices(2, MoeParallelism::kShard, nullptr);
  o.capacity_factor = 1.0;
  EXPECT_EQ(MakeEngine("mixtral", MultiDeviceExpertsFactory(o)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseMoeParallelism("tensor").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(*ParseMoeParallelism("expert"), MoeParallelism::kExpert);
}

}  // namespace
}  // namespace expertd::engine::parallel
