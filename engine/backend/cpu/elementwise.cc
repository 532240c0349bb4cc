// Row-wise elementwise ops: embedding lookup, SwiGLU, scaled row adds, clamp.
// Each loops row by row over a fixed width, so a row's values never depend on
// the number of rows (no flattened loops whose vector/tail split would move).
#include <algorithm>
#include <cassert>
#include <cmath>

#include "engine/backend/cpu/kernels.h"
#include "engine/backend/cpu/simd.h"

namespace expertd::engine::cpu {

void Embedding(const EmbeddingParams& p, ThreadPool* pool) {
  const int64_t dim = p.table.cols;
  ParallelFor(pool, p.rows, 16, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      assert(p.ids[t] >= 0 && p.ids[t] < p.table.rows);
      const int64_t base = static_cast<int64_t>(p.ids[t]) * dim;
      float* out = p.out + t * dim;
      for (int64_t i = 0; i < dim; ++i) out[i] = LoadScalar(p.table.data, p.table.dtype, base + i);
    }
  });
}

void SwiGlu(const SwiGluParams& p, ThreadPool* pool) {
  const int64_t grain = std::max<int64_t>(1, 8192 / std::max<int64_t>(1, p.dim));
  ParallelFor(pool, p.rows, grain, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float* g = p.gate + r * p.gate_stride;
      const float* u = p.up + r * p.up_stride;
      float* out = p.out + r * p.out_stride;
      if (p.limit > 0.0f) {
        // As gpt-oss' reference: gate * sigmoid(gate * alpha) * (up + 1).
        for (int64_t i = 0; i < p.dim; ++i) {
          const float x = std::min(g[i], p.limit);
          const float y = std::clamp(u[i], -p.limit, p.limit);
          out[i] = x * (1.0f / (1.0f + std::exp(-(x * p.alpha)))) * (y + 1.0f);
        }
        continue;
      }
      for (int64_t i = 0; i < p.dim; ++i) {
        const float x = g[i];
        out[i] = (x / (1.0f + std::exp(-x))) * u[i];
      }
    }
  });
}

void AddRows(const AddRowsParams& p, ThreadPool* pool) {
  const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(1, p.dim));
  ParallelFor(pool, p.rows, grain, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      float* y = p.y + r * p.y_stride;
      const float* x = p.x + r * p.x_stride;
      if (p.scale == nullptr) {
        for (int64_t i = 0; i < p.dim; ++i) y[i] = y[i] + x[i];
        continue;
      }
      float s = p.scale[r * p.scale_stride];
      switch (p.scale_fn) {
        case RowScale::kIdentity:
          break;
        case RowScale::kSigmoid:
          s = 1.0f / (1.0f + std::exp(-s));
          break;
      }
      for (int64_t i = 0; i < p.dim; ++i) y[i] = y[i] + s * x[i];
    }
  });
}

void Clamp(const ClampParams& p, ThreadPool* pool) {
  ParallelFor(pool, p.rows, 64, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      float* x = p.x + r * p.stride;
      for (int64_t i = 0; i < p.dim; ++i) x[i] = std::min(p.limit, std::max(-p.limit, x[i]));
    }
  });
}

}  // namespace expertd::engine::cpu
