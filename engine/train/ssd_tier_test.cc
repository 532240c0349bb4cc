#include "engine/train/ssd_tier.h"

#include <sys/stat.h>

#include <cstdlib>

#include "gtest/gtest.h"

namespace expertd::train {
namespace {

std::string TmpDir() { return getenv("TEST_TMPDIR") != nullptr ? getenv("TEST_TMPDIR") : "/tmp"; }

TEST(SsdTierTest, RoundTripsAndFreesTheState) {
  auto tier = SsdTier::Create(TmpDir());
  ASSERT_TRUE(tier.ok()) << tier.status();
  (*tier)->Add(3, 5, /*has_master=*/false);
  (*tier)->Add(7, 4, /*has_master=*/true);
  EXPECT_TRUE((*tier)->Holds(3));
  EXPECT_FALSE((*tier)->Holds(4));
  EXPECT_EQ((*tier)->file_bytes(), 5 * 8 + 4 * 12);

  AdamWParamState s;
  ASSERT_TRUE((*tier)->Load(7, &s).ok());  // never written: stays empty (fresh moments)
  EXPECT_TRUE(s.m.empty());
  s.m = {1, 2, 3, 4};
  s.v = {5, 6, 7, 8};
  s.master = {9, 10, 11, 12};
  ASSERT_TRUE((*tier)->Store(7, &s).ok());
  EXPECT_TRUE(s.m.empty() && s.v.empty() && s.master.empty());
  AdamWParamState other;
  other.m = {-1, -2, -3, -4, -5};
  other.v = {1, 1, 1, 1, 1};
  ASSERT_TRUE((*tier)->Store(3, &other).ok());
  ASSERT_TRUE((*tier)->Load(7, &s).ok());
  EXPECT_EQ(s.m, (std::vector<float>{1, 2, 3, 4}));
  EXPECT_EQ(s.v, (std::vector<float>{5, 6, 7, 8}));
  EXPECT_EQ(s.master, (std::vector<float>{9, 10, 11, 12}));
  ASSERT_TRUE((*tier)->Load(3, &other).ok());
  EXPECT_EQ(other.m, (std::vector<float>{-1, -2, -3, -4, -5}));
  EXPECT_EQ((*tier)->bytes_written(), 4 * 12 + 5 * 8);
  EXPECT_EQ((*tier)->bytes_read(), 4 * 12 + 5 * 8);
}

TEST(SsdTierTest, RemovesItsFileAndReportsAMissingDirectory) {
  const std::string path = TmpDir() + "/expert_optimizer_state.bin";
  {
    auto tier = SsdTier::Create(TmpDir());
    ASSERT_TRUE(tier.ok()) << tier.status();
    struct stat st;
    EXPECT_EQ(stat(path.c_str(), &st), 0);
  }
  struct stat st;
  EXPECT_NE(stat(path.c_str(), &st), 0);
  auto missing = SsdTier::Create(TmpDir() + "/no/such/dir");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(missing.status().message().find("--ssd_dir"), std::string::npos);
}

}  // namespace
}  // namespace expertd::train
