// Helpers of the cuBLASLt GEMM path (cublaslt_gemm.cc): fp32 activations to
// the weights' 16-bit type (round to nearest even), optionally with the
// rounding residual as a second 16-bit term, and the bias add.
#include <cuda_bf16.h>

#include "engine/backend/cuda/common.cuh"
#include "engine/backend/cuda/kernels.h"

namespace expertd::engine::cuda {
namespace {

constexpr int kThreads = 256;

template <typename T>
__device__ __forceinline__ T RoundTo(float v);
template <>
__device__ __forceinline__ __nv_bfloat16 RoundTo<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}
template <>
__device__ __forceinline__ __half RoundTo<__half>(float v) {
  return __float2half_rn(v);
}
__device__ __forceinline__ float Widen(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float Widen(__half v) { return __half2float(v); }

template <typename T>
__global__ void ConvertRowsKernel(const float* x, int64_t x_stride, int64_t cols, T* hi, T* lo) {
  const int64_t r = blockIdx.x;
  const float* row = x + r * x_stride;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    const float v = row[c];
    const T h = RoundTo<T>(v);
    hi[r * cols + c] = h;
    if (lo != nullptr) lo[r * cols + c] = RoundTo<T>(SubRn(v, Widen(h)));
  }
}

__global__ void AddBiasKernel(float* y, int64_t y_stride, WeightRef bias) {
  float* row = y + static_cast<int64_t>(blockIdx.x) * y_stride;
  for (int64_t c = threadIdx.x; c < bias.cols; c += blockDim.x) {
    row[c] = AddRn(row[c], LoadWeight(bias.data, bias.dtype, c));
  }
}

}  // namespace

cudaError_t LaunchConvertRows(const float* x, int64_t x_stride, int64_t rows, int64_t cols,
                              DType to, void* hi, void* lo, cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return cudaSuccess;
  switch (to) {
    case DType::kBF16:
      ConvertRowsKernel<<<rows, kThreads, 0, stream>>>(
          x, x_stride, cols, static_cast<__nv_bfloat16*>(hi), static_cast<__nv_bfloat16*>(lo));
      break;
    case DType::kF16:
      ConvertRowsKernel<<<rows, kThreads, 0, stream>>>(x, x_stride, cols, static_cast<__half*>(hi),
                                                       static_cast<__half*>(lo));
      break;
    case DType::kF32:
    case DType::kF8E4M3:
    case DType::kU8:
      return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

cudaError_t LaunchAddBias(float* y, int64_t y_stride, int64_t rows, const WeightRef& bias,
                          cudaStream_t stream) {
  if (rows <= 0 || bias.empty()) return cudaSuccess;
  AddBiasKernel<<<rows, kThreads, 0, stream>>>(y, y_stride, bias);
  return cudaGetLastError();
}

}  // namespace expertd::engine::cuda
