#include "engine/train/expert_uploader.h"

#include "gtest/gtest.h"

namespace expertd::train {
namespace {

constexpr int64_t kH = 4, kF = 6, kE = 5;
constexpr int64_t kWeightBytes = 3 * kH * kF * 4;  // one expert's weights

struct Experts {
  std::vector<Parameter> params;
  FeedForwardParams ffn;
  Experts() {
    params.reserve(3 * kE);
    for (int e = 0; e < kE; ++e) {
      for (const char* proj : {"gate_proj", "up_proj", "down_proj"}) {
        Parameter p;
        p.name = "model.layers.1.mlp.experts." + std::to_string(e) + "." + proj + ".weight";
        p.shape = proj[0] == 'd' ? std::vector<int64_t>{kH, kF} : std::vector<int64_t>{kF, kH};
        p.value.assign(kH * kF, static_cast<float>(e));
        params.push_back(p);
      }
      ffn.experts.push_back({&params[3 * e], &params[3 * e + 1], &params[3 * e + 2]});
    }
  }
};

TEST(ExpertUploaderTest, UploadsInOrderWithinTheBudgetAndDownloadsGradients) {
  Experts x;
  for (int64_t budget : {2 * kWeightBytes * 2, kWeightBytes * 2}) {  // two slots; one slot
    DeviceMemoryTracker device(budget);
    {
      ExpertUploader up(x.ffn, {4, 1, 3}, /*with_grads=*/true, 2, &device, nullptr);
      for (size_t i = 0; i < 3; ++i) {
        absl::StatusOr<DeviceExpert*> slot = up.Get(i);
        ASSERT_TRUE(slot.ok()) << slot.status();
        const int expert = std::vector<int>{4, 1, 3}[i];
        EXPECT_EQ((*slot)->gate.value[0], static_cast<float>(expert));
        EXPECT_EQ((*slot)->gate.name, x.params[3 * expert].name);
        float* g = (*slot)->down.GradForAccumulation();
        g[0] = 1.5f;
        up.Done(i);
      }
      EXPECT_EQ(up.uploaded_bytes(), 3 * kWeightBytes * 2);
    }
    EXPECT_LE(device.peak(), budget);
    EXPECT_EQ(device.in_use(), 0);
    for (int e : {4, 1, 3}) {
      Parameter& down = x.params[3 * e + 2];
      ASSERT_TRUE(down.has_grad) << e;
      EXPECT_EQ(down.grad[0], budget == kWeightBytes * 2 ? 3.0f : 1.5f) << e;  // 2nd pass adds
    }
  }
}

TEST(ExpertUploaderTest, NamesTheExpertThatDoesNotFit) {
  Experts x;
  DeviceMemoryTracker device(kWeightBytes - 1);
  ExpertUploader up(x.ffn, {2, 3}, /*with_grads=*/false, 2, &device, nullptr);
  absl::StatusOr<DeviceExpert*> slot = up.Get(0);
  ASSERT_EQ(slot.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(slot.status().message().find("model.layers.1.mlp.experts.2"), std::string::npos)
      << slot.status();
}

TEST(ExpertUploaderTest, StopsCleanlyWhenTheConsumerLeavesEarly) {
  Experts x;
  DeviceMemoryTracker device(0);
  {
    ExpertUploader up(x.ffn, {0, 1, 2, 3, 4}, /*with_grads=*/false, 2, &device, nullptr);
    ASSERT_TRUE(up.Get(0).ok());
  }  // the destructor stops the thread with slots still held
  EXPECT_EQ(device.in_use(), 0);
}

}  // namespace
}  // namespace expertd::train
