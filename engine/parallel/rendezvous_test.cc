#include "engine/parallel/rendezvous.h"

#include <map>
#include <thread>

#include "base/status_macros.h"
#include "gtest/gtest.h"

namespace expertd::engine::parallel {
namespace {

EnvLookup MapEnv(std::map<std::string, std::string> vars) {
  return [vars = std::move(vars)](const std::string& name) -> std::optional<std::string> {
    auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

TEST(RendezvousFromEnv, NothingSetIsOneNode) {
  absl::StatusOr<RendezvousSpec> spec = RendezvousFromEnv(MapEnv({}), 4);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->num_nodes, 1);
  EXPECT_EQ(spec->world_size(), 4);
  EXPECT_TRUE(spec->address.empty());
  EXPECT_EQ(spec->TopologyOf(3)->rank(), 3);
}

TEST(RendezvousFromEnv, LeaderWorkerSet) {
  absl::StatusOr<RendezvousSpec> spec =
      RendezvousFromEnv(MapEnv({{"LWS_GROUP_SIZE", "2"},
                                {"LWS_WORKER_INDEX", "1"},
                                {"LWS_LEADER_ADDRESS", "moe-0.moe.default"}}),
                        8);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->world_size(), 16);
  EXPECT_EQ(spec->address, "moe-0.moe.default:29500");
  absl::StatusOr<ParallelTopology> t = spec->TopologyOf(2);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->rank(), 10);
  EXPECT_EQ(t->node_rank(), 1);
  EXPECT_EQ(t->local_rank(), 2);
}

TEST(RendezvousFromEnv, IndexedJobWithExplicitCountAndPort) {
  absl::StatusOr<RendezvousSpec> spec =
      RendezvousFromEnv(MapEnv({{"EXPERTD_NUM_NODES", "3"},
                                {"JOB_COMPLETION_INDEX", "2"},
                                {"EXPERTD_LEADER_ADDRESS", "job-0.svc"},
                                {"EXPERTD_RENDEZVOUS_PORT", "4000"}}),
                        1);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->node_rank, 2);
  EXPECT_EQ(spec->address, "job-0.svc:4000");
}

TEST(RendezvousFromEnv, ExplicitVariablesWinOverOrchestratorOnes) {
  absl::StatusOr<RendezvousSpec> spec = RendezvousFromEnv(MapEnv({{"EXPERTD_NODE_RANK", "0"},
                                                                  {"LWS_WORKER_INDEX", "1"},
                                                                  {"LWS_GROUP_SIZE", "2"},
                                                                  {"LWS_LEADER_ADDRESS", "a"},
                                                                  {"EXPERTD_LEADER_ADDRESS", "b"}}),
                                                          2);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->node_rank, 0);
  EXPECT_EQ(spec->address, "b:29500");
}

TEST(RendezvousFromEnv, ClearErrorsNameTheVariable) {
  auto error = [](std::map<std::string, std::string> vars, int devices = 1) {
    absl::StatusOr<RendezvousSpec> spec = RendezvousFromEnv(MapEnv(std::move(vars)), devices);
    EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
    return std::string(spec.status().message());
  };
  EXPECT_NE(error({{"LWS_GROUP_SIZE", "two"}}).find("LWS_GROUP_SIZE"), std::string::npos);
  EXPECT_NE(error({{"EXPERTD_NUM_NODES", "0"}}).find("EXPERTD_NUM_NODES"), std::string::npos);
  EXPECT_NE(error({{"EXPERTD_NUM_NODES", "2"},
                   {"JOB_COMPLETION_INDEX", "2"},
                   {"EXPERTD_LEADER_ADDRESS", "x"}})
                .find("node rank 2"),
            std::string::npos);
  EXPECT_NE(error({{"EXPERTD_NUM_NODES", "2"}}).find("EXPERTD_LEADER_ADDRESS"), std::string::npos);
  EXPECT_NE(error({{"EXPERTD_RENDEZVOUS_PORT", "70000"}}).find("65535"), std::string::npos);
  EXPECT_NE(error({}, 0).find("devices per node"), std::string::npos);
}

// Two "pods" of two devices each meet through the environment and run one
// all-reduce over the four ranks, each pod from its own thread driving its
// devices' threads: the code path a multi-node NCCL group takes.
TEST(JoinInProcess, PodsFromTheEnvironmentFormOneGroup) {
  const int nodes = 2, devices = 2;
  std::vector<std::vector<float>> result(nodes * devices);
  std::vector<absl::Status> status(nodes * devices);
  std::vector<std::thread> pods;
  for (int node = 0; node < nodes; ++node) {
    pods.emplace_back([&, node] {
      absl::StatusOr<RendezvousSpec> spec =
          RendezvousFromEnv(MapEnv({{"LWS_GROUP_SIZE", "2"},
                                    {"LWS_WORKER_INDEX", std::to_string(node)},
                                    {"LWS_LEADER_ADDRESS", "pods-from-env-test"}}),
                            devices);
      absl::StatusOr<std::vector<std::unique_ptr<Collectives>>> ranks =
          spec.ok() ? JoinInProcess(*spec, InProcessOptions{absl::Seconds(30)}) : spec.status();
      if (!ranks.ok()) {
        for (int l = 0; l < devices; ++l) status[node * devices + l] = ranks.status();
        return;
      }
      std::vector<std::thread> device_threads;
      for (int l = 0; l < devices; ++l) {
        device_threads.emplace_back([&, l] {
          Collectives* c = (*ranks)[l].get();
          const int rank = c->topology().rank();
          result[rank] = {static_cast<float>(rank), 1.0f};
          status[rank] = c->AllReduceSum(result[rank].data(), 2);
        });
      }
      for (std::thread& t : device_threads) t.join();
    });
  }
  for (std::thread& t : pods) t.join();
  for (int r = 0; r < nodes * devices; ++r) {
    ASSERT_TRUE(status[r].ok()) << "rank " << r << ": " << status[r];
    EXPECT_EQ(result[r], std::vector<float>({6.0f, 4.0f})) << "rank " << r;
  }
}

TEST(JoinInProcess, DisagreeingWorldSizesAreRejected) {
  RendezvousSpec a{/*num_nodes=*/2, /*node_rank=*/0, /*devices_per_node=*/2, "disagree-test:1"};
  RendezvousSpec b{/*num_nodes=*/2, /*node_rank=*/1, /*devices_per_node=*/4, "disagree-test:1"};
  ASSERT_TRUE(JoinInProcess(a).ok());
  EXPECT_EQ(JoinInProcess(b).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace expertd::engine::parallel
