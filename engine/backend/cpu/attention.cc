// KV-cache append and causal GQA attention over the block (paged) KV cache.
//
// Attention, for one query row t and head h (kv head g = h / group):
//   for j in 0..pos[t]:  s_j = dot(q, k_j) * scale      (DotF32, fixed order)
//   m = max_j s_j;  e_j = exp(s_j - m);  sum = sum_j e_j  (j order)
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

void AttendOne(const AttentionParams& p, int64_t t, int64_t h, std::vector<float>* scores) {
  const int64_t group = p.heads / p.kv_heads;
  const int64_t g = h / group;
  const int64_t kv_width = p.kv_heads * p.head_dim;
  const int64_t n = static_cast<int64_t>(p.pos[t]) + 1;
  const int32_t* table = p.block_tables + static_cast<int64_t>(p.seq[t]) * p.max_blocks_per_seq;
  const float* q = p.q + t * p.q_stride + h * p.head_dim;
  scores->resize(n);
  float* s = scores->data();
  for (int64_t j = 0; j < n; ++j) {
    const int64_t slot =
        static_cast<int64_t>(table[j / p.block_size]) * p.block_size + j % p.block_size;
    s[j] = DotF32(q, p.k_cache + slot * kv_width + g * p.head_dim, p.head_dim) * p.scale;
  }
  float mx = s[0];
  for (int64_t j = 1; j < n; ++j) mx = std::max(mx, s[j]);
  float sum = 0.0f;
  for (int64_t j = 0; j < n; ++j) {
    s[j] = std::exp(s[j] - mx);
    sum += s[j];
  }
  float* out = p.out + t * p.out_stride + h * p.head_dim;
  std::fill(out, out + p.head_dim, 0.0f);
  for (int64_t j = 0; j < n; ++j) {
    const int64_t slot =
        static_cast<int64_t>(table[j / p.block_size]) * p.block_size + j % p.block_size;
    AxpyF32(s[j] / sum, p.v_cache + slot * kv_width + g * p.head_dim, out, p.head_dim);
  }
}

}  // namespace

void Attention(const AttentionParams& p, ThreadPool* pool) {
  assert(p.heads % p.kv_heads == 0);
  const int64_t units = p.rows * p.heads;
  ParallelFor(pool, units, 4, [&](int64_t begin, int64_t end) {
    std::vector<float> scores;
    for (int64_t u = begin; u < end; ++u) AttendOne(p, u / p.heads, u % p.heads, &scores);
  });
}

}  // namespace expertd::engine::cpu
