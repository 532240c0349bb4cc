// y[m, n] (+)= x[m, k] . dequant(w)[n, k]^T + bias for block-quantized
// weights (engine/backend/weight_format.h: int8, int4, mxfp4; W8A16 / W4A16
// style: fp32 activations, codes decoded to fp32 inside the product, no
// dequantized copy of the weight). The CPU twin, and the reference the test
// compares with, is engine/backend/cpu/quant_matmul.h (QuantMatmulScalar).
//
// One warp per (row, output column): lane j takes groups j, j + 32, ... of
// the column's weight row; per group, a sequential fp32 FMA dot of the
// activations with the decoded codes, then acc += dot * scale; the warp's
// lanes are summed by a butterfly, + bias, (+ y). The sequence producing
// y[r, c] depends on k and the group size only, so rows are batch-invariant.
// Blocks of 8 warps cover 8 columns of one row.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "engine/backend/cuda/common.cuh"
#include "engine/backend/cuda/kernels.h"

namespace expertd::engine::cuda {
namespace {

constexpr int kWarpsPerBlock = 8;

__device__ float DecodeScale(const void* scales, ScaleDType dtype, int64_t i) {
  switch (dtype) {
    case ScaleDType::kNone:
      return 1.0f;
    case ScaleDType::kF32:
      return static_cast<const float*>(scales)[i];
    case ScaleDType::kF16:
      return __half2float(static_cast<const __half*>(scales)[i]);
    case ScaleDType::kBF16:
      return __uint_as_float(static_cast<uint32_t>(static_cast<const uint16_t*>(scales)[i]) << 16);
    case ScaleDType::kE8M0: {
      const uint32_t e = static_cast<const uint8_t*>(scales)[i];
      if (e == 255) return __int_as_float(0x7fc00000);
      return e == 0 ? ldexpf(1.0f, -127) : __uint_as_float(e << 23);
    }
  }
  return 1.0f;
}

__device__ float DecodeCode(WeightFormat f, const uint8_t* row, int64_t col) {
  if (f == WeightFormat::kInt8) return static_cast<float>(static_cast<int8_t>(row[col]));
  const int nib = (row[col >> 1] >> (4 * (col & 1))) & 0xF;
  if (f == WeightFormat::kInt4) return static_cast<float>(nib >= 8 ? nib - 16 : nib);
  const float kMag[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  return nib & 8 ? -kMag[nib & 7] : kMag[nib];
}

__global__ void QuantMatmulKernel(MatmulParams p, int64_t row_bytes, int64_t groups) {
  const int lane = threadIdx.x % kWarpSize;
  const int64_t c = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / kWarpSize;
  const int64_t r = blockIdx.y;
  if (c >= p.w.rows) return;
  const WeightQuant& q = p.w.quant;
  const float* x = p.x + r * p.x_stride;
  const uint8_t* w = static_cast<const uint8_t*>(p.w.data) + c * row_bytes;
  const int64_t scale_base = (c / q.block_rows) * groups;
  float acc = 0.0f;
  for (int64_t b = lane; b < groups; b += kWarpSize) {
    float dot = 0.0f;
    for (int64_t i = b * q.group_size; i < (b + 1) * q.group_size; ++i)
      dot = fmaf(x[i], DecodeCode(q.format, w, i), dot);
    acc = fmaf(dot, DecodeScale(q.scales, q.scale_dtype, scale_base + b), acc);
  }
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2)
    acc += __shfl_xor_sync(0xffffffffu, acc, offset);
  if (lane != 0) return;
  if (p.bias.data != nullptr) acc += LoadWeight(p.bias.data, p.bias.dtype, c);
  float* y = p.y + r * p.y_stride + c;
  *y = p.accumulate ? *y + acc : acc;
}

}  // namespace

cudaError_t LaunchQuantMatmul(const MatmulParams& p, cudaStream_t stream) {
  const WeightQuant& q = p.w.quant;
  if (!q.quantized() || q.group_size <= 0 || p.w.cols % q.group_size != 0 || p.m > 65535 ||
      q.format == WeightFormat::kFp8E4m3Block) {  // fp8_gemm.cu runs those
    return cudaErrorInvalidValue;
  }
  if (p.m <= 0 || p.w.rows <= 0) return cudaSuccess;
  const int64_t row_bytes = static_cast<int64_t>(QuantValueBytes(q.format, 1, p.w.cols));
  const dim3 grid(static_cast<unsigned>((p.w.rows + kWarpsPerBlock - 1) / kWarpsPerBlock),
                  static_cast<unsigned>(p.m));
  QuantMatmulKernel<<<grid, kWarpsPerBlock * kWarpSize, 0, stream>>>(p, row_bytes,
                                                                      p.w.cols / q.group_size);
  return cudaGetLastError();
}

}  // namespace expertd::engine::cuda
