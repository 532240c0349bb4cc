#include "engine/experts/expert_store_flags.h"

#include "gtest/gtest.h"

namespace expertd::engine {
namespace {

absl::StatusOr<std::optional<ExpertStoreOptions>> Parse(std::vector<const char*> args) {
  FlagSet flags("test");
  ExpertStoreFlags v;
  RegisterExpertStoreFlags(&flags, &v);
  args.insert(args.begin(), "prog");
  absl::Status s = flags.Parse(static_cast<int>(args.size()), args.data(), nullptr);
  if (!s.ok()) return s;
  return ExpertStoreOptionsFromFlags(v);
}

TEST(ExpertStoreFlagsTest, OffByDefault) {
  auto o = Parse({});
  ASSERT_TRUE(o.ok());
  EXPECT_FALSE(o->has_value());
  // Policy and prefetch configure the store; they do not turn it on.
  auto configured = Parse({"--expert_policy=lfu", "--prefetch=all"});
  ASSERT_TRUE(configured.ok());
  EXPECT_FALSE(configured->has_value());
  auto on = Parse({"--expert_offload"});
  ASSERT_TRUE(on.ok() && on->has_value());
  EXPECT_EQ((*on)->prefetch, PrefetchKind::kSpeculative);  // the default
}

TEST(ExpertStoreFlagsTest, MapsEveryFlag) {
  auto o = Parse({"--expert_cache_bytes=2GiB", "--host_expert_bytes=8GiB", "--expert_policy=lfu",
                  "--prefetch=speculative", "--pin_hot_fraction=0.25", "--expert_pack_dir=/p",
                  "--expert_cache_dir=/c", "--expert_io_threads=8", "--noexpert_direct_io",
                  "--routing_trace=/t.jsonl"});
  ASSERT_TRUE(o.ok()) << o.status();
  ASSERT_TRUE(o->has_value());
  const ExpertStoreOptions& s = **o;
  EXPECT_EQ(s.device_cache_bytes, 2ull << 30);
  EXPECT_EQ(s.host_cache_bytes, 8ull << 30);
  EXPECT_EQ(s.policy, PolicyKind::kLfu);
  EXPECT_EQ(s.prefetch, PrefetchKind::kSpeculative);
  EXPECT_DOUBLE_EQ(s.pin_hot_fraction, 0.25);
  EXPECT_EQ(s.pack_dir, "/p");
  EXPECT_EQ(s.cache_dir, "/c");
  EXPECT_EQ(s.io_threads, 8);
  EXPECT_FALSE(s.direct_io);
  EXPECT_EQ(s.routing_trace_path, "/t.jsonl");
  auto pct = Parse({"--expert_cache_percent=40"});
  ASSERT_TRUE(pct.ok());
  EXPECT_DOUBLE_EQ((*pct)->device_cache_fraction, 0.4);
  auto plain = Parse({"--expert_offload"});
  ASSERT_TRUE(plain.ok() && plain->has_value());
  EXPECT_EQ((*plain)->device_cache_bytes, 0u);  // room for every expert
}

TEST(ExpertStoreFlagsTest, ErrorsNameTheFlag) {
  auto bad_policy = Parse({"--expert_policy=mru"});
  EXPECT_NE(bad_policy.status().message().find("--expert_policy"), std::string::npos);
  auto bad_prefetch = Parse({"--prefetch=oracle"});
  EXPECT_NE(bad_prefetch.status().message().find("--prefetch"), std::string::npos);
  auto both = Parse({"--expert_cache_bytes=1GiB", "--expert_cache_percent=10"});
  EXPECT_EQ(both.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ExpertStoreFlagsTest, ExpertDtypeQuantizesAndTurnsOffloadingOn) {
  auto o = Parse({"--expert_dtype=int4", "--expert_group_size=128"});
  ASSERT_TRUE(o.ok()) << o.status();
  ASSERT_TRUE(o->has_value());
  EXPECT_EQ((*o)->storage.format, WeightFormat::kInt4);
  EXPECT_EQ((*o)->storage.group_size, 128);
  EXPECT_EQ((*o)->device_cache_bytes, 0u);  // room for every expert: resident, quantized
  auto bad = Parse({"--expert_dtype=fp3"});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("--expert_dtype"), std::string::npos);
  auto bad_group = Parse({"--expert_dtype=mxfp4", "--expert_group_size=128"});
  ASSERT_FALSE(bad_group.ok());
  EXPECT_NE(bad_group.status().message().find("--expert_group_size"), std::string::npos);
  auto fp8 = Parse({"--expert_dtype=fp8"});
  ASSERT_TRUE(fp8.ok()) << fp8.status();
  ASSERT_TRUE(fp8->has_value());
  EXPECT_EQ((*fp8)->storage.format, WeightFormat::kFp8E4m3Block);
  EXPECT_EQ((*fp8)->storage.Name(), "fp8-block-g128x128-f32");
  auto fp8_group = Parse({"--expert_dtype=fp8", "--expert_group_size=32"});
  ASSERT_FALSE(fp8_group.ok());
  EXPECT_NE(fp8_group.status().message().find("--expert_group_size"), std::string::npos);
}

TEST(ExpertStoreFlagsTest, ExpertComputeHostOrAutoTurnsOffloadingOn) {
  auto host = Parse({"--expert_compute=host", "--host_compute_threads=3"});
  ASSERT_TRUE(host.ok()) << host.status();
  ASSERT_TRUE(host->has_value());
  EXPECT_EQ((*host)->compute, ExpertComputeMode::kHost);
  EXPECT_EQ((*host)->host_compute_threads, 3);
  auto automatic = Parse({"--expert_compute=auto"});
  ASSERT_TRUE(automatic.ok() && automatic->has_value());
  EXPECT_EQ((*automatic)->compute, ExpertComputeMode::kAuto);
  auto device = Parse({"--expert_compute=device"});  // today's paging: configures only
  ASSERT_TRUE(device.ok());
  EXPECT_FALSE(device->has_value());
  auto bad = Parse({"--expert_compute=gpu"});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("--expert_compute"), std::string::npos);
}

}  // namespace
}  // namespace expertd::engine
