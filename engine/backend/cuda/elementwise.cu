// Row-wise elementwise ops: embedding lookup, SwiGLU, scaled row adds, clamp,
// KV-cache append. One block per row, threads striding over the row; every
// element is computed with the CPU twin's exact arithmetic (separate
// multiply and add, see common.cuh), so these are bitwise equal to
// engine/backend/cpu/elementwise.cc except where a transcendental (expf) is
// involved (SwiGLU, the sigmoid of AddRows: CUDA's expf is within 2 ulp).
#include "engine/backend/cuda/common.cuh"
#include "engine/backend/cuda/kernels.h"

namespace expertd::engine::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void EmbeddingKernel(EmbeddingParams p) {
  const int64_t t = blockIdx.x;
  const int64_t dim = p.table.cols;
  const int64_t base = static_cast<int64_t>(p.ids[t]) * dim;
  float* out = p.out + t * dim;
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x)
    out[i] = LoadWeight(p.table.data, p.table.dtype, base + i);
}

__global__ void SwiGluKernel(SwiGluParams p) {
  const int64_t r = blockIdx.x;
  const float* g = p.gate + r * p.gate_stride;
  const float* u = p.up + r * p.up_stride;
  float* out = p.out + r * p.out_stride;
  if (p.limit > 0.0f) {
    // gpt-oss: min(gate, limit) * sigmoid(alpha * that) * (clamp(up, +-limit) + 1),
    // the CPU twin's (cpu/elementwise.cc) sequence of roundings.
    for (int64_t i = threadIdx.x; i < p.dim; i += blockDim.x) {
      const float x = fminf(g[i], p.limit);
      const float y = fminf(fmaxf(u[i], -p.limit), p.limit);
      const float sig = __fdiv_rn(1.0f, AddRn(1.0f, expf(-MulRn(x, p.alpha))));
      out[i] = MulRn(MulRn(x, sig), AddRn(y, 1.0f));
    }
    return;
  }
  for (int64_t i = threadIdx.x; i < p.dim; i += blockDim.x) {
    const float x = g[i];
    const float silu = __fdiv_rn(x, AddRn(1.0f, expf(-x)));
    out[i] = MulRn(silu, u[i]);
  }
}

__global__ void AddRowsKernel(AddRowsParams p) {
  const int64_t r = blockIdx.x;
  float* y = p.y + r * p.y_stride;
  const float* x = p.x + r * p.x_stride;
  if (p.scale == nullptr) {
    for (int64_t i = threadIdx.x; i < p.dim; i += blockDim.x) y[i] = AddRn(y[i], x[i]);
    return;
  }
  float s = p.scale[r * p.scale_stride];
  if (p.scale_fn == RowScale::kSigmoid) s = __fdiv_rn(1.0f, AddRn(1.0f, expf(-s)));
  for (int64_t i = threadIdx.x; i < p.dim; i += blockDim.x) y[i] = AddRn(y[i], MulRn(s, x[i]));
}

__global__ void ClampKernel(ClampParams p) {
  float* x = p.x + blockIdx.x * p.stride;
  for (int64_t i = threadIdx.x; i < p.dim; i += blockDim.x)
    x[i] = fminf(p.limit, fmaxf(-p.limit, x[i]));
}

__global__ void KvAppendKernel(KvAppendParams p) {
  const int64_t t = blockIdx.x;
  const int64_t width = p.kv_heads * p.head_dim;
  const int64_t slot = p.slots[t];
  float* kc = p.k_cache + slot * width;
  float* vc = p.v_cache + slot * width;
  const float* k = p.k + t * p.k_stride;
  const float* v = p.v + t * p.v_stride;
  for (int64_t i = threadIdx.x; i < width; i += blockDim.x) {
    kc[i] = k[i];
    vc[i] = v[i];
  }
}

}  // namespace

cudaError_t LaunchEmbedding(const EmbeddingParams& p, cudaStream_t stream) {
  if (p.rows <= 0) return cudaSuccess;
  EmbeddingKernel<<<p.rows, kThreads, 0, stream>>>(p);
  return cudaGetLastError();
}

cudaError_t LaunchSwiGlu(const SwiGluParams& p, cudaStream_t stream) {
  if (p.rows <= 0 || p.dim <= 0) return cudaSuccess;
  SwiGluKernel<<<p.rows, kThreads, 0, stream>>>(p);
  return cudaGetLastError();
}

cudaError_t LaunchAddRows(const AddRowsParams& p, cudaStream_t stream) {
  if (p.rows <= 0 || p.dim <= 0) return cudaSuccess;
  AddRowsKernel<<<p.rows, kThreads, 0, stream>>>(p);
  return cudaGetLastError();
}

cudaError_t LaunchClamp(const ClampParams& p, cudaStream_t stream) {
  if (p.rows <= 0 || p.dim <= 0) return cudaSuccess;
  ClampKernel<<<p.rows, kThreads, 0, stream>>>(p);
  return cudaGetLastError();
}

cudaError_t LaunchKvAppend(const KvAppendParams& p, cudaStream_t stream) {
  if (p.rows <= 0) return cudaSuccess;
  KvAppendKernel<<<p.rows, kThreads, 0, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace expertd::engine::cuda
