// RMSNorm backward (CPU twin: RmsNormBackward in engine/train/ops.cc).
//   y = w * (x * s), s = rstd = (mean(x^2) + eps)^-1/2
//   dx_c += g_c s - x_c (g . x) s^3 / D, g = dy * w
//   dw_c += sum_r dy_rc (x_rc s_r)
// dx: one block per row; g . x is a block reduction (the CPU's is a SIMD dot:
// the two differ by fp32 rounding). dw: one thread per column adds the rows
// in row order with unfused ops, exactly the CPU's sequence: bitwise equal.
#include "engine/train/cuda/train_common.cuh"
#include "engine/train/cuda/train_kernels.h"

namespace expertd::train::cuda {
namespace {

__global__ void __launch_bounds__(kBlockThreads)
    RmsNormInputGradKernel(const float* x, const float* w, const float* rstd, const float* dy,
                           float* dx, int64_t d) {
  __shared__ float scratch[kBlockThreads / kWarpSize];
  const int64_t r = blockIdx.x;
  const float* xr = x + r * d;
  const float* dyr = dy + r * d;
  float partial = 0.0f;
  for (int64_t c = threadIdx.x; c < d; c += kBlockThreads) {
    partial = fmaf(MulRn(dyr[c], w[c]), xr[c], partial);
  }
  const float gx = BlockSum(partial, scratch);
  const float s = rstd[r];
  const float k = DivRn(MulRn(MulRn(MulRn(gx, s), s), s), static_cast<float>(d));
  float* dxr = dx + r * d;
  for (int64_t c = threadIdx.x; c < d; c += kBlockThreads) {
    const float g = MulRn(dyr[c], w[c]);
    dxr[c] = AddRn(dxr[c], SubRn(MulRn(g, s), MulRn(xr[c], k)));
  }
}

__global__ void RmsNormWeightGradKernel(const float* x, const float* rstd, const float* dy,
                                        float* dw, int64_t n, int64_t d) {
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= d) return;
  float acc = dw[c];
  for (int64_t r = 0; r < n; ++r) {
    acc = AddRn(acc, MulRn(dy[r * d + c], MulRn(x[r * d + c], rstd[r])));
  }
  dw[c] = acc;
}

}  // namespace

cudaError_t LaunchRmsNormBackward(const float* x, const float* w, const float* rstd,
                                  const float* dy, float* dx, float* dw, int64_t n, int64_t d,
                                  cudaStream_t stream) {
  if (n < 0 || d <= 0 || n > 0x7fffffff) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  RmsNormInputGradKernel<<<static_cast<unsigned>(n), kBlockThreads, 0, stream>>>(x, w, rstd, dy, dx,
                                                                                 d);
  if (dw != nullptr) {
    RmsNormWeightGradKernel<<<static_cast<unsigned>(CeilDiv(d, kBlockThreads)), kBlockThreads, 0,
                              stream>>>(x, rstd, dy, dw, n, d);
  }
  return cudaGetLastError();
}

}  // namespace expertd::train::cuda
