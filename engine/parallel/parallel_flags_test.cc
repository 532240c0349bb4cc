#include "engine/parallel/parallel_flags.h"

#include "gtest/gtest.h"

namespace expertd::engine::parallel {
namespace {

absl::StatusOr<std::optional<MultiDeviceOptions>> Parse(std::vector<std::string> args,
                                                        int64_t threads = 4) {
  FlagSet flags("test");
  ParallelFlags values;
  RegisterParallelFlags(&flags, &values);
  std::vector<char*> argv = {const_cast<char*>("test")};
  for (std::string& a : args) argv.push_back(a.data());
  absl::Status st = flags.Parse(static_cast<int>(argv.size()), argv.data(), nullptr);
  if (!st.ok()) return st;
  return MultiDeviceOptionsFromFlags(values, threads);
}

TEST(ParallelFlags, OneDeviceIsTheSingleDeviceEngine) {
  auto o = Parse({});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_FALSE(o->has_value());
}

TEST(ParallelFlags, DevicesSplitTheThreadBudget) {
  auto o = Parse({"--devices=3", "--moe_parallel=shard"}, 7);
  ASSERT_TRUE(o.ok()) << o.status();
  ASSERT_TRUE(o->has_value());
  EXPECT_EQ((*o)->devices, 3);
  EXPECT_EQ((*o)->mode, MoeParallelism::kShard);
  EXPECT_EQ((*o)->device_backend.threads, 2);
  o = Parse({"--devices=4"}, 2);
  EXPECT_EQ((*o)->device_backend.threads, 1);
}

TEST(ParallelFlags, ExpertParallelismWithCapacity) {
  auto o = Parse({"--devices=2", "--moe_parallel=expert", "--capacity_factor=1.25"});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ((*o)->mode, MoeParallelism::kExpert);
  EXPECT_DOUBLE_EQ((*o)->capacity_factor, 1.25);
}

TEST(ParallelFlags, BadValuesNameTheFlag) {
  auto msg = [](std::vector<std::string> args) {
    auto o = Parse(std::move(args));
    EXPECT_FALSE(o.ok());
    return std::string(o.status().message());
  };
  EXPECT_NE(msg({"--moe_parallel=tensor"}).find("--moe_parallel"), std::string::npos);
  EXPECT_NE(msg({"--devices=2", "--capacity_factor=1"}).find("--capacity_factor"),
            std::string::npos);
  EXPECT_NE(msg({"--devices=0"}).find("devices"), std::string::npos);
  EXPECT_NE(msg({"--expert_gemm=batched"}).find("--expert_gemm"), std::string::npos);
}

TEST(ParallelFlags, ExpertGemmReachesEveryDeviceAndTheEngine) {
  auto o = Parse({"--devices=2", "--expert_gemm=grouped"});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ((*o)->expert_gemm, ExpertGemm::kGrouped);
  ParallelFlags f;
  EXPECT_EQ(*ExpertGemmFromFlags(f), ExpertGemm::kAuto);
  f.expert_gemm = "per_expert";
  EXPECT_EQ(*ExpertGemmFromFlags(f), ExpertGemm::kPerExpert);
}

}  // namespace
}  // namespace expertd::engine::parallel
