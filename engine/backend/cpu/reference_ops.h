// Naive double-precision references for the kernel tests (test-only).
// Written for clarity, straight from the formulas in op_params.h.
#ifndef EXPERTD_ENGINE_BACKEND_CPU_REFERENCE_OPS_H_
#define EXPERTD_ENGINE_BACKEND_CPU_REFERENCE_OPS_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "absl/status/status.h"
#include "engine/backend/op_params.h"
#include "engine/backend/weight_quantize.h"

namespace expertd::engine::reference {

using models::F32ToBf16;
inline uint16_t F32ToF16(float f) {
  // Via the hardware conversion-free path: simple round-to-nearest for the
  // normal range used in tests.
  uint32_t x;
  std::memcpy(&x, &f, sizeof(x));
  uint32_t sign = (x >> 16) & 0x8000;
  int32_t exp = static_cast<int32_t>((x >> 23) & 0xFF) - 127 + 15;
  uint32_t mant = x & 0x7FFFFF;
  if (exp <= 0) return static_cast<uint16_t>(sign);
  uint32_t h = sign | (static_cast<uint32_t>(exp) << 10) | (mant >> 13);
  if ((mant >> 12) & 1) ++h;  // round half up (fine for tests)
  return static_cast<uint16_t>(h);
}
inline double F16ToDouble(uint16_t h) {
  int exp = (h >> 10) & 0x1F;
  int mant = h & 0x3FF;
  double v = exp == 0 ? std::ldexp(mant, -24) : std::ldexp(1024 + mant, exp - 25);
  return (h & 0x8000) ? -v : v;
}

// A weight tensor in any dtype, with its exact values as doubles.
struct TestWeight {
  DType dtype = DType::kF32;
  int64_t rows = 0, cols = 0;
  std::vector<float> f32;
  std::vector<uint16_t> u16;
  std::vector<double> exact;  // the value each stored element represents

  WeightRef ref() const {
    WeightRef w;
    w.data = dtype == DType::kF32 ? static_cast<const void*>(f32.data())
                                  : static_cast<const void*>(u16.data());
    w.dtype = dtype;
    w.rows = rows;
    w.cols = cols;
    return w;
  }
};

inline TestWeight RandomWeight(DType dtype, int64_t rows, int64_t cols, std::mt19937* rng,
                               float scale = 1.0f) {
  std::normal_distribution<float> dist(0.0f, scale);
  TestWeight w;
  w.dtype = dtype;
  w.rows = rows;
  w.cols = cols;
  for (int64_t i = 0; i < rows * cols; ++i) {
    float v = dist(*rng);
    switch (dtype) {
      case DType::kF32:
        w.f32.push_back(v);
        w.exact.push_back(v);
        break;
      case DType::kBF16:
        w.u16.push_back(F32ToBf16(v));
        w.exact.push_back(models::Bf16ToF32(w.u16.back()));
        break;
      case DType::kF16:
        w.u16.push_back(F32ToF16(v));
        w.exact.push_back(F16ToDouble(w.u16.back()));
        break;
      case DType::kF8E4M3:  // block-scaled: built by the FP8 tests themselves
      case DType::kU8:      // a file dtype only (dtype.h)
        std::abort();
    }
  }
  return w;
}

inline std::vector<float> RandomVector(int64_t n, std::mt19937* rng, float scale = 1.0f) {
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(*rng);
  return v;
}

// max |a - b| / max |b| (the fixtures' relative error).
inline double RelError(const std::vector<float>& a, const std::vector<double>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    num = std::max(num, std::abs(static_cast<double>(a[i]) - b[i]));
    den = std::max(den, std::abs(b[i]));
  }
  return den == 0 ? num : num / den;
}

// y[m, n] = x . w^T + bias
inline std::vector<double> Matmul(const std::vector<float>& x, int64_t m, const TestWeight& w,
                                  const TestWeight* bias) {
  std::vector<double> y(m * w.rows);
  for (int64_t r = 0; r < m; ++r) {
    for (int64_t c = 0; c < w.rows; ++c) {
      double s = bias ? bias->exact[c] : 0.0;
      for (int64_t i = 0; i < w.cols; ++i)
        s += static_cast<double>(x[r * w.cols + i]) * w.exact[c * w.cols + i];
      y[r * w.rows + c] = s;
    }
  }
  return y;
}

