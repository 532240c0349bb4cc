#include "models/zoo/weight_init.h"

#include <cmath>
#include <cstring>
#include <vector>

#include "gtest/gtest.h"
#include "models/dtype/dtype.h"

namespace expertd::models::zoo {
namespace {

TEST(WeightInitTest, StreamsAreCounterBased) {
  const uint64_t key = TensorStreamKey(7, "model.layers.0.mlp.gate.weight");
  std::vector<float> whole(1001), part(400);
  StandardNormals(key, 0, 1001, whole.data());
  StandardNormals(key, 301, 400, part.data());  // odd start: the second half of a pair
  for (int i = 0; i < 400; ++i) ASSERT_EQ(part[i], whole[301 + i]) << i;
  EXPECT_NE(TensorStreamKey(7, "a"), TensorStreamKey(7, "b"));
  EXPECT_NE(TensorStreamKey(7, "a"), TensorStreamKey(8, "a"));
}

TEST(WeightInitTest, ValuesAreStandardNormal) {
  std::vector<float> v(200000);
  StandardNormals(TensorStreamKey(1, "x"), 0, v.size(), v.data());
  double sum = 0, sq = 0, beyond3 = 0;
  for (float x : v) {
    ASSERT_TRUE(std::isfinite(x));
    sum += x, sq += double{x} * x, beyond3 += std::fabs(x) > 3;
  }
  const double mean = sum / v.size(), var = sq / v.size() - mean * mean;
  EXPECT_NEAR(mean, 0.0, 0.01);
  EXPECT_NEAR(var, 1.0, 0.02);
  EXPECT_NEAR(beyond3 / v.size(), 0.0027, 0.0008);  // tails of a normal
}

TEST(WeightInitTest, ScalesFollowTheRecipe) {
  EXPECT_EQ(InitScale({"e", {100, 64}, TensorRole::kEmbedding}), 1.0f);
  EXPECT_FLOAT_EQ(InitScale({"w", {32, 64}, TensorRole::kLinear}), 0.125f);
  EXPECT_FLOAT_EQ(InitScale({"g", {8, 64}, TensorRole::kRouter}), 0.25f);
  EXPECT_FLOAT_EQ(InitScale({"h", {100, 64}, TensorRole::kLmHead}), 0.25f);
  EXPECT_EQ(InitScale({"n", {64}, TensorRole::kNorm}), 1.0f);
}

TEST(WeightInitTest, FillTensorIsThreadInvariantAndRounded) {
  // Large enough to use several threads.
  ExpectedTensor big{
      "model.layers.3.mlp.experts.1.up_proj.weight", {1024, 1024}, TensorRole::kLinear};
  std::vector<uint8_t> bf16(1024 * 1024 * 2), f32(1024 * 1024 * 4);
  FillTensor(42, big, DType::kBF16, bf16.data());
  FillTensor(42, big, DType::kF32, f32.data());
  std::vector<float> expect(1024 * 1024);
  StandardNormals(TensorStreamKey(42, big.name), 0, expect.size(), expect.data());
  for (size_t i = 0; i < expect.size(); i += 997) {
    const float want = expect[i] * (1.0f / 32.0f);
    float got;
    std::memcpy(&got, f32.data() + 4 * i, 4);
    ASSERT_EQ(got, want) << i;
    uint16_t h;
    std::memcpy(&h, bf16.data() + 2 * i, 2);
    ASSERT_EQ(h, F32ToBf16(want)) << i;
  }
  ExpectedTensor norm{"model.norm.weight", {64}, TensorRole::kNorm};
  std::vector<uint8_t> n(64 * 2);
  FillTensor(42, norm, DType::kBF16, n.data());
  for (int i = 0; i < 64; ++i) {
    uint16_t h;
    std::memcpy(&h, n.data() + 2 * i, 2);
    EXPECT_EQ(Bf16ToF32(h), 1.0f);
  }
}

}  // namespace
}  // namespace expertd::models::zoo
