// The AdamW update (CPU twin: AdamWUpdateScalar in engine/train/adamw.cc, and
// the master -> bf16/fp16 rounding of AdamW::StepOne). One thread per
// element; every operation is the scalar form's, in its order, as one
// correctly rounded IEEE op (__fmul_rn, __fadd_rn, __fdiv_rn, __fsqrt_rn: no
// FMA contraction, no approximate division or square root), so p, m and v
// are bitwise the CPU's. bf16 rounding copies models::F32ToBf16's integer
// round-to-nearest-even (NaN quieted the same way): bitwise. fp16 uses
// __float2half_rn (round to nearest even): bitwise for every non-NaN value.
#include <cuda_fp16.h>

#include "engine/train/cuda/train_common.cuh"
#include "engine/train/cuda/train_kernels.h"

namespace expertd::train::cuda {
namespace {

__device__ __forceinline__ uint16_t RoundToBf16(float f) {
  uint32_t u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

__global__ void AdamWKernel(AdamWConstants c, const float* g, float* p, float* m, float* v,
                            int64_t n, models::DType weight_dtype, void* weight) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float gi = g[i];
  const float pi = MulRn(p[i], c.decay);
  const float mi = AddRn(MulRn(m[i], c.beta1), MulRn(c.one_minus_beta1, gi));
  const float vi = AddRn(MulRn(v[i], c.beta2), MulRn(MulRn(c.one_minus_beta2, gi), gi));
  const float denom = AddRn(DivRn(__fsqrt_rn(vi), c.bias_correction2_sqrt), c.eps);
  const float updated = AddRn(pi, DivRn(MulRn(c.neg_step_size, mi), denom));
  p[i] = updated;
  m[i] = mi;
  v[i] = vi;
  if (weight == nullptr) return;
  switch (weight_dtype) {
    case models::DType::kBF16:
      static_cast<uint16_t*>(weight)[i] = RoundToBf16(updated);
      break;
    case models::DType::kF16:
      static_cast<uint16_t*>(weight)[i] = __half_as_ushort(__float2half_rn(updated));
      break;
    default:  // kF32 (the launcher admits no other)
      static_cast<float*>(weight)[i] = updated;
      break;
  }
}

}  // namespace

cudaError_t LaunchAdamWUpdate(const AdamWConstants& c, const float* g, float* p, float* m, float* v,
                              int64_t n, models::DType weight_dtype, void* weight,
                              cudaStream_t stream) {
  if (n < 0 || CeilDiv(n, kBlockThreads) > 0x7fffffff) return cudaErrorInvalidValue;
  if (weight != nullptr && weight_dtype != models::DType::kBF16 &&
      weight_dtype != models::DType::kF16 && weight_dtype != models::DType::kF32) {
    return cudaErrorInvalidValue;
  }
  if (n == 0) return cudaSuccess;
  AdamWKernel<<<static_cast<unsigned>(CeilDiv(n, kBlockThreads)), kBlockThreads, 0, stream>>>(
      c, g, p, m, v, n, weight_dtype, weight);
  return cudaGetLastError();
}

}  // namespace expertd::train::cuda