// The dense matmul's exact fp32 sequences (matmul_dense.h), scalar: what
// every variant (AVX2, AVX-512, any tile, any split) must equal bitwise.
// simd.h's HorizontalSum: ((s0 + s4) + (s2 + s6)) + ((s1 + s5) + (s3 + s7)).
inline float HorizontalSum8(const float s[8]) {
  return ((s[0] + s[4]) + (s[2] + s[6])) + ((s[1] + s[5]) + (s[3] + s[7]));
}
// Weight element i of column `col` as fp32 (exact for fp32 / bf16 / fp16).
inline float WeightF32(const TestWeight& w, int64_t col, int64_t i) {
  return static_cast<float>(w.exact[col * w.cols + i]);
}
// fp32 / fp16 weights: lane l accumulates k = 8s + l in steps s (the tail
// zero-padded), then HorizontalSum.
inline float DenseDot8Lane(const float* x, const TestWeight& w, int64_t col) {
  const int64_t k = w.cols;
  float acc[8] = {};
  for (int64_t kk = 0; kk < k; kk += 8) {
    for (int64_t l = 0; l < 8; ++l) {
      const bool in = kk + l < k;
      acc[l] = std::fma(in ? x[kk + l] : 0.0f, in ? WeightF32(w, col, kk + l) : 0.0f, acc[l]);
    }
  }
  return HorizontalSum8(acc);
}
// bf16 weights: per 32-block (the tail zero-padded), lane j accumulates
// k = 32b + 2j, then 32b + 2j + 1; lanes j and j + 8 added; HorizontalSum.
inline float DenseDotBf16(const float* x, const TestWeight& w, int64_t col) {
  const int64_t k = w.cols;
  float acc[16] = {};
  auto at = [&](int64_t i, bool weight) -> float {
    if (i >= k) return 0.0f;
    return weight ? WeightF32(w, col, i) : x[i];
  };
  for (int64_t kk = 0; kk < k; kk += 32) {
    for (int64_t j = 0; j < 16; ++j)
      acc[j] = std::fma(at(kk + 2 * j, false), at(kk + 2 * j, true), acc[j]);
    for (int64_t j = 0; j < 16; ++j)
      acc[j] = std::fma(at(kk + 2 * j + 1, false), at(kk + 2 * j + 1, true), acc[j]);
  }
  float s[8];
  for (int l = 0; l < 8; ++l) s[l] = acc[l] + acc[l + 8];
  return HorizontalSum8(s);
}
// Below FLT_MIN -> signed zero (the bf16 dot product's DAZ / FTZ).
inline float FlushSubnormal(float v) {
  return std::fpclassify(v) == FP_SUBNORMAL ? std::copysign(0.0f, v) : v;
}
// x rounded to bf16 as the bf16-activation kernel rounds it.
inline float RoundToBf16(float v) { return models::Bf16ToF32(F32ToBf16(FlushSubnormal(v))); }
// bf16 weights with bf16 activations (matmul_dense.h): x rounded to bf16; per
// 32-block (the tail zero-padded), lane j accumulates k = 32b + 2j + 1, then
// 32b + 2j, each step flushed; lanes j and j + 8 added; HorizontalSum.
inline float DenseDotBf16Activations(const float* x, const TestWeight& w, int64_t col) {
  const int64_t k = w.cols;
  float acc[16] = {};
  auto step = [&](int64_t i, float a) -> float {
    if (i >= k) return FlushSubnormal(std::fma(0.0f, 0.0f, a));
    return FlushSubnormal(std::fma(RoundToBf16(x[i]), FlushSubnormal(WeightF32(w, col, i)), a));
  };
  for (int64_t kk = 0; kk < k; kk += 32) {
    for (int64_t j = 0; j < 16; ++j) {
      acc[j] = step(kk + 2 * j + 1, acc[j]);
      acc[j] = step(kk + 2 * j, acc[j]);
    }
  }
  float s[8];
  for (int l = 0; l < 8; ++l) s[l] = acc[l] + acc[l + 8];
  return HorizontalSum8(s);
}
// Quantized weights (int8 / int4 / mxfp4, groups of 32, 64 or 128; FP8
// blocks of as many columns dividing k, its scale grid's row
// (row0 + col) / block_rows) with bf16 activations
// (quant_matmul_avx512bf16.cc): per group a 16-lane part from
// zero takes each 32-block's pairs (element 2j + 1, then 2j, of the rounded x
// and the decoded codes, flushed as the dot-product instruction does), then
// acc[j] = fma(part[j], scale, acc[j]); lanes j and j + 8 added;
// HorizontalSum. `values` / `q` as WeightRef's data / quant.
inline float QuantDotBf16Activations(const float* x, const uint8_t* values, const WeightQuant& q,
                                     int64_t k, int64_t col) {
  const int64_t g = q.group_size, groups = k / g;
  const uint8_t* row = values + col * QuantValueBytes(q.format, 1, k);
  float acc[16] = {};
  for (int64_t b = 0; b < groups; ++b) {
    float part[16] = {};
    for (int64_t kk = b * g; kk < (b + 1) * g; kk += 32) {
      for (int64_t j = 0; j < 16; ++j) {
        for (int64_t i : {kk + 2 * j + 1, kk + 2 * j}) {
          part[j] = FlushSubnormal(
              std::fma(RoundToBf16(x[i]), DecodeQuantValue(q.format, row, i), part[j]));
        }
      }
    }
    const float scale =
        LoadScaleF32(q.scales, q.scale_dtype, ((q.row0 + col) / q.block_rows) * groups + b);
    for (int64_t j = 0; j < 16; ++j) acc[j] = std::fma(part[j], scale, acc[j]);
  }
  float s[8];
  for (int l = 0; l < 8; ++l) s[l] = acc[l] + acc[l + 8];
  return HorizontalSum8(s);
}

