// Softmax router top-k, one warp per row (the CPU twin:
// engine/backend/cpu/router.cc):
//   p = softmax(logits): max-subtracted, exp, and the sum taken in expert
//     order (sequentially, as the CPU does: every lane walks the row through
//     shuffles), p = e / sum;
//   top-k by descending p, ties to the lower expert id (torch.topk): k rounds
//     of a warp arg-max over the experts not yet taken;
//   optional renormalisation w /= sum(w), the sum in rank order.
// Expert e lives in lane e % 32, register e / 32.
#include "engine/backend/cuda/common.cuh"
#include "engine/backend/cuda/kernels.h"

namespace expertd::engine::cuda {
namespace {

constexpr int kRowsPerBlock = 4;
constexpr int kPerLane = 16;  // up to 512 experts
constexpr int kMaxTopK = 64;

__global__ void SoftmaxTopKKernel(SoftmaxTopKParams p) {
  const int64_t r = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.y;
  if (r >= p.rows) return;  // the whole warp leaves together
  const int lane = threadIdx.x;
  const int num_experts = static_cast<int>(p.num_experts);
  const float* logits = p.logits + r * p.num_experts;
  float v[kPerLane];
  float mx = -INFINITY;
#pragma unroll
  for (int j = 0; j < kPerLane; ++j) {
    const int e = lane + kWarpSize * j;
    v[j] = e < num_experts ? logits[e] : -INFINITY;
    mx = fmaxf(mx, v[j]);
  }
  mx = WarpMax(mx);
#pragma unroll
  for (int j = 0; j < kPerLane; ++j)
    v[j] = lane + kWarpSize * j < num_experts ? expf(SubRn(v[j], mx)) : 0.0f;
  float sum = 0.0f;
#pragma unroll
  for (int j = 0; j < kPerLane; ++j) {
    if (kWarpSize * j >= num_experts) break;  // uniform
    for (int src = 0; src < kWarpSize; ++src) {
      const float e = __shfl_sync(kFullMask, v[j], src);
      if (kWarpSize * j + src < num_experts) sum = AddRn(sum, e);
    }
  }
#pragma unroll
  for (int j = 0; j < kPerLane; ++j) v[j] = __fdiv_rn(v[j], sum);

  uint32_t taken = 0;
  int32_t* ids = p.ids + r * p.top_k;
  float* w = p.weights + r * p.top_k;
  float wsum = 0.0f;
  for (int64_t k = 0; k < p.top_k; ++k) {
    float best = -1.0f;
    int best_e = 0x7fffffff;
#pragma unroll
    for (int j = 0; j < kPerLane; ++j) {
      const int e = lane + kWarpSize * j;
      if (e < num_experts && !((taken >> j) & 1u) && v[j] > best) {
        best = v[j];
        best_e = e;
      }
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      const float ob = __shfl_xor_sync(kFullMask, best, o);
      const int oe = __shfl_xor_sync(kFullMask, best_e, o);
      if (ob > best || (ob == best && oe < best_e)) {
        best = ob;
        best_e = oe;
      }
    }
    if (best_e >= num_experts) best_e = 0;  // only NaN left (a diverged model): stay in range
    if (best_e % kWarpSize == lane) taken |= 1u << (best_e / kWarpSize);
    if (lane == 0) {
      ids[k] = best_e;
      w[k] = best;
      wsum = AddRn(wsum, best);
    }
  }
  if (p.renormalize && lane == 0) {
    for (int64_t k = 0; k < p.top_k; ++k) w[k] = __fdiv_rn(w[k], wsum);
  }
}

}  // namespace

cudaError_t LaunchSoftmaxTopK(const SoftmaxTopKParams& p, cudaStream_t stream) {
  if (p.num_experts < 1 || p.num_experts > kPerLane * kWarpSize || p.top_k < 1 ||
      p.top_k > kMaxTopK || p.top_k > p.num_experts) {
    return cudaErrorInvalidValue;
  }
  if (p.rows <= 0) return cudaSuccess;
  const dim3 block(kWarpSize, kRowsPerBlock);
  SoftmaxTopKKernel<<<CeilDiv(p.rows, kRowsPerBlock), block, 0, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace expertd::engine::cuda
