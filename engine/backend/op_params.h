// Parameters of every op a Backend implements, one struct per op.
//
// Conventions (all ops):
// - Every pointer is DEVICE memory of the backend that runs the op (on the CPU
//   backend that is host memory). The caller owns all buffers, workspace
//   included; ops never allocate.
// - Activations are fp32, row-major; `*_stride` is the distance in elements
//   between consecutive rows (>= the row's width), so an op can read a column
//   slice of a wider buffer (e.g. q, k, v inside one qkv projection).
// - Weights are WeightRef: fp32, bf16 or fp16, Hugging Face layout (a Linear
//   weight is [out_features, in_features]); a MatmulParams::w may instead be
//   block-quantized (WeightRef::quant, weight_format.h) on backends whose
//   SupportsWeightFormat says so.
// - Shapes in comments use the field names: x [rows, dim] means rows*dim
//   elements at x, row r starting at x + r*x_stride.
// - Output buffers may alias inputs only where a comment says so.
// - BATCH INVARIANCE: every op computes each output row with an arithmetic
//   sequence that depends only on that row's inputs (never on `rows`, on the
//   other rows, or on the thread count), so a token's results are bitwise the
//   same whatever else is in the batch. Every backend must keep this.
#ifndef EXPERTD_ENGINE_BACKEND_OP_PARAMS_H_
#define EXPERTD_ENGINE_BACKEND_OP_PARAMS_H_

#include <cstdint>

#include "engine/backend/weight_format.h"
#include "models/dtype/dtype.h"

namespace expertd::engine {

using DType = models::DType;

// A weight tensor in device memory, [rows, cols] row-major (a 1-D tensor has
// rows == 1). Non-owning. Quantized (quant.quantized()): `data` holds the
// values and quant.scales the scales in the layout of weight_format.h; dtype
// is then the dtype of the tensor the values were quantized from (kernels
// ignore it), except FP8 block-scaled checkpoint weights: dtype kF8E4M3
// always comes with quant kFp8E4m3Block.
struct WeightRef {
  const void* data = nullptr;
  DType dtype = DType::kF32;
  int64_t rows = 0;
  int64_t cols = 0;
  WeightQuant quant;  // kDense unless a quantized expert or FP8 weight