// An [n, k] block-quantized weight for the quantized-kernel tests: codes
// and scales as QuantizeWeights writes them from Gaussian weights (sd 0.05),
// fp16 scales (mxfp4: e8m0). `ref` points into the vectors (a move keeps it
// valid).
struct QuantizedWeight {
  std::vector<uint8_t> values, scales;
  WeightRef ref;
};
inline WeightQuant TestQuantFormat(WeightFormat f, int group) {
  WeightQuant wq;
  wq.format = f;
  wq.group_size = group;
  wq.scale_dtype = f == WeightFormat::kMxfp4 ? ScaleDType::kE8M0 : ScaleDType::kF16;
  return wq;
}
inline absl::Status QuantizeRandomWeight(WeightFormat f, int group, int64_t n, int64_t k,
                                         uint32_t seed, QuantizedWeight* out) {
  std::mt19937 rng(seed);
  const std::vector<float> w = RandomVector(n * k, &rng, 0.05f);
  WeightQuant wq = TestQuantFormat(f, group);
  out->values.resize(QuantValueBytes(f, n, k));
  out->scales.resize(QuantScaleBytes(wq, n, k));
  absl::Status s = QuantizeWeights(w.data(), n, k, wq, out->values.data(), out->scales.data());
  wq.scales = out->scales.data();
  out->ref = WeightRef{out->values.data(), DType::kBF16, n, k, wq};
  return s;
}

