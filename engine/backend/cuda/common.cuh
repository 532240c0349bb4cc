// Device helpers shared by the CUDA kernels (nvcc only).
#ifndef EXPERTD_ENGINE_BACKEND_CUDA_COMMON_CUH_
#define EXPERTD_ENGINE_BACKEND_CUDA_COMMON_CUH_

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "engine/backend/op_params.h"

namespace expertd::engine::cuda {

constexpr int kWarpSize = 32;
constexpr unsigned kFullMask = 0xffffffffu;

inline int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Exact conversions of stored weights to fp32.
__device__ __forceinline__ float Bf16BitsToFloat(uint16_t v) {
  return __uint_as_float(static_cast<uint32_t>(v) << 16);
}
__device__ __forceinline__ float F16BitsToFloat(uint16_t v) {
  return __half2float(__ushort_as_half(v));
}

// An FP8 E4M3 code's value / 256, exactly: its magnitude bits shifted left by
// 7 are an IEEE half of that value (subnormals included); NaN codes -> NaN.
// Callers fold the 256 into the block scale (engine/backend/cpu/matmul_fp8.h).
__device__ __forceinline__ float E4m3BitsOver256(uint32_t code) {
  if ((code & 0x7fu) == 0x7fu) return __uint_as_float(0x7fc00000u);
  const uint32_t h = ((code & 0x80u) << 8) | ((code & 0x7fu) << 7);
  return __half2float(__ushort_as_half(static_cast<unsigned short>(h)));
}

// Element i of a weight tensor as fp32 (the CPU twin's LoadScalar; an FP8
// code's raw value, unscaled).
__device__ __forceinline__ float LoadWeight(const void* data, DType dtype, int64_t i) {
  switch (dtype) {
    case DType::kF32:
      return static_cast<const float*>(data)[i];
    case DType::kBF16:
      return Bf16BitsToFloat(static_cast<const uint16_t*>(data)[i]);
    case DType::kF16:
      return F16BitsToFloat(static_cast<const uint16_t*>(data)[i]);
    case DType::kF8E4M3:
      return E4m3BitsOver256(static_cast<const uint8_t*>(data)[i]) * 256.0f;
    case DType::kU8:
      return static_cast<float>(static_cast<const uint8_t*>(data)[i]);
  }
  return 0.0f;
}

// Butterfly reductions: every lane ends with the result; the order of the
// additions is fixed (independent of the data and of the launch).
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

// Separate multiply and add, never fused: the CPU twins are compiled with
// -ffp-contract=off, and these keep elementwise ops bitwise equal to them.
__device__ __forceinline__ float MulRn(float a, float b) { return __fmul_rn(a, b); }
__device__ __forceinline__ float AddRn(float a, float b) { return __fadd_rn(a, b); }
__device__ __forceinline__ float SubRn(float a, float b) { return __fsub_rn(a, b); }

}  // namespace expertd::engine::cuda

#endif  // EXPERTD_ENGINE_BACKEND_CUDA_COMMON_CUH_
