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