// One 32-block of x quantized as the int8-activation kernel quantizes it:
// amax = max |x| (NaN above inf above any number), d = amax / 127,
// q = nearbyint(x * (1 / d)) clamped to [-127, 127]; q = 0 when d is below
// FLT_MIN or not finite (a NaN / inf d then reaches the sums through the
// scale). Returns d.
inline float QuantizeInt8Block(const float* x, int8_t q[32]) {
  uint32_t amax_bits = 0;
  for (int i = 0; i < 32; ++i) {
    uint32_t bits;
    std::memcpy(&bits, &x[i], sizeof(bits));
    amax_bits = std::max(amax_bits, bits & 0x7fffffffu);
  }
  float amax;
  std::memcpy(&amax, &amax_bits, sizeof(amax));
  const float d = amax / 127.0f;
  const bool usable = d >= 1.17549435e-38f && std::isfinite(d);
  const float id = usable ? 1.0f / d : 0.0f;
  for (int i = 0; i < 32; ++i) {
    const float t = usable ? std::nearbyint(x[i] * id) : 0.0f;
    q[i] = static_cast<int8_t>(std::clamp(t, -127.0f, 127.0f));
  }
  return d;
}
// Quantized weights (int8 / int4 / mxfp4, groups of 32, 64 or 128) with int8
// activations (quant_matmul_avx512vnni.cc): x quantized per 32-block
// (QuantizeInt8Block), per block the exact integer sum of q * code (mxfp4's
// e2m1 codes doubled into integers, its scale halved), then one accumulator
// acc = fma(float(sum), scale[c, group of the block] * d, acc), blocks in
// order. `values` / `q` as WeightRef's data / quant.
inline float QuantDotInt8Activations(const float* x, const uint8_t* values, const WeightQuant& q,
                                     int64_t k, int64_t col) {
  const int64_t g = q.group_size, groups = k / g;
  const uint8_t* row = values + col * QuantValueBytes(q.format, 1, k);
  const float code_scale = q.format == WeightFormat::kMxfp4 ? 2.0f : 1.0f;
  float acc = 0.0f;
  for (int64_t b = 0; b < k / 32; ++b) {
    int8_t xq[32];
    const float d = QuantizeInt8Block(x + 32 * b, xq);
    int32_t sum = 0;
    for (int i = 0; i < 32; ++i) {
      const float code = DecodeQuantValue(q.format, row, 32 * b + i) * code_scale;
      sum += xq[i] * static_cast<int32_t>(code);
    }
    const float scale =
        LoadScaleF32(q.scales, q.scale_dtype, col * groups + 32 * b / g) / code_scale;
    acc = std::fma(static_cast<float>(sum), scale * d, acc);
  }
  return acc;
}

// y (+)= x . w^T + bias with the sequence of w's dtype (and, for bf16
// weights, of the activations mode); strides as MatmulParams; y holds y0 on
// entry (read when accumulating).
inline void DenseMatmulSequence(const float* x, int64_t x_stride, int64_t m, const TestWeight& w,
                                const TestWeight* bias, bool accumulate, float* y, int64_t y_stride,
                                MatmulActivations activations = MatmulActivations::kF32) {
  const bool bf16_dot = activations == MatmulActivations::kBF16 && w.dtype == DType::kBF16;
  for (int64_t r = 0; r < m; ++r) {
    for (int64_t c = 0; c < w.rows; ++c) {
      float v = bf16_dot                  ? DenseDotBf16Activations(x + r * x_stride, w, c)
                : w.dtype == DType::kBF16 ? DenseDotBf16(x + r * x_stride, w, c)
                                          : DenseDot8Lane(x + r * x_stride, w, c);
      if (bias != nullptr) v = v + static_cast<float>(bias->exact[c]);
      float& out = y[r * y_stride + c];
      out = accumulate ? out + v : v;
    }
  }
}

inline std::vector<double> RmsNorm(const std::vector<float>& x, int64_t rows, int64_t dim,
                                   const TestWeight& w, double eps) {
  std::vector<double> out(rows * dim);
  for (int64_t r = 0; r < rows; ++r) {
    double ss = 0;
    for (int64_t i = 0; i < dim; ++i) ss += static_cast<double>(x[r * dim + i]) * x[r * dim + i];
    double inv = 1.0 / std::sqrt(ss / dim + eps);
    for (int64_t i = 0; i < dim; ++i) out[r * dim + i] = w.exact[i] * x[r * dim + i] * inv;
  }
  return out;
}

inline double Silu(double x) { return x / (1.0 + std::exp(-x)); }

}  // namespace expertd::engine::reference

#endif  // EXPERTD_ENGINE_BACKEND_CPU_REFERENCE_OPS_H_