  bool empty() const { return data == nullptr; }
  // Bytes of the values (quantized: without the scales).
  uint64_t nbytes() const {
    if (quant.quantized()) return QuantValueBytes(quant.format, rows, cols);
    return static_cast<uint64_t>(rows * cols) * models::DTypeSize(dtype);
  }
};

// out[t, :] = table[ids[t], :]  (converted to fp32).
struct EmbeddingParams {
  const int32_t* ids = nullptr;  // [rows], each in [0, table.rows)
  int64_t rows = 0;
  WeightRef table;       // [vocab, dim]
  float* out = nullptr;  // [rows, dim], contiguous
};

// out[r, :] = x[r, :] / sqrt(mean(x[r, :]^2) + eps) * weight  (HF RMSNorm).
// Per-head q/k norm: rows = tokens * heads, dim = head_dim. Whole-projection
// norm (OLMoE): rows = tokens, dim = heads * head_dim. `out` may equal `x`
// (with equal strides).
struct RmsNormParams {
  const float* x = nullptr;  // [rows, dim]
  int64_t x_stride = 0;
  float* out = nullptr;  // [rows, dim]
  int64_t out_stride = 0;
  int64_t rows = 0;
  int64_t dim = 0;
  WeightRef weight;  // [dim] (rows == 1, cols == dim)
  float eps = 1e-6f;
};

// How a matmul treats its fp32 activations (BackendOptions::matmul_activations).
//  kF32: x is used as is; fp32 products and accumulation (the default).
//  kBF16: for dense bf16 weights, quantized int8 / int4 / mxfp4 weights in
//    groups of 32, 64 or 128 and FP8 blocks of 32, 64 or 128 columns that
//    divide k, x is rounded to bf16 (nearest even) and each pair of products
//    accumulated as the CPU's bf16 dot-product instruction does
//    (matmul_dense.h): twice the arithmetic rate of fp32 FMA, at bf16
//    precision for x (what PyTorch's bf16 linear does). Other weights ignore
//    it. Still batch-invariant.
//  kInt8: int8 / int4 / mxfp4 weights with groups of 32, 64 or 128 take x
//    quantized to int8 per 32-element block (scale max|x| / 127, as
//    llama.cpp's Q8_0 quantizes activations) and exact integer dot products
//    per block, each block's sum scaled into an fp32 accumulator: the same
//    bits from the VNNI kernel (quant_matmul_avx512vnni.cc) and the AVX2 one
//    (quant_matmul_avx2_int8.cc), so it runs on any AVX2 CPU. Other weights
//    as kBF16 on a CPU with the bf16 dot product, else as kF32.
//    Batch-invariant.
enum class MatmulActivations { kF32, kBF16, kInt8 };

// y[m, n] (+)= x[m, k] . w[n, k]^T + bias[n].
// The reduction over k for one (row, column) is the same sequence of fp32
// operations for every m and every row: batch-invariant by contract.
struct MatmulParams {
  const float* x = nullptr;  // [m, k]
  int64_t x_stride = 0;
  WeightRef w;         // [n, k]
  WeightRef bias;      // [n] or empty
  float* y = nullptr;  // [m, n]; must not alias x
  int64_t y_stride = 0;
  int64_t m = 0;
  bool accumulate = false;  // y += result instead of y = result
  MatmulActivations activations = MatmulActivations::kF32;
  // Row maps, for an expert GEMM over its tokens' rows where they lie (a
  // MoE layer's routed rows; engine/parallel/shard_step.cc). Only on a
  // backend whose HasMatmulRowMaps() is true; null: row r is row r.
  //  - x_rows: row r of the product reads x[x_rows[r], :] (GatherRows'
  //    index; the product is then that of the gathered rows).
  //  - y_rows: row r's result goes to y[y_rows[r], :]; the rows of one call
  //    must be distinct (no two write one y row).
  //  - row_weights, with y_rows: row r's result v (no bias allowed) is
  //    first weighted, row_weights[row_weight_index[r]] * v, the product
  //    rounded before the (+ y): with accumulate, MoeScatterAdd's arithmetic
  //    (row_weights = the routing weights, row_weight_index = the slots), so
  //    the result is bitwise a Matmul into a buffer then MoeScatterAdd.
  const int32_t* x_rows = nullptr;            // [m]
  const int32_t* y_rows = nullptr;            // [m]
  const float* row_weights = nullptr;         // [*]
  const int32_t* row_weight_index = nullptr;  // [m], with row_weights
};

// The expert GEMM of a MoE layer in one call (grouped GEMM): the rows of x
// are sorted by group (expert), group g owning rows [row_offset[g],
// row_offset[g + 1]), and
//   y[r, n] (+)= x[r, k] . w[g][n, k]^T   for every row r of group g.
// Element (r, c) is computed exactly as Matmul computes it for a MatmulParams
// with w = w[g] (same weight formats, same arithmetic), so the result is
// bitwise that of one Matmul per group, whatever the grouping and the threads.
// Unlike the other ops, `w` and `row_offset` are HOST arrays (the experts'
// weight handles and the dispatch's counts are known on the host); what they
// point to (weights, x, y) is device memory.
struct GroupedMatmulParams {
  const float* x = nullptr;  // [row_offset[groups], k]; [*, k] with x_rows
  int64_t x_stride = 0;
  const WeightRef* w = nullptr;         // [groups] host; each [n, k] (n, k equal across groups);
                                        // a group with no rows may have an empty weight
  const int64_t* row_offset = nullptr;  // [groups + 1] host; row_offset[0] == 0, non-decreasing
  int64_t groups = 0;
  float* y = nullptr;  // [row_offset[groups], n]; [*, n] with y_rows; must not alias x
  int64_t y_stride = 0;
  int64_t n = 0;            // output columns (w[g].rows)
  int64_t k = 0;            // reduction length (w[g].cols)
  bool accumulate = false;  // y += result instead of y = result
  MatmulActivations activations = MatmulActivations::kF32;  // as MatmulParams
  // Row maps, as MatmulParams' (only where HasMatmulRowMaps() is true), over
  // the call's rows 0..row_offset[groups]: grouped row r reads
  // x[x_rows[r], :] and writes y[y_rows[r], :] (distinct y rows). So the
  // experts' rows are read and their results stored where the tokens' rows
  // lie, with no gathered copy: bitwise GatherRows, this call, ScatterRows.
  const int32_t* x_rows = nullptr;  // [row_offset[groups]]
  const int32_t* y_rows = nullptr;  // [row_offset[groups]]
};

// Rotary position embedding, rotate-half (GPT-NeoX / HF Llama) layout, in
// place on x[t, h, 0:rotary_dim]:
//   a = x[i], b = x[i + rotary_dim/2], angle = positions[t] * inv_freq[i]
//   x[i] = (a*cos - b*sin) * attention_factor
//   x[i + rotary_dim/2] = (b*cos + a*sin) * attention_factor
// cos/sin are computed from the fp32 angle (as HF does). inv_freq already
// carries the scaling variant (linear, llama3, yarn: see model/rope.h).
// interleaved (DeepSeek-V3's MLA): the pair of frequency i is (x[2i], x[2i+1])
// instead, rotated in place. DeepSeek's reference de-interleaves the pairs
// before a rotate-half; the result here is that layout's permutation, and
// since queries and keys share it their dot products are the same.
struct RopeParams {
  float* x = nullptr;      // [rows, heads, head_dim]
  int64_t row_stride = 0;  // elements between tokens
  int64_t rows = 0;
  int64_t heads = 0;
  int64_t head_dim = 0;
  int64_t rotary_dim = 0;              // even, <= head_dim
  const int32_t* positions = nullptr;  // [rows]
  const float* inv_freq = nullptr;     // [rotary_dim / 2]
  float attention_factor = 1.0f;       // yarn's mscale; 1 otherwise
  bool interleaved = false;            // pairs (2i, 2i+1) instead of (i, i + rotary_dim/2)
};

// Writes new tokens' keys and values into a block (paged) KV cache.
// Cache layout (one layer): [num_slots, kv_heads, head_dim] where
// slot = block_id * block_size + offset_in_block.
struct KvAppendParams {
  const float* k = nullptr;  // [rows, kv_heads, head_dim]
  int64_t k_stride = 0;
  const float* v = nullptr;  // [rows, kv_heads, head_dim]
  int64_t v_stride = 0;
  int64_t rows = 0;
  int64_t kv_heads = 0;
  int64_t head_dim = 0;
  const int64_t* slots = nullptr;  // [rows] destination slot of each row
  float* k_cache = nullptr;        // [num_slots, kv_heads, head_dim]
  float* v_cache = nullptr;
};

// Causal grouped-query attention over the block KV cache (prefill chunks and
// decode alike). Query row t belongs to sequence seq[t] at position pos[t] and
// attends keys first..pos[t] of that sequence (already appended to the cache;
// first = 0, or pos[t] - window + 1 with a sliding window):
//   s_j = (q . k_j) * scale;  p = softmax(s [, sink]);  out = sum_j p_j v_j
// Query head h uses kv head h / (heads / kv_heads). Keys are visited in
// position order with a two-pass softmax, so a row's result does not depend
// on the batch or on how its sequence's prompt was chunked. (Score scratch is
// the implementation's own: per-thread buffers on CPU, shared memory on GPU.)
struct AttentionParams {
  const float* q = nullptr;  // [rows, heads, head_dim]
  int64_t q_stride = 0;
  float* out = nullptr;  // [rows, heads, head_dim]; must not alias q
  int64_t out_stride = 0;
  int64_t rows = 0;
  int64_t heads = 0;
  int64_t kv_heads = 0;
  int64_t head_dim = 0;
  float scale = 1.0f;                     // usually 1/sqrt(head_dim)
  const int32_t* seq = nullptr;           // [rows] index into block_tables
  const int32_t* pos = nullptr;           // [rows] absolute position of the query
  const int32_t* block_tables = nullptr;  // [num_seqs, max_blocks_per_seq]
  int64_t max_blocks_per_seq = 0;
  int64_t block_size = 0;          // tokens per block
  const float* k_cache = nullptr;  // [num_slots, kv_heads, head_dim]
  const float* v_cache = nullptr;
  // Sliding window (Mistral, gpt-oss): the query at position pos sees keys
  // max(0, pos - window + 1) .. pos, Hugging Face's "pos - j < window";
  // 0 = every key 0 .. pos.
  int64_t window = 0;
  // Attention sinks (gpt-oss): one logit per query head [1, heads] that joins
  // the softmax's denominator after the keys and carries no value, so the
  // weights of the keys sum to less than 1. Empty = none.
  WeightRef sinks;
};

// Router for softmax-scored MoE (Mixtral, Qwen2/3-MoE, OLMoE):
//   p = softmax(logits[r, :]); (w, ids) = top_k(p) in descending weight, ties
//   to the lower expert id (torch.topk order); if renormalize: w /= sum(w).
struct SoftmaxTopKParams {
  const float* logits = nullptr;  // [rows, num_experts]
  int64_t rows = 0;
  int64_t num_experts = 0;
  int64_t top_k = 0;
  bool renormalize = false;
  int32_t* ids = nullptr;    // [rows, top_k] rank order
  float* weights = nullptr;  // [rows, top_k]
};

// out[r, i] = silu(gate[r, i]) * up[r, i]. out may alias gate or up.
// With limit > 0 (gpt-oss' clamped SwiGLU), g = min(gate, limit),
// u = clamp(up, -limit, limit): out = (u + 1) * g * sigmoid(alpha * g).
struct SwiGluParams {
  const float* gate = nullptr;  // [rows, dim]
  int64_t gate_stride = 0;
  const float* up = nullptr;  // [rows, dim]
  int64_t up_stride = 0;
  float* out = nullptr;  // [rows, dim]
  int64_t out_stride = 0;
  int64_t rows = 0;
  int64_t dim = 0;
  float limit = 0.0f;  // 0: plain SwiGLU
  float alpha = 1.0f;
};

// y[r, :] += f(scale[r]) * x[r, :], f = identity or sigmoid; scale == nullptr
// means f(.) = 1 (a plain residual add). y must not alias x.
enum class RowScale { kIdentity, kSigmoid };
struct AddRowsParams {
  float* y = nullptr;  // [rows, dim]
  int64_t y_stride = 0;
  const float* x = nullptr;  // [rows, dim]
  int64_t x_stride = 0;
  const float* scale = nullptr;  // [rows] (element r at scale[r*scale_stride])
  int64_t scale_stride = 1;
  RowScale scale_fn = RowScale::kIdentity;
  int64_t rows = 0;
  int64_t dim = 0;
};

// x[i] = clamp(x[i], -limit, limit) over rows x dim (OLMoE clip_qkv).
struct ClampParams {
  float* x = nullptr;  // [rows, dim]
  int64_t stride = 0;
  int64_t rows = 0;
  int64_t dim = 0;
  float limit = 0.0f;
};

// dst[i, :] = src[index[i], :]  (expert dispatch: gather a token's row).
struct GatherRowsParams {
  const float* src = nullptr;  // [*, dim]
  int64_t src_stride = 0;
  const int32_t* index = nullptr;  // [rows]
  float* dst = nullptr;            // [rows, dim], contiguous
  int64_t rows = 0;
  int64_t dim = 0;
};

// dst[index[i], :] = src[i, :]  (expert results back to per-token slots).
// Each destination row is written by at most one i.
struct ScatterRowsParams {
  const float* src = nullptr;      // [rows, dim], contiguous
  const int32_t* index = nullptr;  // [rows]
  float* dst = nullptr;            // [*, dim], contiguous
  int64_t rows = 0;
  int64_t dim = 0;
};

// MoE combine: out[t, :] (+)= sum_j weights[t, j] * slots[t * top_k + j, :],
// adding the terms in ascending order of ids[t, j] (the order Hugging Face's
// per-expert loop adds them), each term computed as (w * y) then added. The
// order is fixed by the token's own routing, so the result does not depend on
// the order the experts were computed in, nor on the batch.
struct MoeCombineParams {
  const float* slots = nullptr;    // [rows * top_k, dim], contiguous
  const float* weights = nullptr;  // [rows, top_k]
  const int32_t* ids = nullptr;    // [rows, top_k]
  float* out = nullptr;            // [rows, dim]
  int64_t out_stride = 0;
  int64_t rows = 0;
  int64_t top_k = 0;
  int64_t dim = 0;
  bool accumulate = false;  // out += sum instead of out = sum
};

// One expert's share of the MoE combine, added in place:
//   out[slot[i] / top_k, :] = out[...] + weights[slot[i]] * src[i, :]
// each term (w * y) then added. Called once per routed expert in ascending
// expert id over a zeroed `out`, it adds every token's terms in MoeCombine's
// order, so the result is MoeCombine's bitwise, without writing the
// [rows * top_k, dim] slot buffer and reading it back (what MoEShard's
// devices save: engine/parallel/shard_step.cc). slot[i] is the (token, rank)
// slot t * top_k + j; the rows of one call are distinct tokens (a token
// routes to an expert once), so no two rows of a call write one out row.
struct MoeScatterAddParams {
  const float* src = nullptr;      // [rows, dim], contiguous
  const int32_t* slot = nullptr;   // [rows]
  const float* weights = nullptr;  // [tokens, top_k]
  float* out = nullptr;            // [tokens, dim], contiguous
  int64_t rows = 0;
  int64_t top_k = 0;
  int64_t dim = 0;
};

}  // namespace expertd::engine

#endif  // EXPERTD_ENGINE_BACKEND_OP_PARAMS_H_
