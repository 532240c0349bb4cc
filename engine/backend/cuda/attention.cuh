// Shared pieces of the two attention kernels (nvcc only).
#ifndef EXPERTD_ENGINE_BACKEND_CUDA_ATTENTION_CUH_
#define EXPERTD_ENGINE_BACKEND_CUDA_ATTENTION_CUH_

#include "engine/backend/cuda/common.cuh"

namespace expertd::engine::cuda {

// Cache slot of position j of the sequence whose block table is `table`.
__device__ __forceinline__ int64_t KvSlot(const int32_t* table, int64_t block_size, int64_t j) {
  return static_cast<int64_t>(table[j / block_size]) * block_size + j % block_size;
}

// Online-softmax update of one query's running (max m, denominator l) with a
// tile of scores, one per lane (-inf for masked keys; at least one lane is
// finite). Returns this lane's unnormalised probability exp(s - m_new) and
// sets *correction = exp(m_old - m_new), by which the running output must
// be scaled before the tile's p * v terms are added.
__device__ __forceinline__ float OnlineSoftmaxTile(float score, float* m, float* l,
                                                   float* correction) {
  const float tile_max = WarpMax(score);
  const float m_new = fmaxf(*m, tile_max);
  *correction = expf(*m - m_new);  // m_old = -inf: 0
  const float prob = score == -INFINITY ? 0.0f : expf(score - m_new);
  *l = *l * *correction + WarpSum(prob);
  *m = m_new;
  return prob;
}

// The first key position a query at `pos` sees: 0, or pos - window + 1 with a
// sliding window (AttentionParams::window).
__device__ __forceinline__ int64_t FirstKey(const AttentionParams& p, int64_t pos) {
  return p.window > 0 && pos - p.window + 1 > 0 ? pos - p.window + 1 : 0;
}

// Query head h's sink logit (AttentionParams::sinks), joined to a finished
// online softmax (running max *m, denominator *l): returns the factor by
// which the running output must be scaled, exp(m_old - m_new); *l then
// includes exp(sink - m_new). Without sinks: 1, nothing changes.
__device__ __forceinline__ float JoinSink(const AttentionParams& p, int64_t h, float* m, float* l) {
  if (p.sinks.data == nullptr) return 1.0f;
  const float sink = LoadWeight(p.sinks.data, p.sinks.dtype, h);
  const float m_new = fmaxf(*m, sink);
  const float factor = expf(*m - m_new);
  *l = *l * factor + expf(sink - m_new);
  *m = m_new;
  return factor;
}

// Head-dimension chunks of 32 lanes a kernel instance is compiled for.
inline int HeadDimChunks(int64_t head_dim) {
  if (head_dim <= 32) return 1;
  if (head_dim <= 64) return 2;
  if (head_dim <= 128) return 4;
  if (head_dim <= 256) return 8;
  return 0;
}

}  // namespace expertd::engine::cuda

#endif  // EXPERTD_ENGINE_BACKEND_CUDA_ATTENTION_CUH_
