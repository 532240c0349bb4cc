// Launchers of the CUDA kernels, one .cu file per op family. Each is the GPU
// twin of the CPU op of the same name (engine/backend/cpu/kernels.h) over the
// same params struct (engine/backend/op_params.h documents every shape; all
// pointers are device memory). Each enqueues its kernel(s) on `stream` and
// returns the launch error (cudaGetLastError), or cudaErrorInvalidValue for a
// shape outside the kernel's limits (listed per launcher). Never allocates.
//
// Host-side header: compiled by both nvcc (.cu) and the host compiler
// (cuda_backend.cc). Thread safety: launchers are stateless; the stream's
// owner serialises them.
#ifndef EXPERTD_ENGINE_BACKEND_CUDA_KERNELS_H_
#define EXPERTD_ENGINE_BACKEND_CUDA_KERNELS_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "engine/backend/op_params.h"

namespace expertd::engine::cuda {

// ---- elementwise.cu --------------------------------------------------------
cudaError_t LaunchEmbedding(const EmbeddingParams& p, cudaStream_t stream);
cudaError_t LaunchSwiGlu(const SwiGluParams& p, cudaStream_t stream);
cudaError_t LaunchAddRows(const AddRowsParams& p, cudaStream_t stream);
cudaError_t LaunchClamp(const ClampParams& p, cudaStream_t stream);
cudaError_t LaunchKvAppend(const KvAppendParams& p, cudaStream_t stream);

// ---- moe_dispatch.cu -------------------------------------------------------
cudaError_t LaunchGatherRows(const GatherRowsParams& p, cudaStream_t stream);
cudaError_t LaunchScatterRows(const ScatterRowsParams& p, cudaStream_t stream);
// Limit: top_k <= 64 (as the CPU twin).
cudaError_t LaunchMoeCombine(const MoeCombineParams& p, cudaStream_t stream);
cudaError_t LaunchMoeScatterAdd(const MoeScatterAddParams& p, cudaStream_t stream);
// out[r] = index of the largest x[r, :], the first one on ties (greedy
// sampling on the device; CPU twin: engine/greedy.h Argmax). x: [rows, cols]
// contiguous; out: [rows].
cudaError_t LaunchArgmaxRows(const float* x, int64_t rows, int64_t cols, int32_t* out,
                             cudaStream_t stream);

// ---- norm_rope.cu ----------------------------------------------------------
cudaError_t LaunchRmsNorm(const RmsNormParams& p, cudaStream_t stream);
// Limit: rotary_dim <= 1024.
cudaError_t LaunchRope(const RopeParams& p, cudaStream_t stream);

// ---- router.cu -------------------------------------------------------------
// Limits: num_experts <= 512, top_k <= 64.
cudaError_t LaunchSoftmaxTopK(const SoftmaxTopKParams& p, cudaStream_t stream);

// ---- attention_rows.cu / attention_tiled.cu ----------------------------------
enum class AttentionKernel {
  kAuto,   // kTiled for prefill-sized steps (rows >= 32, head_dim <= 128), else kRows
  kRows,   // one block per (query row, kv head): decode
  kTiled,  // one block per (16 query rows, head), K/V tiles in shared memory: prefill
};
// Limit: head_dim <= kMaxWideHeadDim. kRows handles head_dim <= 256, kTiled
// <= 128 (kAuto falls back to kRows); a wider head (DeepSeek-V3's absorbed
// MLA decode: 512 + 64) always runs LaunchAttentionWide, whatever `kernel`.
// kRows and kTiled honour AttentionParams::window and ::sinks.
cudaError_t LaunchAttention(const AttentionParams& p, AttentionKernel kernel, cudaStream_t stream);
cudaError_t LaunchAttentionRows(const AttentionParams& p, cudaStream_t stream);
cudaError_t LaunchAttentionTiled(const AttentionParams& p, cudaStream_t stream);
// ---- attention_wide.cu: one warp per query head, any head_dim up to 1024
// (used for head_dim > 256; correct for any width). k_cache may equal v_cache
// (the MLA latent cache serves as both). No window or sinks:
// cudaErrorInvalidValue when either is set.
constexpr int64_t kMaxWideHeadDim = 1024;
cudaError_t LaunchAttentionWide(const AttentionParams& p, cudaStream_t stream);

// ---- skinny_gemm.cu --------------------------------------------------------
// Matmul for m <= kSkinnyMaxRows (decode): fp32 activations, weights read in
// their own dtype with 16-byte loads, fp32 accumulation. Row-invariant: a
// row's result is bitwise independent of m (1..kSkinnyMaxRows) and of the
// other rows. Limit: m <= kSkinnyMaxRows.
constexpr int64_t kSkinnyMaxRows = 16;
cudaError_t LaunchSkinnyGemm(const MatmulParams& p, cudaStream_t stream);

// ---- quant_matmul.cu ---------------------------------------------------------
// Matmul with a block-quantized w (p.w.quant: int8, int4, mxfp4; fp32
// activations), any m; CPU twin: cpu::QuantMatmulScalar. Limits: m <= 65535,
// group_size divides k; not kFp8E4m3Block (LaunchFp8Gemm).
cudaError_t LaunchQuantMatmul(const MatmulParams& p, cudaStream_t stream);

// ---- fp8_gemm.cu -----------------------------------------------------------
// The skinny GEMM for block-scaled FP8 E4M3 weights (p.w.quant kFp8E4m3Block),
// dequantized in registers; LaunchSkinnyGemm calls it for kF8E4M3 (the
// backend sends kFp8E4m3Block there). CPU twin: cpu/matmul_fp8.
// Limits: m <= kSkinnyMaxRows; quant.group_size % 16 == 0.
cudaError_t LaunchFp8Gemm(const MatmulParams& p, cudaStream_t stream);

// ---- convert.cu (the cuBLASLt path's helpers) --------------------------------
// hi[r, c] = round_to(x[r, c]) in `to` (kBF16 or kF16), contiguous [rows, cols];
// when lo != nullptr also lo[r, c] = round_to(x[r, c] - hi[r, c]) (the
// residual, for the two-term "split" GEMM).
cudaError_t LaunchConvertRows(const float* x, int64_t x_stride, int64_t rows, int64_t cols,
                              DType to, void* hi, void* lo, cudaStream_t stream);
// y[r, c] += bias[c] for r < rows, c < bias.cols.
cudaError_t LaunchAddBias(float* y, int64_t y_stride, int64_t rows, const WeightRef& bias,
                          cudaStream_t stream);

}  // namespace expertd::engine::cuda

#endif  // EXPERTD_ENGINE_BACKEND_CUDA_KERNELS_H_
