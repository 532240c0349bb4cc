#include "models/dtype/fp8_block.h"

#include <algorithm>
#include <cmath>

#include "models/dtype/dtype.h"

namespace expertd::models {

void DequantizeFp8Block(const Fp8BlockShape& s, const uint8_t* codes, const float* scale_inv,
                        float* out) {
  const int64_t sc = s.scale_cols();
  for (int64_t i = 0; i < s.rows; ++i) {
    const float* srow = scale_inv + (i / s.block_rows) * sc;
    for (int64_t j = 0; j < s.cols; ++j) {
      out[i * s.cols + j] = E4m3ToF32(codes[i * s.cols + j]) * srow[j / s.block_cols];
    }
  }
}

void QuantizeFp8Block(const Fp8BlockShape& s, const float* w, uint8_t* codes, float* scale_inv) {
  const int64_t sc = s.scale_cols();
  for (int64_t bi = 0; bi < s.scale_rows(); ++bi) {
    for (int64_t bj = 0; bj < sc; ++bj) {
      const int64_t r0 = bi * s.block_rows, r1 = std::min(s.rows, r0 + s.block_rows);
      const int64_t c0 = bj * s.block_cols, c1 = std::min(s.cols, c0 + s.block_cols);
      float amax = 0.0f;
      for (int64_t i = r0; i < r1; ++i) {
        for (int64_t j = c0; j < c1; ++j) amax = std::max(amax, std::fabs(w[i * s.cols + j]));
      }
      const float scale = amax > 0.0f ? amax / kE4m3Max : 1.0f;
      scale_inv[bi * sc + bj] = scale;
      for (int64_t i = r0; i < r1; ++i) {
        for (int64_t j = c0; j < c1; ++j)
          codes[i * s.cols + j] = F32ToE4m3(w[i * s.cols + j] / scale);
      }
    }
  }
}

}  // namespace expertd::models
