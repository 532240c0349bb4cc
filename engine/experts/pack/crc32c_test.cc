#include "engine/experts/pack/crc32c.h"

#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace expertd::engine {
namespace {

TEST(Crc32cTest, KnownVectors) {
  EXPECT_EQ(Crc32c("123456789", 9), 0xE3069283u);
  EXPECT_EQ(Crc32cExtendPortable(0, "123456789", 9), 0xE3069283u);
  EXPECT_EQ(Crc32c("", 0), 0u);
  // RFC 3720 B.4: 32 bytes of zeros -> 0x8A9136AA; of 0xFF -> 0x62A8AB43.
  std::vector<uint8_t> zeros(32, 0), ones(32, 0xFF);
  EXPECT_EQ(Crc32c(zeros.data(), 32), 0x8A9136AAu);
  EXPECT_EQ(Crc32c(ones.data(), 32), 0x62A8AB43u);
  std::vector<uint8_t> inc(32);
  for (int i = 0; i < 32; ++i) inc[i] = static_cast<uint8_t>(i);
  EXPECT_EQ(Crc32c(inc.data(), 32), 0x46DD794Eu);
}

TEST(Crc32cTest, FastPathMatchesPortableAndExtends) {
  std::mt19937 rng(3);
  std::vector<uint8_t> data(10007);
  for (auto& b : data) b = static_cast<uint8_t>(rng());
  for (size_t n : {0u, 1u, 7u, 8u, 9u, 63u, 4096u, 10007u}) {
    EXPECT_EQ(Crc32c(data.data(), n), Crc32cExtendPortable(0, data.data(), n)) << n;
  }
  const uint32_t whole = Crc32c(data.data(), data.size());
  for (size_t split : {1u, 13u, 5000u}) {
    EXPECT_EQ(Crc32cExtend(Crc32c(data.data(), split), data.data() + split, data.size() - split),
              whole);
  }
  data[100] ^= 1;
  EXPECT_NE(Crc32c(data.data(), data.size()), whole);
}

}  // namespace
}  // namespace expertd::engine
