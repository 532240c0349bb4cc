// MoE dispatch: gather a token's row into an expert's contiguous batch,
// scatter the expert's outputs back to per-(token, rank) slots, and combine
// the slots per token in ascending expert id order (HF's per-expert loop
// order), each term (w * y) then added; or add one expert's outputs straight
// into the tokens' rows in that same order (MoeScatterAdd).
#include <algorithm>
#include <cassert>
#include <cstring>
#include <numeric>

#include "engine/backend/cpu/kernels.h"

namespace expertd::engine::cpu {

void GatherRows(const GatherRowsParams& p, ThreadPool* pool) {
  ParallelFor(pool, p.rows, 64, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      std::memcpy(p.dst + i * p.dim, p.src + static_cast<int64_t>(p.index[i]) * p.src_stride,
                  p.dim * sizeof(float));
    }
  });
}

void ScatterRows(const ScatterRowsParams& p, ThreadPool* pool) {
  ParallelFor(pool, p.rows, 64, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      std::memcpy(p.dst + static_cast<int64_t>(p.index[i]) * p.dim, p.src + i * p.dim,
                  p.dim * sizeof(float));
    }
  });
}

void MoeCombine(const MoeCombineParams& p, ThreadPool* pool) {
  assert(p.top_k >= 1 && p.top_k <= 64);
  const int64_t grain = std::max<int64_t>(1, 4096 / std::max<int64_t>(1, p.dim));
  ParallelFor(pool, p.rows, grain, [&](int64_t begin, int64_t end) {
    int32_t order[64];
    for (int64_t t = begin; t < end; ++t) {
      const int32_t* ids = p.ids + t * p.top_k;
      std::iota(order, order + p.top_k, 0);
      std::sort(order, order + p.top_k, [&](int32_t a, int32_t b) { return ids[a] < ids[b]; });
      float* out = p.out + t * p.out_stride;
      if (!p.accumulate) std::fill(out, out + p.dim, 0.0f);
      for (int64_t j = 0; j < p.top_k; ++j) {
        const int64_t slot = t * p.top_k + order[j];
        const float w = p.weights[slot];
        const float* y = p.slots + slot * p.dim;
        for (int64_t i = 0; i < p.dim; ++i) out[i] = out[i] + w * y[i];
      }
    }
  });
}

void MoeScatterAdd(const MoeScatterAddParams& p, ThreadPool* pool) {
  const int64_t grain = std::max<int64_t>(1, 4096 / std::max<int64_t>(1, p.dim));
  ParallelFor(pool, p.rows, grain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const int64_t slot = p.slot[i];
      const float w = p.weights[slot];
      const float* y = p.src + i * p.dim;
      float* out = p.out + (slot / p.top_k) * p.dim;
      for (int64_t c = 0; c < p.dim; ++c) out[c] = out[c] + w * y[c];
    }
  });
}

}  // namespace expertd::engine::cpu
