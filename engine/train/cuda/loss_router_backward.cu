// The loss and the router's backward, one block per row.
//   CrossEntropy (ops.cc): max, then sum exp in double (a block reduction:
//     another order than the CPU's loop, ~1e-15 relative), log Z, the row's
//     loss and (softmax - onehot) * scale in double rounded to fp32.
//   RouteTopKBackward + SoftmaxBackward (moe_block.cc, ops.cc): the k ranks and
//     the softmax dot product are summed by one thread in the CPU's order with
//     unfused ops, so dlogits is bitwise the CPU's.
//   RouteGroupedSigmoidBackward (moe_block.cc): one thread per row, the CPU's
//     loops and ops: bitwise.
#include "engine/train/cuda/train_common.cuh"
#include "engine/train/cuda/train_kernels.h"

namespace expertd::train::cuda {
namespace {

constexpr int64_t kMaxRouterExperts = 8192;

__global__ void __launch_bounds__(kBlockThreads)
    CrossEntropyKernel(const float* logits, const int32_t* targets, int64_t v, float scale,
                       float* dlogits, double* row_loss) {
  __shared__ float max_scratch[kBlockThreads / kWarpSize];
  __shared__ double sum_scratch[kBlockThreads / kWarpSize];
  const int64_t r = blockIdx.x;
  const float* lr = logits + r * v;
  float* dr = dlogits != nullptr ? dlogits + r * v : nullptr;
  const int32_t target = targets[r];
  if (target < 0) {  // ignore_index: block-uniform
    if (dr != nullptr) {
      for (int64_t c = threadIdx.x; c < v; c += kBlockThreads) dr[c] = 0.0f;
    }
    if (threadIdx.x == 0) row_loss[r] = 0.0;
    return;
  }
  float mx = -INFINITY;
  for (int64_t c = threadIdx.x; c < v; c += kBlockThreads) mx = fmaxf(mx, lr[c]);
  mx = BlockMax(mx, max_scratch);
  double partial = 0.0;
  for (int64_t c = threadIdx.x; c < v; c += kBlockThreads) {
    partial += exp(static_cast<double>(SubRn(lr[c], mx)));
  }
  const double sum = BlockSum(partial, sum_scratch);
  const double log_z = log(sum) + mx;
  if (threadIdx.x == 0) row_loss[r] = log_z - lr[target];
  if (dr == nullptr) return;
  for (int64_t c = threadIdx.x; c < v; c += kBlockThreads) {
    const double p = exp(static_cast<double>(lr[c]) - log_z);
    dr[c] = static_cast<float>((p - (c == target ? 1.0 : 0.0)) * scale);
  }
}

__global__ void __launch_bounds__(kBlockThreads)
    RouterBackwardKernel(const float* probs, const int32_t* topk_ids, const float* topk_weight,
                         const float* dweight, const float* aux_dprob, int64_t num_experts,
                         int64_t top_k, bool normalize, float* dlogits) {
  extern __shared__ float dp[];  // [num_experts]
  __shared__ float dot_shared;
  const int64_t r = blockIdx.x, e_count = num_experts;
  const float* p = probs + r * e_count;
  for (int64_t e = threadIdx.x; e < e_count; e += kBlockThreads) {
    dp[e] = 0.0f;
  }
  __syncthreads();
  if (threadIdx.x == 0) {  // RouteTopKBackward, in rank order
    const int32_t* ids = topk_ids + r * top_k;
    const float* dw = dweight + r * top_k;
    if (!normalize) {
      for (int64_t k = 0; k < top_k; ++k) dp[ids[k]] = AddRn(dp[ids[k]], dw[k]);
    } else {  // w_k = p_k / S: dp_j = (dw_j - sum_k dw_k w_k) / S
      const float* w = topk_weight + r * top_k;
      float sum = 0.0f, dot = 0.0f;
      for (int64_t k = 0; k < top_k; ++k) {
        sum = AddRn(sum, p[ids[k]]);
        dot = AddRn(dot, MulRn(dw[k], w[k]));
      }
      for (int64_t k = 0; k < top_k; ++k) {
        dp[ids[k]] = AddRn(dp[ids[k]], DivRn(SubRn(dw[k], dot), sum));
      }
    }
  }
  __syncthreads();
  if (aux_dprob != nullptr) {
    for (int64_t e = threadIdx.x; e < e_count; e += kBlockThreads)
      dp[e] = AddRn(dp[e], aux_dprob[e]);
  }
  __syncthreads();
  if (threadIdx.x == 0) {  // SoftmaxBackward's dot, in expert order
    float dot = 0.0f;
    for (int64_t e = 0; e < e_count; ++e) dot = AddRn(dot, MulRn(dp[e], p[e]));
    dot_shared = dot;
  }
  __syncthreads();
  const float dot = dot_shared;
  float* dl = dlogits + r * e_count;
  for (int64_t e = threadIdx.x; e < e_count; e += kBlockThreads) {
    dl[e] = AddRn(dl[e], MulRn(p[e], SubRn(dp[e], dot)));
  }
}

__global__ void GroupedSigmoidRouterBackwardKernel(const float* scores, const int32_t* topk_ids,
                                                   const float* dweight, int64_t n,
                                                   int64_t num_experts, int64_t k, bool normalize,
                                                   float c, float* dlogits) {
  const int64_t r = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (r >= n) return;
  const int32_t* ids = topk_ids + r * k;
  const float* dw = dweight + r * k;
  const float* s = scores + r * num_experts;
  // w_i = c s_i / S (S = sum + 1e-20) or c s_i: ds_j = c (dw_j - sum_i dw_i s_i / S) / S.
  float sum = 1e-20f, dot = 0.0f;
  for (int64_t i = 0; i < k; ++i) sum = AddRn(sum, s[ids[i]]);
  for (int64_t i = 0; i < k; ++i) dot = AddRn(dot, MulRn(dw[i], s[ids[i]]));
  for (int64_t i = 0; i < k; ++i) {
    const float sj = s[ids[i]];
    const float ds =
        normalize ? DivRn(MulRn(c, SubRn(dw[i], DivRn(dot, sum))), sum) : MulRn(c, dw[i]);
    float* dst = dlogits + r * num_experts + ids[i];
    *dst = AddRn(*dst, MulRn(MulRn(ds, sj), SubRn(1.0f, sj)));
  }
}

}  // namespace

cudaError_t LaunchGroupedSigmoidRouterBackward(const float* scores, const int32_t* topk_ids,
                                               const float* dweight, int64_t n, int64_t num_experts,
                                               int64_t top_k, bool norm_topk_prob,
                                               float routed_scaling_factor, float* dlogits,
                                               cudaStream_t stream) {
  if (n < 0 || num_experts <= 0 || top_k < 0 || top_k > num_experts ||
      CeilDiv(n, kBlockThreads) > 0x7fffffff) {
    return cudaErrorInvalidValue;
  }
  if (n == 0) return cudaSuccess;
  GroupedSigmoidRouterBackwardKernel<<<static_cast<unsigned>(CeilDiv(n, kBlockThreads)),
                                       kBlockThreads, 0, stream>>>(
      scores, topk_ids, dweight, n, num_experts, top_k, norm_topk_prob && top_k > 1,
      routed_scaling_factor, dlogits);
  return cudaGetLastError();
}

cudaError_t LaunchCrossEntropy(const float* logits, const int32_t* targets, int64_t n, int64_t v,
                               float scale, float* dlogits, double* row_loss, cudaStream_t stream) {
  if (n < 0 || v <= 0 || n > 0x7fffffff) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  CrossEntropyKernel<<<static_cast<unsigned>(n), kBlockThreads, 0, stream>>>(
      logits, targets, v, scale, dlogits, row_loss);
  return cudaGetLastError();
}

cudaError_t LaunchRouterBackward(const float* probs, const int32_t* topk_ids,
                                 const float* topk_weight, const float* dweight,
                                 const float* aux_dprob, int64_t n, int64_t num_experts,
                                 int64_t top_k, bool normalize, float* dlogits,
                                 cudaStream_t stream) {
  if (n < 0 || n > 0x7fffffff || num_experts <= 0 || num_experts > kMaxRouterExperts || top_k < 0 ||
      top_k > num_experts) {
    return cudaErrorInvalidValue;
  }
  if (n == 0) return cudaSuccess;
  const size_t smem = static_cast<size_t>(num_experts) * sizeof(float);  // <= 32 KiB
  RouterBackwardKernel<<<static_cast<unsigned>(n), kBlockThreads, smem, stream>>>(
      probs, topk_ids, topk_weight, dweight, aux_dprob, num_experts, top_k, normalize, dlogits);
  return cudaGetLastError();
}

}  // namespace expertd::train::cuda
