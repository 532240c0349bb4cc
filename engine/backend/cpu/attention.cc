// KV-cache append and causal GQA attention over the block (paged) KV cache.
//
// Attention, for one query row t and head h (kv head g = h / group), over
// the keys j = first..pos[t] (first = 0, or pos[t] - window + 1):
//   s_j = dot(q, k_j) * scale                            (DotF32, fixed order)
//   m = max_j s_j;  e_j = exp(s_j - m);  sum = sum_j e_j  (j order)
//   with a sink logit z: m = max(m, z), sum += exp(z - m) after the keys
//   out = sum_j (e_j / sum) * v_j                        (j order, FMA)
// Keys are found through the sequence's block table: position j lives in
// block block_tables[seq][j / block_size], slot offset j % block_size. The
// computation depends only on (q row, the sequence's cached keys/values), so
// it is batch-invariant and chunking-invariant.
#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstring>
#include <vector>

#include "engine/backend/cpu/attention_internal.h"
#include "engine/backend/cpu/cpu_features.h"
#include "engine/backend/cpu/kernels.h"
#include "engine/backend/cpu/simd.h"

namespace expertd::engine::cpu {

void KvAppend(const KvAppendParams& p, ThreadPool* pool) {
  const int64_t width = p.kv_heads * p.head_dim;
  ParallelFor(pool, p.rows, 64, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const int64_t slot = p.slots[t];
      std::memcpy(p.k_cache + slot * width, p.k + t * p.k_stride, width * sizeof(float));
      std::memcpy(p.v_cache + slot * width, p.v + t * p.v_stride, width * sizeof(float));
    }
  });
}

