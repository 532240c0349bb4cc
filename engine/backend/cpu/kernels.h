// The CPU twins of every Backend op: plain functions over the op's params
// (engine/backend/op_params.h). They are the reference the CUDA kernels are
// tested against, and what CpuBackend runs. `pool` may be null (one thread).
//
// Each is batch-invariant (see op_params.h): threads split output elements,
// never a reduction, and every per-row computation is the same instruction
// sequence whatever the number of rows.
#ifndef EXPERTD_ENGINE_BACKEND_CPU_KERNELS_H_
#define EXPERTD_ENGINE_BACKEND_CPU_KERNELS_H_

#include "engine/backend/cpu/thread_pool.h"
#include "engine/backend/op_params.h"

namespace expertd::engine::cpu {

void Embedding(const EmbeddingParams& p, ThreadPool* pool);      // elementwise.cc
void RmsNorm(const RmsNormParams& p, ThreadPool* pool);          // rms_norm.cc
void Matmul(const MatmulParams& p, ThreadPool* pool);            // matmul.cc
void GroupedMatmul(const GroupedMatmulParams& p, ThreadPool* pool);  // grouped_matmul.cc
void Rope(const RopeParams& p, ThreadPool* pool);                // rope.cc
void KvAppend(const KvAppendParams& p, ThreadPool* pool);        // attention.cc
void Attention(const AttentionParams& p, ThreadPool* pool);      // attention.cc
void SoftmaxTopK(const SoftmaxTopKParams& p, ThreadPool* pool);  // router.cc
void SwiGlu(const SwiGluParams& p, ThreadPool* pool);            // elementwise.cc
void AddRows(const AddRowsParams& p, ThreadPool* pool);          // elementwise.cc
void Clamp(const ClampParams& p, ThreadPool* pool);              // elementwise.cc
void GatherRows(const GatherRowsParams& p, ThreadPool* pool);    // moe_dispatch.cc
void ScatterRows(const ScatterRowsParams& p, ThreadPool* pool);  // moe_dispatch.cc
void MoeCombine(const MoeCombineParams& p, ThreadPool* pool);    // moe_dispatch.cc
void MoeScatterAdd(const MoeScatterAddParams& p, ThreadPool* pool);  // moe_dispatch.cc

}  // namespace expertd::engine::cpu

#endif  // EXPERTD_ENGINE_BACKEND_CPU_KERNELS_H_
