// Device helpers of the training kernels (nvcc only): warp/block reductions in
// a fixed order and unfused IEEE arithmetic. The CPU twins (engine/train) are
// compiled with -ffp-contract=off, so a kernel that spells every multiply and
// add with these does the same roundings in the same order as its twin.
#ifndef EXPERTD_ENGINE_TRAIN_CUDA_TRAIN_COMMON_CUH_
#define EXPERTD_ENGINE_TRAIN_CUDA_TRAIN_COMMON_CUH_

#include <cuda_runtime.h>

#include <cstdint>

namespace expertd::train::cuda {

constexpr int kWarpSize = 32;
constexpr unsigned kFullMask = 0xffffffffu;
constexpr int kBlockThreads = 256;

inline int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

__device__ __forceinline__ float MulRn(float a, float b) { return __fmul_rn(a, b); }
__device__ __forceinline__ float AddRn(float a, float b) { return __fadd_rn(a, b); }
__device__ __forceinline__ float SubRn(float a, float b) { return __fsub_rn(a, b); }
__device__ __forceinline__ float DivRn(float a, float b) { return __fdiv_rn(a, b); }

// Butterfly sums: every lane ends with the result, in a fixed order.
__device__ __forceinline__ float WarpSum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kFullMask, v, o);
  return v;
}
__device__ __forceinline__ double WarpSumDouble(double v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kFullMask, v, o);
  return v;
}
__device__ __forceinline__ float WarpMax(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(kFullMask, v, o));
  return v;
}

// Sum over a block of kBlockThreads threads (all must call it); every thread
// gets the result. `scratch` holds kBlockThreads / 32 values of T.
template <typename T>
__device__ __forceinline__ T BlockSum(T v, T* scratch) {
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kFullMask, v, o);
  __syncthreads();  // scratch may still be read by a previous call
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  T total = 0;
  for (int w = 0; w < kBlockThreads / kWarpSize; ++w) total += scratch[w];
  return total;
}
__device__ __forceinline__ float BlockMax(float v, float* scratch) {
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  v = WarpMax(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float m = scratch[0];
  for (int w = 1; w < kBlockThreads / kWarpSize; ++w) m = fmaxf(m, scratch[w]);
  return m;
}

}  // namespace expertd::train::cuda

#endif  // EXPERTD_ENGINE_TRAIN_CUDA_TRAIN_COMMON_CUH_
