// Test weights in every format the CPU matmul takes (dense fp32 / bf16 /
// fp16, int8 / int4 / mxfp4 in groups of 32, FP8 blocks), each with the
// values it represents, and the activation modes this CPU runs. Shared by the matmul tests that must cover every
// kernel family.
#ifndef EXPERTD_ENGINE_BACKEND_CPU_TEST_WEIGHTS_H_
#define EXPERTD_ENGINE_BACKEND_CPU_TEST_WEIGHTS_H_

#include <memory>
#include <random>
#include <string>
#include <vector>

#include "engine/backend/cpu/cpu_features.h"
#include "engine/backend/cpu/reference_ops.h"
#include "engine/backend/weight_quantize.h"
#include "gtest/gtest.h"
#include "models/dtype/fp8_block.h"

namespace expertd::engine::cpu::test_weights {

// One expert's weight in some format, with the values it represents.
struct GroupWeight {
  std::vector<float> f32;
  std::vector<uint16_t> u16;
  std::vector<uint8_t> values, scales;
  std::vector<float> fp8_scales;
  std::vector<double> exact;  // [n, k] dequantized
  WeightRef ref;
};

enum class Kind { kF32, kBf16, kF16, kInt8, kInt4, kMxfp4, kFp8 };

inline std::string KindName(Kind kind) {
  switch (kind) {
    case Kind::kF32:
      return "f32";
    case Kind::kBf16:
      return "bf16";
    case Kind::kF16:
      return "f16";
    case Kind::kInt8:
      return "int8";
    case Kind::kInt4:
      return "int4";
    case Kind::kMxfp4:
      return "mxfp4";
    case Kind::kFp8:
      return "fp8";
  }
  return "?";
}

inline std::unique_ptr<GroupWeight> Dense(DType dtype, int64_t n, int64_t k, std::mt19937* rng) {
  auto g = std::make_unique<GroupWeight>();
  reference::TestWeight t = reference::RandomWeight(dtype, n, k, rng, 0.1f);
  g->f32 = t.f32;
  g->u16 = t.u16;
  g->exact = t.exact;
  g->ref = WeightRef{dtype == DType::kF32 ? static_cast<const void*>(g->f32.data())
                                          : static_cast<const void*>(g->u16.data()),
                     dtype, n, k};
  return g;
}

inline std::unique_ptr<GroupWeight> Quantized(WeightFormat f, int64_t n, int64_t k, std::mt19937* rng) {
  auto g = std::make_unique<GroupWeight>();
  const std::vector<float> w = reference::RandomVector(n * k, rng, 0.05f);
  WeightQuant q;
  q.format = f;
  q.group_size = 32;
  q.scale_dtype = f == WeightFormat::kMxfp4 ? ScaleDType::kE8M0 : ScaleDType::kF16;
  g->values.resize(QuantValueBytes(f, n, k));
  g->scales.resize(QuantScaleBytes(q, n, k));
  EXPECT_TRUE(QuantizeWeights(w.data(), n, k, q, g->values.data(), g->scales.data()).ok());
  q.scales = g->scales.data();
  std::vector<float> dq(n * k);
  DequantizeWeights(g->values.data(), q, n, k, dq.data());
  g->exact.assign(dq.begin(), dq.end());
  g->ref = WeightRef{g->values.data(), DType::kF32, n, k, q};
  return g;
}

inline std::unique_ptr<GroupWeight> Fp8(int64_t n, int64_t k, std::mt19937* rng) {
  auto g = std::make_unique<GroupWeight>();
  const models::Fp8BlockShape shape{n, k, 16, 32};
  const std::vector<float> w = reference::RandomVector(n * k, rng, 0.05f);
  g->values.resize(n * k);
  g->fp8_scales.resize(shape.scale_rows() * shape.scale_cols());
  models::QuantizeFp8Block(shape, w.data(), g->values.data(), g->fp8_scales.data());
  std::vector<float> dq(n * k);
  models::DequantizeFp8Block(shape, g->values.data(), g->fp8_scales.data(), dq.data());
  g->exact.assign(dq.begin(), dq.end());
  g->ref = WeightRef{g->values.data(), DType::kF8E4M3, n, k};
  g->ref.quant = Fp8BlockQuant(g->fp8_scales.data(), 16, 32);
  return g;
}

inline std::unique_ptr<GroupWeight> MakeWeight(Kind kind, int64_t n, int64_t k, std::mt19937* rng) {
  switch (kind) {
    case Kind::kF32:
      return Dense(DType::kF32, n, k, rng);
    case Kind::kBf16:
      return Dense(DType::kBF16, n, k, rng);
    case Kind::kF16:
      return Dense(DType::kF16, n, k, rng);
    case Kind::kInt8:
      return Quantized(WeightFormat::kInt8, n, k, rng);
    case Kind::kInt4:
      return Quantized(WeightFormat::kInt4, n, k, rng);
    case Kind::kMxfp4:
      return Quantized(WeightFormat::kMxfp4, n, k, rng);
    case Kind::kFp8:
      return Fp8(n, k, rng);
  }
  return nullptr;
}

inline bool IsQuantized(Kind kind) {
  return kind != Kind::kF32 && kind != Kind::kBf16 && kind != Kind::kF16;
}

// The activation modes this CPU runs (fp32 always; bf16 and int8 where it
// has the dot-product instructions).
inline std::vector<MatmulActivations> ActivationModes() {
  std::vector<MatmulActivations> modes = {MatmulActivations::kF32};
  if (CpuSupportsBf16Dot()) modes.push_back(MatmulActivations::kBF16);
  if (CpuSupportsInt8Activations()) modes.push_back(MatmulActivations::kInt8);
  return modes;
}

}  // namespace expertd::engine::cpu::test_weights

#endif  // EXPERTD_ENGINE_BACKEND_CPU_TEST_WEIGHTS_H_
