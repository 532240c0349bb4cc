// y[m, n] (+)= x[m, k] . w[n, k]^T + bias for decode-sized m (<= 16): the
// memory-bound GEMV/GEMM the decode step spends its time in. The CPU twin is
// engine/backend/cpu/matmul.cc.
//
// One block of 256 threads per 4 output columns, covering all m rows. The
// block's threads split k: thread i takes the 16-byte weight chunks
// i, i + 256, i + 512, ... of each of the 4 weight rows (8 bf16/fp16 or 4 fp32
// elements per load, converted exactly to fp32), and FMAs them with the fp32
// activations of every row into acc[row][col]. Then each warp sums its lanes
// (butterfly), and the 8 warps' sums are added in warp order, + bias, (+ y).
//
// Row invariance: the sequence of operations that produces y[r, c] depends on
// k, the weight dtype and alignment only -- never on m, on r's place in the
// block or on the other rows -- so a token's result is bitwise the same in a
// batch of 1 or 16 (the batch-invariance contract of op_params.h, for m <= 16).
#include "engine/backend/cuda/common.cuh"
#include "engine/backend/cuda/kernels.h"

namespace expertd::engine::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / kWarpSize;
constexpr int kCols = 4;

struct F32W {
  static constexpr int kVec = 4;
  __device__ static void Load(const void* base, int64_t i, float* out) {
    const float4 v = __ldg(reinterpret_cast<const float4*>(static_cast<const float*>(base) + i));
    out[0] = v.x;
    out[1] = v.y;
    out[2] = v.z;
    out[3] = v.w;
  }
  __device__ static float Scalar(const void* base, int64_t i) {
    return static_cast<const float*>(base)[i];
  }
};

template <bool kBf16>
struct Half16W {
  static constexpr int kVec = 8;
  __device__ static float Convert(uint32_t bits16) {
    return kBf16 ? Bf16BitsToFloat(static_cast<uint16_t>(bits16))
                 : F16BitsToFloat(static_cast<uint16_t>(bits16));
  }
  __device__ static void Load(const void* base, int64_t i, float* out) {
    const uint4 v = __ldg(reinterpret_cast<const uint4*>(static_cast<const uint16_t*>(base) + i));
    const uint32_t words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      out[2 * j] = Convert(words[j] & 0xffffu);
      out[2 * j + 1] = Convert(words[j] >> 16);
    }
  }
  __device__ static float Scalar(const void* base, int64_t i) {
    return Convert(static_cast<const uint16_t*>(base)[i]);
  }
};

// vec_w: every weight row is 16-byte aligned and k % kVec == 0.
// vec_x: every activation row is 16-byte aligned.
template <typename W, int M>
__global__ void __launch_bounds__(kThreads)
    SkinnyGemmKernel(MatmulParams p, bool vec_w, bool vec_x) {
  constexpr int kVec = W::kVec;
  __shared__ float partial[kWarps][M][kCols];
  const int64_t n = p.w.rows, k = p.w.cols;
  const int64_t c0 = static_cast<int64_t>(blockIdx.x) * kCols;
  const int m = static_cast<int>(p.m);
  float acc[M][kCols];
#pragma unroll
  for (int r = 0; r < M; ++r) {
#pragma unroll
    for (int c = 0; c < kCols; ++c) acc[r][c] = 0.0f;
  }
  int64_t row_of[kCols];  // weight row of each column (a valid row past n: never stored)
#pragma unroll
  for (int c = 0; c < kCols; ++c) row_of[c] = (c0 + c < n ? c0 + c : c0) * k;

  if (vec_w) {
    for (int64_t kk = static_cast<int64_t>(threadIdx.x) * kVec; kk < k; kk += kThreads * kVec) {
      float wv[kCols][kVec];
#pragma unroll
      for (int c = 0; c < kCols; ++c) W::Load(p.w.data, row_of[c] + kk, wv[c]);
#pragma unroll
      for (int r = 0; r < M; ++r) {
        if (r >= m) break;  // uniform
        const float* xr = p.x + r * p.x_stride + kk;
        float xv[kVec];
        if (vec_x) {
#pragma unroll
          for (int v = 0; v < kVec; v += 4) {
            const float4 f = __ldg(reinterpret_cast<const float4*>(xr + v));
            xv[v] = f.x;
            xv[v + 1] = f.y;
            xv[v + 2] = f.z;
            xv[v + 3] = f.w;
          }
        } else {
#pragma unroll
          for (int v = 0; v < kVec; ++v) xv[v] = xr[v];
        }
#pragma unroll
        for (int c = 0; c < kCols; ++c) {
#pragma unroll
          for (int v = 0; v < kVec; ++v) acc[r][c] = fmaf(xv[v], wv[c][v], acc[r][c]);
        }
      }
    }
  } else {
    for (int64_t kk = threadIdx.x; kk < k; kk += kThreads) {
      float wv[kCols];
#pragma unroll
      for (int c = 0; c < kCols; ++c) wv[c] = W::Scalar(p.w.data, row_of[c] + kk);
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

template <typename W, int M>
cudaError_t Launch(const MatmulParams& p, cudaStream_t stream) {
  const bool vec_w = p.w.cols % W::kVec == 0 && reinterpret_cast<uintptr_t>(p.w.data) % 16 == 0;
  const bool vec_x = reinterpret_cast<uintptr_t>(p.x) % 16 == 0 && p.x_stride % 4 == 0;
  const unsigned blocks = static_cast<unsigned>(CeilDiv(p.w.rows, kCols));
  SkinnyGemmKernel<W, M><<<blocks, kThreads, 0, stream>>>(p, vec_w, vec_x);
  return cudaGetLastError();
}

template <typename W>
cudaError_t LaunchForRows(const MatmulParams& p, cudaStream_t stream) {
  if (p.m <= 1) return Launch<W, 1>(p, stream);
  if (p.m <= 2) return Launch<W, 2>(p, stream);
  if (p.m <= 4) return Launch<W, 4>(p, stream);
  if (p.m <= 8) return Launch<W, 8>(p, stream);
  return Launch<W, 16>(p, stream);
}

}  // namespace

cudaError_t LaunchSkinnyGemm(const MatmulParams& p, cudaStream_t stream) {
  if (p.m > kSkinnyMaxRows) return cudaErrorInvalidValue;
  if (p.m <= 0 || p.w.rows <= 0) return cudaSuccess;
  switch (p.w.dtype) {
    case DType::kF32:
      return LaunchForRows<F32W>(p, stream);
    case DType::kBF16:
      return LaunchForRows<Half16W<true>>(p, stream);
    case DType::kF16:
      return LaunchForRows<Half16W<false>>(p, stream);
    case DType::kF8E4M3:
      return LaunchFp8Gemm(p, stream);  // fp8_gemm.cu
    case DType::kU8:  // a file dtype only (dtype.h)
      return cudaErrorInvalidValue;
  }
  return cudaErrorInvalidValue;
}

}  // namespace expertd::engine::cuda
