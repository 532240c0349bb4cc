// Attention for up to four queries of one sequence at consecutive positions
// (a prefill chunk) at once, on AVX-512, bitwise attention.cc's per-query
// sequence:
//  - scores: each key's 8-lane DotF32 chain, two keys per zmm (lanes 0-7 key
//    j, lanes 8-15 key j + 1), the query's 8 values broadcast to both halves:
//    one pair of keys is loaded once for the four queries (the per-query path
//    loads every key once per query, one ymm FMA per 8 products);
//  - softmax: the shared scalar code (attention_internal.h);
//  - values: out = fma(w_j, v_j, out) in j order from zero per element (what
//    AxpyF32 does), 64 outputs of each of the four queries in registers, one
//    load of v_j's 64 values for the four.
// Keys every query of the block sees are done together; a later query's
// extra keys (at most three) continue its own chains in order. With a
// sliding window a later query also sees fewer early keys (up to three):
// they share the block's chains with weight 0, which leaves its outputs at
// +0 until its own first key (the values are finite), so the bits stay the
// per-query path's.
#include <immintrin.h>

#include <algorithm>
#include <cstdint>

#include "engine/backend/cpu/attention_internal.h"
#include "engine/backend/cpu/simd.h"

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")

namespace expertd::engine::cpu::internal {
namespace {

constexpr int kPairs = 4;  // 8 keys per step: 4 queries x 4 pairs = 16 accumulators

// Two halves' HorizontalSum: the DotF32 results of keys j (lanes 0-7) and
// j + 1 (lanes 8-15).
inline void PairSums(__m512 acc, float scale, float* first, float* second) {
  *first = HorizontalSum(_mm512_castps512_ps256(acc)) * scale;
  *second =
      HorizontalSum(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc), 1))) * scale;
}

// Scores of keys [j, j + 8) for the block's nq queries (s[q] row q's).
template <int NQ>
void EightKeys(const AttentionParams& p, const int32_t* table, int64_t g, const float* const* q,
               int64_t j, float* const* s) {
  const int64_t d = p.head_dim;
  const float* k[2 * kPairs];
#pragma GCC unroll 8
  for (int c = 0; c < 2 * kPairs; ++c) k[c] = CacheRow(p, table, p.k_cache, g, j + c);
  __m512 acc[NQ][kPairs];
#pragma GCC unroll 4
  for (int r = 0; r < NQ; ++r) {
#pragma GCC unroll 4
    for (int c = 0; c < kPairs; ++c) acc[r][c] = _mm512_setzero_ps();
  }
  for (int64_t i = 0; i < d; i += 8) {  // d % 16 == 0: no tail
    __m512 kv[kPairs];
#pragma GCC unroll 4
    for (int c = 0; c < kPairs; ++c) {
      kv[c] = _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_loadu_ps(k[2 * c] + i)),
                                 _mm256_loadu_ps(k[2 * c + 1] + i), 1);
    }
#pragma GCC unroll 4
    for (int r = 0; r < NQ; ++r) {
      const __m512 qv = _mm512_broadcast_f32x8(_mm256_loadu_ps(q[r] + i));
#pragma GCC unroll 4
      for (int c = 0; c < kPairs; ++c) acc[r][c] = _mm512_fmadd_ps(qv, kv[c], acc[r][c]);
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < NQ; ++r) {
#pragma GCC unroll 4
    for (int c = 0; c < kPairs; ++c)
      PairSums(acc[r][c], p.scale, s[r] + j + 2 * c, s[r] + j + 2 * c + 1);
  }
}

