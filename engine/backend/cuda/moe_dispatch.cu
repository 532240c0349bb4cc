// MoE dispatch (gather rows into an expert's batch, scatter its outputs to
// per-(token, rank) slots, combine the slots per token in ascending expert
// id, or add one expert's outputs into its tokens' rows) and the
// greedy-sampling argmax. Bitwise equal to the CPU twins
// (engine/backend/cpu/moe_dispatch.cc, engine/greedy.cc Argmax).
#include "engine/backend/cuda/common.cuh"
#include "engine/backend/cuda/kernels.h"

namespace expertd::engine::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kMaxTopK = 64;

__global__ void GatherRowsKernel(GatherRowsParams p) {
  const int64_t i = blockIdx.x;
  const float* src = p.src + static_cast<int64_t>(p.index[i]) * p.src_stride;
  float* dst = p.dst + i * p.dim;
  for (int64_t j = threadIdx.x; j < p.dim; j += blockDim.x) dst[j] = src[j];
}

__global__ void ScatterRowsKernel(ScatterRowsParams p) {
  const int64_t i = blockIdx.x;
  const float* src = p.src + i * p.dim;
  float* dst = p.dst + static_cast<int64_t>(p.index[i]) * p.dim;
  for (int64_t j = threadIdx.x; j < p.dim; j += blockDim.x) dst[j] = src[j];
}

// One block per token. Thread 0 orders the token's ranks by expert id
// (insertion sort; ids of one token are distinct), then every thread adds
// the terms w * y in that order for its elements: out = out + w * y.
__global__ void MoeCombineKernel(MoeCombineParams p) {
  __shared__ int32_t order[kMaxTopK];
  const int64_t t = blockIdx.x;
  const int32_t* ids = p.ids + t * p.top_k;
  if (threadIdx.x == 0) {
    for (int j = 0; j < p.top_k; ++j) {
      int i = j;
      while (i > 0 && ids[order[i - 1]] > ids[j]) {
        order[i] = order[i - 1];
        --i;
      }
      order[i] = j;
    }
  }
  __syncthreads();
  float* out = p.out + t * p.out_stride;
  for (int64_t i = threadIdx.x; i < p.dim; i += blockDim.x) {
    float acc = p.accumulate ? out[i] : 0.0f;
    for (int j = 0; j < p.top_k; ++j) {
      const int64_t slot = t * p.top_k + order[j];
      acc = AddRn(acc, MulRn(p.weights[slot], p.slots[slot * p.dim + i]));
    }
    out[i] = acc;
  }
}

// One block per expert row i, adding w * y into its token's row. The rows of
// one launch are distinct tokens; launches on one stream run in order, so a
// token's terms are added in the order the caller launched the experts.
__global__ void MoeScatterAddKernel(MoeScatterAddParams p) {
  const int64_t i = blockIdx.x;
  const int64_t slot = p.slot[i];
  const float w = p.weights[slot];
  const float* y = p.src + i * p.dim;
  float* out = p.out + (slot / p.top_k) * p.dim;
  for (int64_t j = threadIdx.x; j < p.dim; j += blockDim.x) out[j] = AddRn(out[j], MulRn(w, y[j]));
}

// One block per row, the CPU twin's rule: the largest value, the first index
// on ties; NaN is never larger than anything, and a NaN at index 0 wins
// (the sequential scan starts from it). Each thread keeps its best
// (value, index), then a fixed-order block reduction.
__device__ __forceinline__ bool Better(float av, int64_t ai, float bv, int64_t bi) {
  if (bi < 0) return false;
  if (ai < 0) return true;
  return bv > av || (bv == av && bi < ai);
}

__global__ void ArgmaxRowsKernel(const float* x, int64_t cols, int32_t* out) {
  __shared__ float best_v[kThreads / kWarpSize];
  __shared__ int64_t best_i[kThreads / kWarpSize];
  const float* row = x + blockIdx.x * cols;
  float v = 0.0f;
  int64_t idx = -1;
  for (int64_t i = threadIdx.x; i < cols; i += blockDim.x) {
    const float c = row[i];
    if (c == c && (idx < 0 || c > v)) {
      v = c;
      idx = i;
    }
  }
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(kFullMask, v, o);
    const int64_t oi = __shfl_xor_sync(kFullMask, idx, o);
    if (Better(v, idx, ov, oi)) {
      v = ov;
      idx = oi;
    }
  }
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  if (lane == 0) {
    best_v[warp] = v;
    best_i[warp] = idx;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < kThreads / kWarpSize; ++w) {
      if (Better(v, idx, best_v[w], best_i[w])) {
        v = best_v[w];
        idx = best_i[w];
      }
    }
    const bool first_is_nan = row[0] != row[0];
    out[blockIdx.x] = static_cast<int32_t>(first_is_nan || idx < 0 ? 0 : idx);
  }
}

}  // namespace

cudaError_t LaunchGatherRows(const GatherRowsParams& p, cudaStream_t stream) {
  if (p.rows <= 0 || p.dim <= 0) return cudaSuccess;
  GatherRowsKernel<<<p.rows, kThreads, 0, stream>>>(p);
  return cudaGetLastError();
}

cudaError_t LaunchScatterRows(const ScatterRowsParams& p, cudaStream_t stream) {
  if (p.rows <= 0 || p.dim <= 0) return cudaSuccess;
  ScatterRowsKernel<<<p.rows, kThreads, 0, stream>>>(p);
  return cudaGetLastError();
}

cudaError_t LaunchMoeCombine(const MoeCombineParams& p, cudaStream_t stream) {
  if (p.top_k < 1 || p.top_k > kMaxTopK) return cudaErrorInvalidValue;
  if (p.rows <= 0 || p.dim <= 0) return cudaSuccess;
  MoeCombineKernel<<<p.rows, kThreads, 0, stream>>>(p);
  return cudaGetLastError();
}

cudaError_t LaunchMoeScatterAdd(const MoeScatterAddParams& p, cudaStream_t stream) {
  if (p.top_k < 1) return cudaErrorInvalidValue;
  if (p.rows <= 0 || p.dim <= 0) return cudaSuccess;
  MoeScatterAddKernel<<<p.rows, kThreads, 0, stream>>>(p);
  return cudaGetLastError();
}

cudaError_t LaunchArgmaxRows(const float* x, int64_t rows, int64_t cols, int32_t* out,
                             cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return cudaSuccess;
  ArgmaxRowsKernel<<<rows, kThreads, 0, stream>>>(x, cols, out);
  return cudaGetLastError();
}

}  // namespace expertd::engine::cuda
