// Elementwise backward kernels, one thread per output element, each spelling
// its CPU twin's operations in the same order with unfused IEEE ops:
//   SwiGluBackward (ops.cc): the same ops but for expf (CUDA's is within
//     2 ulp, glibc's within 1), so < 1e-6 relative.
//   RopeBackward (ops.cc): the rotation by -angle, bitwise equal.
//   EmbeddingBackward (ops.cc): one thread per column adds the rows of its
//     tokens in token order, the CPU's order per element: bitwise equal.
#include "engine/train/cuda/train_common.cuh"
#include "engine/train/cuda/train_kernels.h"

namespace expertd::train::cuda {
namespace {

__global__ void SwiGluBackwardKernel(const float* gate, const float* up, const float* dact,
                                     float* dgate, float* dup, int64_t count) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= count) return;
  // sig = 1 / (1 + exp(-g)); dup = dact * (g * sig);
  // dgate = dact * up * (sig * (1 + g * (1 - sig))), left to right as the CPU.
  const float g = gate[i];
  const float sig = DivRn(1.0f, AddRn(1.0f, expf(-g)));
  const float silu = MulRn(g, sig);
  dup[i] = MulRn(dact[i], silu);
  const float slope = MulRn(sig, AddRn(1.0f, MulRn(g, SubRn(1.0f, sig))));
  dgate[i] = MulRn(MulRn(dact[i], up[i]), slope);
}

// One thread per (row, head, pair i): (a, b) = (x[i], x[i + half]) rotated by
// -angle: a' = a cos - b (-sin), b' = b cos + a (-sin).
__global__ void RopeBackwardKernel(const float* cos_t, const float* sin_t, int64_t half, float* dx,
                                   int64_t rows, int64_t t, int64_t heads) {
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= rows * heads * half) return;
  const int64_t i = idx % half, rh = idx / half, r = rh / heads;
  const int64_t p = r % t;
  const float cs = cos_t[p * half + i], s = -sin_t[p * half + i];
  float* xh = dx + rh * 2 * half;
  const float a = xh[i], b = xh[i + half];
  xh[i] = SubRn(MulRn(a, cs), MulRn(b, s));
  xh[i + half] = AddRn(MulRn(b, cs), MulRn(a, s));
}

__global__ void EmbeddingBackwardKernel(const int32_t* ids, const float* dy, int64_t n, int64_t d,
                                        int32_t padding_idx, float* dtable) {
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= d) return;
  for (int64_t r = 0; r < n; ++r) {
    const int32_t id = ids[r];
    if (id == padding_idx) continue;
    float* dst = dtable + static_cast<int64_t>(id) * d + c;
    *dst = AddRn(*dst, dy[r * d + c]);
  }
}

unsigned Blocks(int64_t threads) { return static_cast<unsigned>(CeilDiv(threads, kBlockThreads)); }

bool GridFits(int64_t threads) { return CeilDiv(threads, kBlockThreads) <= 0x7fffffff; }

}  // namespace

cudaError_t LaunchSwiGluBackward(const float* gate, const float* up, const float* dact,
                                 float* dgate, float* dup, int64_t count, cudaStream_t stream) {
  if (count < 0 || !GridFits(count)) return cudaErrorInvalidValue;
  if (count == 0) return cudaSuccess;
  SwiGluBackwardKernel<<<Blocks(count), kBlockThreads, 0, stream>>>(gate, up, dact, dgate, dup,
                                                                    count);
  return cudaGetLastError();
}

cudaError_t LaunchRopeBackward(const float* cos, const float* sin, int64_t half, float* dx,
                               int64_t batch, int64_t t, int64_t heads, cudaStream_t stream) {
  if (half < 0 || batch < 0 || t < 0 || heads < 0) return cudaErrorInvalidValue;
  const int64_t threads = batch * t * heads * half;
  if (!GridFits(threads)) return cudaErrorInvalidValue;
  if (threads == 0) return cudaSuccess;
  RopeBackwardKernel<<<Blocks(threads), kBlockThreads, 0, stream>>>(cos, sin, half, dx, batch * t,
                                                                    t, heads);
  return cudaGetLastError();
}

cudaError_t LaunchEmbeddingBackward(const int32_t* ids, const float* dy, int64_t n, int64_t d,
                                    int32_t padding_idx, float* dtable, cudaStream_t stream) {
  if (n < 0 || d < 0 || !GridFits(d)) return cudaErrorInvalidValue;
  if (n == 0 || d == 0) return cudaSuccess;
  EmbeddingBackwardKernel<<<Blocks(d), kBlockThreads, 0, stream>>>(ids, dy, n, d, padding_idx,
                                                                   dtable);
  return cudaGetLastError();
}

}  // namespace expertd::train::cuda