// out[r] = sum over keys of w[r][j] * v_j, 64 values at i0, for the block.
template <int NQ>
void SixtyFour(const AttentionParams& p, const int32_t* table, int64_t g, const float* const* w,
               const int64_t* first, const int64_t* n, int64_t i0, float* const* out) {
  __m512 acc[NQ][4];
#pragma GCC unroll 4
  for (int r = 0; r < NQ; ++r) {
#pragma GCC unroll 4
    for (int c = 0; c < 4; ++c) acc[r][c] = _mm512_setzero_ps();
  }
  const int64_t shared = n[0];
  for (int64_t j = first[0]; j < shared; ++j) {
    const float* v = CacheRow(p, table, p.v_cache, g, j) + i0;
    __m512 vv[4];
#pragma GCC unroll 4
    for (int c = 0; c < 4; ++c) vv[c] = _mm512_loadu_ps(v + 16 * c);
#pragma GCC unroll 4
    for (int r = 0; r < NQ; ++r) {
      const __m512 a = _mm512_set1_ps(w[r][j]);
#pragma GCC unroll 4
      for (int c = 0; c < 4; ++c) acc[r][c] = _mm512_fmadd_ps(a, vv[c], acc[r][c]);
    }
  }
  // Later queries' own keys, continuing their chains in order.
#pragma GCC unroll 4
  for (int r = 1; r < NQ; ++r) {
    for (int64_t j = shared; j < n[r]; ++j) {
      const float* v = CacheRow(p, table, p.v_cache, g, j) + i0;
      const __m512 a = _mm512_set1_ps(w[r][j]);
#pragma GCC unroll 4
      for (int c = 0; c < 4; ++c)
        acc[r][c] = _mm512_fmadd_ps(a, _mm512_loadu_ps(v + 16 * c), acc[r][c]);
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < NQ; ++r) {
#pragma GCC unroll 4
    for (int c = 0; c < 4; ++c) _mm512_storeu_ps(out[r] + i0 + 16 * c, acc[r][c]);
  }
}

// The same for 16 values at i0 (head_dim % 64 tails).
template <int NQ>
void Sixteen(const AttentionParams& p, const int32_t* table, int64_t g, const float* const* w,
             const int64_t* first, const int64_t* n, int64_t i0, float* const* out) {
  __m512 acc[NQ];
#pragma GCC unroll 4
  for (int r = 0; r < NQ; ++r) acc[r] = _mm512_setzero_ps();
  for (int r = 0; r < NQ; ++r) {
    for (int64_t j = first[r]; j < n[r]; ++j) {
      acc[r] = _mm512_fmadd_ps(_mm512_set1_ps(w[r][j]),
                               _mm512_loadu_ps(CacheRow(p, table, p.v_cache, g, j) + i0), acc[r]);
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < NQ; ++r) _mm512_storeu_ps(out[r] + i0, acc[r]);
}

template <int NQ>
void Block(const AttentionParams& p, int64_t t0, int64_t h, float* scores) {
  const int64_t g = h / (p.heads / p.kv_heads);
  const int32_t* table = p.block_tables + static_cast<int64_t>(p.seq[t0]) * p.max_blocks_per_seq;
  const float* q[NQ];
  float* s[NQ];
  float* out[NQ];
  int64_t first[NQ], n[NQ];
  const int64_t stride = static_cast<int64_t>(p.pos[t0 + NQ - 1]) + 1;
  for (int r = 0; r < NQ; ++r) {
    q[r] = p.q + (t0 + r) * p.q_stride + h * p.head_dim;
    out[r] = p.out + (t0 + r) * p.out_stride + h * p.head_dim;
    s[r] = scores + r * stride;
    first[r] = FirstKey(p, p.pos[t0 + r]);
    n[r] = static_cast<int64_t>(p.pos[t0 + r]) + 1;
  }
  // Scores: keys all queries see, 8 at a time, then the rest one query and
  // one key at a time (DotF32).
  int64_t j = first[0];
  for (; j + 2 * kPairs <= n[0]; j += 2 * kPairs) EightKeys<NQ>(p, table, g, q, j, s);
  for (int r = 0; r < NQ; ++r) {
    for (int64_t i = j; i < n[r]; ++i)
      s[r][i] = DotF32(q[r], CacheRow(p, table, p.k_cache, g, i), p.head_dim) * p.scale;
  }
  const bool has_sink = !p.sinks.empty();
  const float sink = SinkLogit(p, h);
  for (int r = 0; r < NQ; ++r) {
    SoftmaxInPlace(s[r] + first[r], n[r] - first[r], has_sink, sink);
    std::fill(s[r] + first[0], s[r] + first[r], 0.0f);
  }
  int64_t i0 = 0;
  for (; i0 + 64 <= p.head_dim; i0 += 64) SixtyFour<NQ>(p, table, g, s, first, n, i0, out);
  for (; i0 < p.head_dim; i0 += 16) Sixteen<NQ>(p, table, g, s, first, n, i0, out);
}

}  // namespace

void AttendBlockAvx512(const AttentionParams& p, int64_t t0, int nq, int64_t h, float* scores) {
  switch (nq) {
    case 4:
      return Block<4>(p, t0, h, scores);
    case 3:
      return Block<3>(p, t0, h, scores);
    case 2:
      return Block<2>(p, t0, h, scores);
    default:
      return Block<1>(p, t0, h, scores);
  }
}

}  // namespace expertd::engine::cpu::internal

#pragma GCC pop_options
