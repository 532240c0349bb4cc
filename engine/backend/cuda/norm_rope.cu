// RMSNorm and rotary position embedding, with the CPU twins' arithmetic
// (engine/backend/cpu/rms_norm.cc, rope.cc):
//   RMSNorm: the sum of squares in double (per-thread partial sums, then a
//     fixed-order tree: the same value as the CPU's sequential double sum to
//     far below fp32 rounding), var = float(ss / dim),
//     inv = 1 / sqrt(var + eps), out = w * (x * inv) rounded step by step.
//   RoPE: angle = float(pos) * inv_freq[i] in fp32, cos/sin in double rounded
//     to fp32, times attention_factor; rotate-half, each product rounded.
#include "engine/backend/cuda/common.cuh"
#include "engine/backend/cuda/kernels.h"

namespace expertd::engine::cuda {
namespace {

constexpr int kRowsPerWarpBlock = 4;  // warp-per-row kernel: 4 warps, 4 rows
constexpr int kBlockThreads = 256;    // block-per-row kernel
constexpr int64_t kWarpRowMaxDim = 256;

__device__ __forceinline__ void NormalizeRow(const RmsNormParams& p, const float* x, float* out,
                                             double ss, int first, int step) {
  const float var = static_cast<float>(ss / static_cast<double>(p.dim));
  const float inv = __fdiv_rn(1.0f, __fsqrt_rn(AddRn(var, p.eps)));
  for (int64_t i = first; i < p.dim; i += step) {
    out[i] = MulRn(LoadWeight(p.weight.data, p.weight.dtype, i), MulRn(x[i], inv));
  }
}

// Short rows (per-head q/k norms): one warp per row.
__global__ void RmsNormWarpKernel(RmsNormParams p) {
  const int64_t r = static_cast<int64_t>(blockIdx.x) * kRowsPerWarpBlock + threadIdx.y;
  if (r >= p.rows) return;
  const float* x = p.x + r * p.x_stride;
  float* out = p.out + r * p.out_stride;
  double ss = 0.0;
  for (int64_t i = threadIdx.x; i < p.dim; i += kWarpSize) ss += static_cast<double>(x[i]) * x[i];
  ss = WarpSumDouble(ss);
  NormalizeRow(p, x, out, ss, threadIdx.x, kWarpSize);
}

// Long rows (hidden states): one block per row.
__global__ void RmsNormBlockKernel(RmsNormParams p) {
  __shared__ double partial[kBlockThreads / kWarpSize];
  __shared__ double total;
  const int64_t r = blockIdx.x;
  const float* x = p.x + r * p.x_stride;
  float* out = p.out + r * p.out_stride;
  double ss = 0.0;
  for (int64_t i = threadIdx.x; i < p.dim; i += kBlockThreads)
    ss += static_cast<double>(x[i]) * x[i];
  ss = WarpSumDouble(ss);
  if (threadIdx.x % kWarpSize == 0) partial[threadIdx.x / kWarpSize] = ss;
  __syncthreads();
  if (threadIdx.x == 0) {
    double s = 0.0;
    for (int w = 0; w < kBlockThreads / kWarpSize; ++w) s += partial[w];
    total = s;
  }
  __syncthreads();
  NormalizeRow(p, x, out, total, threadIdx.x, kBlockThreads);
}

// One block per token: the row's cos/sin into shared memory, then every
// (head, i) pair of the row.
__global__ void RopeKernel(RopeParams p) {
  extern __shared__ float table[];  // cos [half], then sin [half]
  const int64_t half = p.rotary_dim / 2;
  float* cs = table;
  float* sn = table + half;
  const int64_t t = blockIdx.x;
  const float pos = static_cast<float>(p.positions[t]);
  for (int64_t i = threadIdx.x; i < half; i += blockDim.x) {
    const float angle = MulRn(pos, p.inv_freq[i]);
    cs[i] = MulRn(static_cast<float>(cos(static_cast<double>(angle))), p.attention_factor);
    sn[i] = MulRn(static_cast<float>(sin(static_cast<double>(angle))), p.attention_factor);
  }
  __syncthreads();
  float* row = p.x + t * p.row_stride;
  for (int64_t u = threadIdx.x; u < p.heads * half; u += blockDim.x) {
    const int64_t h = u / half, i = u % half;
    float* x = row + h * p.head_dim + (p.interleaved ? 2 * i : i);
    const int64_t pair = p.interleaved ? 1 : half;
    const float a = x[0], b = x[pair];
    x[0] = SubRn(MulRn(a, cs[i]), MulRn(b, sn[i]));
    x[pair] = AddRn(MulRn(b, cs[i]), MulRn(a, sn[i]));
  }
}

}  // namespace

cudaError_t LaunchRmsNorm(const RmsNormParams& p, cudaStream_t stream) {
  if (p.rows <= 0 || p.dim <= 0) return cudaSuccess;
  if (p.dim <= kWarpRowMaxDim) {
    const dim3 block(kWarpSize, kRowsPerWarpBlock);
    RmsNormWarpKernel<<<CeilDiv(p.rows, kRowsPerWarpBlock), block, 0, stream>>>(p);
  } else {
    RmsNormBlockKernel<<<p.rows, kBlockThreads, 0, stream>>>(p);
  }
  return cudaGetLastError();
}

cudaError_t LaunchRope(const RopeParams& p, cudaStream_t stream) {
  if (p.rotary_dim % 2 != 0 || p.rotary_dim > p.head_dim || p.rotary_dim > 2048)
    return cudaErrorInvalidValue;
  if (p.rows <= 0 || p.rotary_dim == 0 || p.heads <= 0) return cudaSuccess;
  const size_t smem = static_cast<size_t>(p.rotary_dim) * sizeof(float);
  RopeKernel<<<p.rows, 128, smem, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace expertd::engine::cuda