namespace {

using internal::CacheRow;

// s[j] = DotF32(q, k_{first + j}) * scale for j < n. Eight keys at a time, each its own
// FMA chain (one chain alone waits on the FMA latency); every key's sequence
// is DotF32's, so the bits are one DotF32 per key's.
void Scores(const AttentionParams& p, const int32_t* table, int64_t g, const float* q,
            int64_t first, int64_t n, float* s) {
  constexpr int kKeys = 8;
  const int64_t d = p.head_dim, full = d / 8 * 8;
  int64_t j = 0;
  for (; j + kKeys <= n; j += kKeys) {
    const float* k[kKeys];
    __m256 acc[kKeys];
    for (int c = 0; c < kKeys; ++c) {
      k[c] = CacheRow(p, table, p.k_cache, g, first + j + c);
      acc[c] = _mm256_setzero_ps();
    }
    for (int64_t i = 0; i < full; i += 8) {
      const __m256 qv = LoadF32x8(q + i);
#pragma GCC unroll 8
      for (int c = 0; c < kKeys; ++c) acc[c] = _mm256_fmadd_ps(qv, LoadF32x8(k[c] + i), acc[c]);
    }
    if (full < d) {
      const __m256 qv = LoadTailF32(q + full, d - full);
      for (int c = 0; c < kKeys; ++c)
        acc[c] = _mm256_fmadd_ps(qv, LoadTailF32(k[c] + full, d - full), acc[c]);
    }
    for (int c = 0; c < kKeys; ++c) s[j + c] = HorizontalSum(acc[c]) * p.scale;
  }
  for (; j < n; ++j) s[j] = DotF32(q, CacheRow(p, table, p.k_cache, g, first + j), d) * p.scale;
}

// out = sum_j w[j] * v_{first + j} in j order, one FMA per element and key (AxpyF32's
// sequence from out = 0). 64 outputs at a time live in registers across all
// keys instead of being loaded and stored once per key; the bits are the
// same.
void WeightedValues(const AttentionParams& p, const int32_t* table, int64_t g, const float* w,
                    int64_t first, int64_t n, float* out) {
  constexpr int kRegs = 8;
  const int64_t d = p.head_dim;
  int64_t i0 = 0;
  for (; i0 + 8 * kRegs <= d; i0 += 8 * kRegs) {
    __m256 acc[kRegs];
    for (int c = 0; c < kRegs; ++c) acc[c] = _mm256_setzero_ps();
    for (int64_t j = 0; j < n; ++j) {
      const __m256 a = _mm256_set1_ps(w[j]);
      const float* v = CacheRow(p, table, p.v_cache, g, first + j) + i0;
#pragma GCC unroll 8
      for (int c = 0; c < kRegs; ++c) acc[c] = _mm256_fmadd_ps(a, LoadF32x8(v + 8 * c), acc[c]);
    }
    for (int c = 0; c < kRegs; ++c) _mm256_storeu_ps(out + i0 + 8 * c, acc[c]);
  }
  if (i0 < d) {
    std::fill(out + i0, out + d, 0.0f);
    for (int64_t j = 0; j < n; ++j)
      AxpyF32(w[j], CacheRow(p, table, p.v_cache, g, first + j) + i0, out + i0, d - i0);
  }
}

void AttendOne(const AttentionParams& p, int64_t t, int64_t h, std::vector<float>* scores) {
  const int64_t group = p.heads / p.kv_heads;
  const int64_t g = h / group;
  const int64_t first = internal::FirstKey(p, p.pos[t]);
  const int64_t n = static_cast<int64_t>(p.pos[t]) + 1 - first;
  const int32_t* table = p.block_tables + static_cast<int64_t>(p.seq[t]) * p.max_blocks_per_seq;
  const float* q = p.q + t * p.q_stride + h * p.head_dim;
  scores->resize(n);
  float* s = scores->data();
  Scores(p, table, g, q, first, n, s);
  internal::SoftmaxInPlace(s, n, !p.sinks.empty(), internal::SinkLogit(p, h));
  WeightedValues(p, table, g, s, first, n, p.out + t * p.out_stride + h * p.head_dim);
}

// Rows [t0, t0 + n): one sequence at consecutive positions, n <= 4.
struct QueryBlock {
  int64_t t0;
  int n;
};

std::vector<QueryBlock> QueryBlocks(const AttentionParams& p) {
  std::vector<QueryBlock> blocks;
  for (int64_t t = 0; t < p.rows;) {
    int n = 1;
    while (n < internal::kAttendBlockRows && t + n < p.rows && p.seq[t + n] == p.seq[t] &&
           p.pos[t + n] == p.pos[t + n - 1] + 1)
      ++n;
    blocks.push_back({t, n});
    t += n;
  }
  return blocks;
}

}  // namespace

void Attention(const AttentionParams& p, ThreadPool* pool) {
  assert(p.heads % p.kv_heads == 0);
  if (BestCpuIsa() == CpuIsa::kAvx512 && p.head_dim % 16 == 0) {
    // Blocks of a prefill chunk's queries share each key and value load
    // (attention_avx512.cc); the bits are the per-query path's.
    const std::vector<QueryBlock> blocks = QueryBlocks(p);
    const int64_t units = static_cast<int64_t>(blocks.size()) * p.heads;
    ParallelFor(pool, units, 1, [&](int64_t begin, int64_t end) {
      std::vector<float> scores;
      for (int64_t u = begin; u < end; ++u) {
        const QueryBlock& b = blocks[u / p.heads];
        const size_t want = static_cast<size_t>(b.n) * (p.pos[b.t0 + b.n - 1] + 1);
        if (scores.size() < want) scores.resize(want);
        internal::AttendBlockAvx512(p, b.t0, b.n, u % p.heads, scores.data());
      }
    });
    return;
  }
  const int64_t units = p.rows * p.heads;
  ParallelFor(pool, units, 4, [&](int64_t begin, int64_t end) {
    std::vector<float> scores;
    for (int64_t u = begin; u < end; ++u) AttendOne(p, u / p.heads, u % p.heads, &scores);
  });
}

}  // namespace expertd::engine::cpu
