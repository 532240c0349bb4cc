// Naive double-precision references for the kernel tests (test-only).
// Written for clarity, straight from the formulas in op_params.h.
#ifndef EXPERTD_ENGINE_BACKEND_CPU_REFERENCE_OPS_H_
#define EXPERTD_ENGINE_BACKEND_CPU_REFERENCE_OPS_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <cstdlib>
#include <random>
#include <vector>

#include "engine/backend/op_params.h"

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
