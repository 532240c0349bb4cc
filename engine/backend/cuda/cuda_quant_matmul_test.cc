// The CUDA quantized matmul (quant_matmul.cu) against its CPU twin
// (cpu::QuantMatmulScalar) for int8 / int4 (groups 32 and 128) and mxfp4,
// decode and prefill row counts, bias and accumulate. Skips without a GPU.
#include <random>
#include <vector>

#include "engine/backend/cpu/quant_matmul.h"
#include "engine/backend/cpu/reference_ops.h"
#include "engine/backend/cuda/cuda_test_util.h"
#include "engine/backend/weight_quantize.h"
#include "gtest/gtest.h"

namespace expertd::engine {
namespace {

using cuda_test::SharedBackend;

TEST(CudaQuantMatmulTest, MatchesTheCpuTwin) {
  EXPERTD_REQUIRE_GPU();
  Backend* be = SharedBackend();
  std::mt19937 rng(1);
  struct Case {
    WeightFormat f;
    int group;
    ScaleDType scale;
  };
  for (const Case& c : {Case{WeightFormat::kInt8, 32, ScaleDType::kF16},
                        Case{WeightFormat::kInt4, 128, ScaleDType::kF16},
                        Case{WeightFormat::kInt4, 32, ScaleDType::kBF16},
                        Case{WeightFormat::kMxfp4, 32, ScaleDType::kE8M0}}) {
    for (int64_t m : {1, 5, 40}) {
      const int64_t n = 70, k = 256;
      std::vector<float> w = reference::RandomVector(n * k, &rng, 0.05f);
      WeightQuant q;
      q.format = c.f;
      q.group_size = c.group;
      q.scale_dtype = c.scale;
      std::vector<uint8_t> values(QuantValueBytes(c.f, n, k)), scales(QuantScaleBytes(q, n, k));
      ASSERT_TRUE(QuantizeWeights(w.data(), n, k, q, values.data(), scales.data()).ok());
      std::vector<float> x = reference::RandomVector(m * k, &rng);
      std::vector<float> bias = reference::RandomVector(n, &rng);
      std::vector<float> want = reference::RandomVector(m * n, &rng), y0 = want;
      MatmulParams p;
      p.x = x.data();
      p.x_stride = k;
      q.scales = scales.data();
      p.w = WeightRef{values.data(), DType::kF32, n, k, q};
      p.bias = WeightRef{bias.data(), DType::kF32, 1, n};
      p.y = want.data();
      p.y_stride = n;
      p.m = m;
      p.accumulate = true;
      cpu::QuantMatmulScalar(p, 0, n);
      auto up = [&](const void* src, uint64_t bytes) {
        DeviceBuffer d = *be->Allocate(bytes, MemoryKind::kDevice);
        EXPECT_TRUE(be->CopyToDevice(d.data(), src, bytes).ok());
        return d;
      };
      DeviceBuffer dx = up(x.data(), x.size() * 4), dy = up(y0.data(), y0.size() * 4);
      DeviceBuffer dv = up(values.data(), values.size()), ds = up(scales.data(), scales.size());
      DeviceBuffer db = up(bias.data(), bias.size() * 4);
      p.x = dx.as<float>();
      p.y = dy.as<float>();
      p.w.data = dv.data();
      p.w.quant.scales = ds.data();
      p.bias.data = db.data();
      be->Matmul(p);
      std::vector<float> got(want.size());
      ASSERT_TRUE(be->CopyToHost(got.data(), dy.data(), got.size() * 4).ok());
      ASSERT_TRUE(be->Synchronize().ok());
      for (size_t i = 0; i < got.size(); ++i)
        EXPECT_NEAR(got[i], want[i], 1e-4 * (1 + std::fabs(want[i]))) << WeightFormatName(c.f) << i;
    }
  }
}

}  // namespace
}  // namespace expertd::engine
