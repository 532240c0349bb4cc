// Pieces the attention kernels share (attention.cc, the AVX2 per-query path;
// attention_avx512.cc, blocks of queries). Baseline code: include before any
// target pragma, so both files run the same instructions for the softmax.
#ifndef EXPERTD_ENGINE_BACKEND_CPU_ATTENTION_INTERNAL_H_
#define EXPERTD_ENGINE_BACKEND_CPU_ATTENTION_INTERNAL_H_

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "engine/backend/op_params.h"

namespace expertd::engine::cpu::internal {

// Position j's row of a cache (k_cache or v_cache) for kv head g.
inline const float* CacheRow(const AttentionParams& p, const int32_t* table, const float* cache,
                             int64_t g, int64_t j) {
  const int64_t slot =
      static_cast<int64_t>(table[j / p.block_size]) * p.block_size + j % p.block_size;
  return cache + slot * p.kv_heads * p.head_dim + g * p.head_dim;
}

// s[0, n) -> softmax weights in place: max, exp(s - max) and their sum in j
// order, then each divided by the sum.
__attribute__((noinline)) inline void SoftmaxInPlace(float* s, int64_t n) {
  float mx = s[0];
  for (int64_t j = 1; j < n; ++j) mx = std::max(mx, s[j]);
  float sum = 0.0f;
  for (int64_t j = 0; j < n; ++j) {
    s[j] = std::exp(s[j] - mx);
    sum += s[j];
  }
  for (int64_t j = 0; j < n; ++j) s[j] = s[j] / sum;
}

// The most queries AttendBlockAvx512 takes at once.
inline constexpr int kAttendBlockRows = 4;

// Queries t0 .. t0 + nq - 1 (1 <= nq <= kAttendBlockRows) of head h, which
// belong to one sequence at consecutive positions; bitwise what attention.cc
// computes for each alone. `scores`: room for nq x (pos[t0 + nq - 1] + 1)
// floats. REQUIRES: CpuSupports(kAvx512), head_dim % 16 == 0.
void AttendBlockAvx512(const AttentionParams& p, int64_t t0, int nq, int64_t h, float* scores);

}  // namespace expertd::engine::cpu::internal

#endif  // EXPERTD_ENGINE_BACKEND_CPU_ATTENTION_INTERNAL_H_
