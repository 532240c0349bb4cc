// Expected values from an independent transcription of Hugging Face's
// modeling_rope_utils (_compute_default/linear/llama3/yarn_parameters),
// evaluated in double precision.
#include "engine/model/rope.h"

#include <vector>

#include "gtest/gtest.h"

namespace expertd::engine {
namespace {

void ExpectNear(const std::vector<float>& got, const std::vector<double>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i)
    EXPECT_NEAR(got[i], want[i], 2e-7 * want[i] + 1e-12) << "i=" << i;
}

TEST(RopeTableTest, DefaultAndLinear) {
  models::RopeScaling none;
  RopeTable t = ComputeRopeTable(none, 10000.0, 8);
  EXPECT_EQ(t.rotary_dim, 8);
  EXPECT_EQ(t.attention_factor, 1.0f);
  ExpectNear(t.inv_freq, {1.0, 0.1, 0.01, 0.001});
  models::RopeScaling linear;
  linear.type = models::RopeScalingType::kLinear;
  linear.factor = 2.0;
  ExpectNear(ComputeRopeTable(linear, 10000.0, 8).inv_freq, {0.5, 0.05, 0.005, 0.0005});
}

TEST(RopeTableTest, Llama3BlendsByWavelength) {
  models::RopeScaling s;
  s.type = models::RopeScalingType::kLlama3;
  s.factor = 8.0;
  s.low_freq_factor = 1.0;
  s.high_freq_factor = 4.0;
  s.original_max_position_embeddings = 64;
  ExpectNear(
      ComputeRopeTable(s, 500000.0, 16).inv_freq,
      {1.0, 0.0794030091792082, 0.004700753866357992, 0.0009115830921521386, 0.00017677669529663688,
       3.428102195952591e-05, 6.647869871181236e-06, 1.2891731721515574e-06});
}

TEST(RopeTableTest, YarnRampsAndScalesAttention) {
  models::RopeScaling s;
  s.type = models::RopeScalingType::kYarn;
  s.factor = 4.0;
  s.beta_fast = 32;
  s.beta_slow = 1;
  s.original_max_position_embeddings = 64;
  s.mscale = 1.0;
  s.mscale_all_dim = 0.0;
  RopeTable t = ComputeRopeTable(s, 10000.0, 16);
  ExpectNear(t.inv_freq, {1.0, 0.23717082451262847, 0.05, 0.007905694150420948, 0.0025,
                          0.0007905694150420947, 0.00025, 7.905694150420948e-05});
  EXPECT_NEAR(t.attention_factor, 1.138629436111989, 1e-6);
}

}  // namespace
}  // namespace expertd::engine
