// Causal GQA attention backward (CPU twin: AttentionBackward in ops.cc), in
// three plain passes over a dscores workspace the size of probs:
//  1. one block per (sequence, query head, query row i): for each key j <= i
//     dP_ij = dout_i . v_j, then dS_ij = P_ij (dP_ij - sum_j dP_ij P_ij) / sqrt(Dh)
//     (or * scale), written to dscores (0 for j > i);
//  2. one thread per element of dq: dq_i += sum_{j <= i} dS_ij k_j, j ascending;
//  3. one thread per element of dk / dv of key row j (kv head g):
//     dv_j += sum_{h in g} sum_{i >= j} P_hij dout_hi, dk_j += ... dS_hij q_hi,
//     over (h, i) ascending: the CPU's order, with the same FMA per term.
// dv is therefore bitwise the CPU's; dq and dk differ by the rounding of the
// dot products (SIMD on the CPU, sequential here): < 1e-5 relative.
#include "engine/train/cuda/train_common.cuh"
#include "engine/train/cuda/train_kernels.h"

namespace expertd::train::cuda {
namespace {

// The pieces of AttentionShape a kernel reads, plus the score factor.
struct Shape {
  int64_t batch, t, q_heads, kv_heads, head_dim, v_dim;
  bool multiply;  // scores were q.k * factor (else q.k / factor)
  float factor;
};

__global__ void __launch_bounds__(kBlockThreads)
    ScoreGradKernel(Shape s, const float* v, const float* probs, const float* dout,
                    float* dscores) {
  __shared__ float scratch[kBlockThreads / kWarpSize];
  const int64_t bhi = blockIdx.x;  // ((b * q_heads) + h) * t + i
  const int64_t i = bhi % s.t, bh = bhi / s.t, h = bh % s.q_heads, b = bh / s.q_heads;
  const int64_t kvh = h / (s.q_heads / s.kv_heads);
  const float* doi = dout + ((b * s.t + i) * s.q_heads + h) * s.v_dim;
  const float* pi = probs + bhi * s.t;
  float* dsi = dscores + bhi * s.t;
  float partial = 0.0f;
  for (int64_t j = threadIdx.x; j <= i; j += kBlockThreads) {
    const float* vj = v + ((b * s.t + j) * s.kv_heads + kvh) * s.v_dim;
    float dp = 0.0f;
    for (int64_t d = 0; d < s.v_dim; ++d) dp = fmaf(doi[d], vj[d], dp);
    dsi[j] = dp;
    partial = fmaf(dp, pi[j], partial);
  }
  const float dot_sum = BlockSum(partial, scratch);
  for (int64_t j = threadIdx.x; j < s.t; j += kBlockThreads) {
    if (j > i) {
      dsi[j] = 0.0f;
      continue;
    }
    const float dscore = MulRn(pi[j], SubRn(dsi[j], dot_sum));
    dsi[j] = s.multiply ? MulRn(dscore, s.factor) : DivRn(dscore, s.factor);
  }
}

// One thread per dq element (b, i, h, d).
__global__ void QueryGradKernel(Shape s, const float* k, const float* dscores, float* dq) {
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= s.batch * s.t * s.q_heads * s.head_dim) return;
  const int64_t d = idx % s.head_dim, bih = idx / s.head_dim;
  const int64_t h = bih % s.q_heads, bi = bih / s.q_heads, i = bi % s.t, b = bi / s.t;
  const int64_t kvh = h / (s.q_heads / s.kv_heads);
  const float* dsi = dscores + ((b * s.q_heads + h) * s.t + i) * s.t;
  float acc = dq[idx];
  for (int64_t j = 0; j <= i; ++j) {
    acc = fmaf(dsi[j], k[((b * s.t + j) * s.kv_heads + kvh) * s.head_dim + d], acc);
  }
  dq[idx] = acc;
}

// One thread per element (b, j, kv head, d) of dk (width head_dim; weights
// dscores, rows q) or of dv (width v_dim; weights probs, rows dout).
__global__ void KeyValueGradKernel(Shape s, int64_t width, const float* weights, const float* rows,
                                   float* grad) {
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= s.batch * s.t * s.kv_heads * width) return;
  const int64_t d = idx % width, bjg = idx / width;
  const int64_t kvh = bjg % s.kv_heads, bj = bjg / s.kv_heads, j = bj % s.t, b = bj / s.t;
  const int64_t group = s.q_heads / s.kv_heads;
  float acc = grad[idx];
  for (int64_t h = kvh * group; h < (kvh + 1) * group; ++h) {
    const float* w = weights + (b * s.q_heads + h) * s.t * s.t;
    for (int64_t i = j; i < s.t; ++i) {
      acc = fmaf(w[i * s.t + j], rows[((b * s.t + i) * s.q_heads + h) * width + d], acc);
    }
  }
  grad[idx] = acc;
}

unsigned Blocks(int64_t threads) { return static_cast<unsigned>(CeilDiv(threads, kBlockThreads)); }

}  // namespace

cudaError_t LaunchAttentionBackward(const AttentionShape& as, const float* q, const float* k,
                                    const float* v, const float* probs, const float* dout,
                                    float* dq, float* dk, float* dv, float* dscores,
                                    cudaStream_t stream) {
  if (as.batch < 0 || as.t < 0 || as.q_heads <= 0 || as.kv_heads <= 0 || as.head_dim <= 0 ||
      as.q_heads % as.kv_heads != 0) {
    return cudaErrorInvalidValue;
  }
  Shape s{as.batch,        as.t,
          as.q_heads,      as.kv_heads,
          as.head_dim,     as.value_dim(),
          as.scale > 0.0f, as.scale > 0.0f ? as.scale : std::sqrt(static_cast<float>(as.head_dim))};
  const int64_t rows = s.batch * s.q_heads * s.t;
  const int64_t widest = s.batch * s.t * s.q_heads * (s.head_dim > s.v_dim ? s.head_dim : s.v_dim);
  if (rows > 0x7fffffff || CeilDiv(widest, kBlockThreads) > 0x7fffffff) {
    return cudaErrorInvalidValue;
  }
  if (rows == 0) return cudaSuccess;
  ScoreGradKernel<<<static_cast<unsigned>(rows), kBlockThreads, 0, stream>>>(s, v, probs, dout,
                                                                             dscores);
  const int64_t q_elems = s.batch * s.t * s.q_heads * s.head_dim;
  QueryGradKernel<<<Blocks(q_elems), kBlockThreads, 0, stream>>>(s, k, dscores, dq);
  const int64_t k_elems = s.batch * s.t * s.kv_heads * s.head_dim;
  KeyValueGradKernel<<<Blocks(k_elems), kBlockThreads, 0, stream>>>(s, s.head_dim, dscores, q, dk);
  const int64_t v_elems = s.batch * s.t * s.kv_heads * s.v_dim;
  KeyValueGradKernel<<<Blocks(v_elems), kBlockThreads, 0, stream>>>(s, s.v_dim, probs, dout, dv);
  return cudaGetLastError();
}

}  // namespace expertd::train::cuda
