// y[m, n] (+)= x[m, k] . dequant(w)[n, k]^T + bias for block-scaled FP8 E4M3
// weights (WeightRef::quant, kFp8E4m3Block), m <= 16 per launch (the backend chunks larger m).
// The CPU twin is engine/backend/cpu/matmul_fp8.cc.
//
// Same shape as the decode kernel (skinny_gemm.cu): one block of 256 threads
// per 4 output columns; thread i takes the 16-byte chunks i, i + 256, ... of
// each weight row, i.e. 16 FP8 codes, dequantizes each exactly as the CPU
// does -- fl(E4M3 / 256 * (256 * scale)), the E4M3 magnitude shifted into an
// IEEE half -- and FMAs it with the fp32 activations. Warp butterfly sums,
// then the 8 warps' sums in warp order, + bias, (+ y). The weights are read
// once, in FP8: half the bytes of bf16 per token.
//
// Why not cuBLASLt's block scaling: CUDA 13's CUBLASLT_MATMUL_MATRIX_SCALE_
// BLK128x128_32F (Hopper) needs BOTH operands in FP8, i.e. activations
// quantized per 1x128 block, which is a different function from the CPU
// reference (docs/cuda.md).
//
// Row invariance: y[r, c]'s operations depend on k, the block shape and the
// alignment only, never on m or the other rows.
#include "engine/backend/cuda/common.cuh"
#include "engine/backend/cuda/kernels.h"

namespace expertd::engine::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / kWarpSize;
constexpr int kCols = 4;
constexpr int kVec = 16;  // FP8 codes per 16-byte load

template <int M>
__global__ void __launch_bounds__(kThreads) Fp8GemmKernel(MatmulParams p, Fp8BlockGrid fs,
                                                           bool vec) {
  __shared__ float partial[kWarps][M][kCols];
  const int64_t n = p.w.rows, k = p.w.cols;
  const int64_t c0 = static_cast<int64_t>(blockIdx.x) * kCols;
  const int m = static_cast<int>(p.m);
  const auto* codes = static_cast<const uint8_t*>(p.w.data);
  float acc[M][kCols];
#pragma unroll
  for (int r = 0; r < M; ++r) {
#pragma unroll
    for (int c = 0; c < kCols; ++c) acc[r][c] = 0.0f;
  }
  const uint8_t* wrow[kCols];
  const float* srow[kCols];
#pragma unroll
  for (int c = 0; c < kCols; ++c) {
    const int64_t row = c0 + c < n ? c0 + c : c0;  // a valid row past n: never stored
    wrow[c] = codes + row * k;
    srow[c] = fs.scale + ((fs.row0 + row) / fs.block_rows) * fs.scale_cols;
  }
  if (vec) {  // k % 16 == 0, rows 16-byte aligned; block_cols % 16 == 0 keeps a chunk in a block
    for (int64_t kk = static_cast<int64_t>(threadIdx.x) * kVec; kk < k; kk += kThreads * kVec) {
      float wv[kCols][kVec];
#pragma unroll
      for (int c = 0; c < kCols; ++c) {
        const uint4 v = __ldg(reinterpret_cast<const uint4*>(wrow[c] + kk));
        const uint32_t words[4] = {v.x, v.y, v.z, v.w};
        const float s = MulRn(srow[c][kk / fs.block_cols], 256.0f);
#pragma unroll
        for (int j = 0; j < kVec; ++j) {
          wv[c][j] = MulRn(E4m3BitsOver256((words[j / 4] >> (8 * (j % 4))) & 0xffu), s);
        }
      }
#pragma unroll
      for (int r = 0; r < M; ++r) {
        if (r >= m) break;  // uniform
        const float* xr = p.x + r * p.x_stride + kk;
#pragma unroll
        for (int j = 0; j < kVec; ++j) {
          const float xv = xr[j];
#pragma unroll
          for (int c = 0; c < kCols; ++c) acc[r][c] = fmaf(xv, wv[c][j], acc[r][c]);
        }
      }
    }
  } else {
    for (int64_t kk = threadIdx.x; kk < k; kk += kThreads) {
      float wv[kCols];
#pragma unroll
      for (int c = 0; c < kCols; ++c) {
        wv[c] = MulRn(E4m3BitsOver256(wrow[c][kk]), MulRn(srow[c][kk / fs.block_cols], 256.0f));
      }
#pragma unroll
      for (int r = 0; r < M; ++r) {
        if (r >= m) break;
        const float xv = p.x[r * p.x_stride + kk];
#pragma unroll
        for (int c = 0; c < kCols; ++c) acc[r][c] = fmaf(xv, wv[c], acc[r][c]);
      }
    }
  }
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
#pragma unroll
  for (int r = 0; r < M; ++r) {
#pragma unroll
    for (int c = 0; c < kCols; ++c) {
      const float s = WarpSum(acc[r][c]);
      if (lane == 0) partial[warp][r][c] = s;
    }
  }
  __syncthreads();
  if (threadIdx.x < M * kCols) {
    const int r = threadIdx.x / kCols, c = threadIdx.x % kCols;
    if (r < m && c0 + c < n) {
      float s = partial[0][r][c];
#pragma unroll
      for (int w = 1; w < kWarps; ++w) s = AddRn(s, partial[w][r][c]);
      if (p.bias.data != nullptr) s = AddRn(s, LoadWeight(p.bias.data, p.bias.dtype, c0 + c));
      float* y = p.y + r * p.y_stride + c0 + c;
      *y = p.accumulate ? AddRn(*y, s) : s;
    }
  }
}

template <int M>
cudaError_t Launch(const MatmulParams& p, cudaStream_t stream) {
  const bool vec = p.w.cols % kVec == 0 && reinterpret_cast<uintptr_t>(p.w.data) % 16 == 0;
  const unsigned blocks = static_cast<unsigned>(CeilDiv(p.w.rows, kCols));
  Fp8GemmKernel<M><<<blocks, kThreads, 0, stream>>>(p, Fp8GridOf(p.w.quant, p.w.cols), vec);
  return cudaGetLastError();
}

}  // namespace

cudaError_t LaunchFp8Gemm(const MatmulParams& p, cudaStream_t stream) {
  const WeightQuant& q = p.w.quant;
  if (p.m > kSkinnyMaxRows || q.format != WeightFormat::kFp8E4m3Block || q.scales == nullptr ||
      q.block_rows <= 0 || q.group_size <= 0 || q.group_size % kVec != 0) {
    return cudaErrorInvalidValue;
  }
  if (p.m <= 0 || p.w.rows <= 0) return cudaSuccess;
  if (p.m <= 1) return Launch<1>(p, stream);
  if (p.m <= 2) return Launch<2>(p, stream);
  if (p.m <= 4) return Launch<4>(p, stream);
  if (p.m <= 8) return Launch<8>(p, stream);
  return Launch<16>(p, stream);
}

}  // namespace expertd::engine::cuda
