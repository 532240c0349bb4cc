// RMSNorm, as Hugging Face computes it in fp32:
//   var = mean(x^2); out = weight * (x * (1 / sqrt(var + eps))).
// The sum of squares is accumulated in double, element by element, so it is
// exact to well below fp32 rounding and identical for every row count.
#include <algorithm>
#include <cassert>
#include <cmath>

#include "engine/backend/cpu/kernels.h"
#include "engine/backend/cpu/simd.h"

namespace expertd::engine::cpu {

void RmsNorm(const RmsNormParams& p, ThreadPool* pool) {
  assert(p.weight.rows * p.weight.cols == p.dim);
  const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(1, p.dim));
  ParallelFor(pool, p.rows, grain, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float* x = p.x + r * p.x_stride;
      float* out = p.out + r * p.out_stride;
      double ss = 0.0;
      for (int64_t i = 0; i < p.dim; ++i) ss += static_cast<double>(x[i]) * x[i];
      const float var = static_cast<float>(ss / static_cast<double>(p.dim));
      const float inv = 1.0f / std::sqrt(var + p.eps);
      for (int64_t i = 0; i < p.dim; ++i) {
        out[i] = LoadScalar(p.weight.data, p.weight.dtype, i) * (x[i] * inv);
      }
    }
  });
}

}  // namespace expertd::engine::cpu
