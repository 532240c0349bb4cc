// Pieces the attention kernels share (attention.cc, the AVX2 per-query path;
// attention_avx512.cc, blocks of queries). Baseline code: include before any
// target pragma, so both files run the same instructions for the softmax.
#ifndef EXPERTD_ENGINE_BACKEND_CPU_ATTENTION_INTERNAL_H_
#define EXPERTD_ENGINE_BACKEND_CPU_ATTENTION_INTERNAL_H_

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "engine/backend/cpu/simd.h"
#include "engine/backend/op_params.h"

namespace expertd::engine::cpu::internal {

// Position j's row of a cache (k_cache or v_cache) for kv head g.
inline const float* CacheRow(const AttentionParams& p, const int32_t* table, const float* cache,
                             int64_t g, int64_t j) {
  const int64_t slot =
      static_cast<int64_t>(table[j / p.block_size]) * p.block_size + j % p.block_size;
  return cache + slot * p.kv_heads * p.head_dim + g * p.head_dim;
}

// The first key the query at position `pos` sees (AttentionParams::window).
inline int64_t FirstKey(const AttentionParams& p, int64_t pos) {
  return p.window > 0 ? std::max<int64_t>(0, pos - p.window + 1) : 0;
}

// Head h's sink logit (AttentionParams::sinks), 0 when there are none.
inline float SinkLogit(const AttentionParams& p, int64_t h) {
  return p.sinks.empty() ? 0.0f : LoadScalar(p.sinks.data, p.sinks.dtype, h);
}

// s[0, n) -> softmax weights in place: max, exp(s - max) and their sum in j
// order, then each divided by the sum. With a sink (has_sink), its logit
// joins the max and its exp is added to the sum after the keys'.
__attribute__((noinline)) inline void SoftmaxInPlace(float* s, int64_t n, bool has_sink = false,
                                                     float sink = 0.0f) {
  float mx = s[0];
  for (int64_t j = 1; j < n; ++j) mx = std::max(mx, s[j]);
  if (has_sink) mx = std::max(mx, sink);
  float sum = 0.0f;
  for (int64_t j = 0; j < n; ++j) {
    s[j] = std::exp(s[j] - mx);
    sum += s[j];
  }
  if (has_sink) sum += std::exp(sink - mx);
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
