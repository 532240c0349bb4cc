// Launchers of the training engine's CUDA kernels: the backward ops and the
// AdamW update. Each is the GPU twin of the CPU function of the same name
// (engine/train/ops.h, moe_block.h, adamw.h, train_model.cc's embedding
// gradient), over the same shapes and with the same accumulate / write
// contract; every pointer is device memory. Each enqueues its kernel(s) on
// `stream` and returns the launch error (cudaGetLastError), or
// cudaErrorInvalidValue for a shape outside its limits (listed per launcher).
// Never allocates. engine/train/cuda/cuda_train_ops_test.cc states and checks
// each one's agreement with its twin.
//
// Host-side header, compiled by both nvcc and the host compiler. Launchers
// are stateless; the stream's owner serialises them.
#ifndef EXPERTD_ENGINE_TRAIN_CUDA_TRAIN_KERNELS_H_
#define EXPERTD_ENGINE_TRAIN_CUDA_TRAIN_KERNELS_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "engine/train/adamw.h"
#include "engine/train/ops.h"
#include "models/dtype/dtype.h"

namespace expertd::train::cuda {

// ---- norm_backward.cu --------------------------------------------------------
// dx (N,D) += d/dx; dw (D) += d/dw (dw may be null). RmsNormBackward.
cudaError_t LaunchRmsNormBackward(const float* x, const float* w, const float* rstd,
                                  const float* dy, float* dx, float* dw, int64_t n, int64_t d,
                                  cudaStream_t stream);

// ---- elementwise_backward.cu -------------------------------------------------
// WRITES dgate, dup (count). SwiGluBackward.
cudaError_t LaunchSwiGluBackward(const float* gate, const float* up, const float* dact,
                                 float* dgate, float* dup, int64_t count, cudaStream_t stream);
// In place on dx (batch*t rows, heads, 2*half): the inverse rotation. cos and
// sin are RopeTables' (t, half) arrays on the device. RopeBackward.
cudaError_t LaunchRopeBackward(const float* cos, const float* sin, int64_t half, float* dx,
                               int64_t batch, int64_t t, int64_t heads, cudaStream_t stream);
// dtable (V,D) [ids[r]] += dy (N,D) [r] for every r with ids[r] != padding_idx
// (nn.Embedding(padding_idx): that row gets no gradient; -1: none), rows
// added in r order per element. EmbeddingBackward.
cudaError_t LaunchEmbeddingBackward(const int32_t* ids, const float* dy, int64_t n, int64_t d,
                                    int32_t padding_idx, float* dtable, cudaStream_t stream);

// ---- loss_router_backward.cu -------------------------------------------------
// Fused log-softmax + cross-entropy (CrossEntropy): row_loss (N, double)
// WRITES each row's loss (0 for target < 0, ignore_index); dlogits (may be
// null) WRITES (softmax - onehot) * scale, zeros on ignored rows. The total is
// the sum of row_loss in row order (the caller's, as on the CPU).
cudaError_t LaunchCrossEntropy(const float* logits, const int32_t* targets, int64_t n, int64_t v,
                               float scale, float* dlogits, double* row_loss, cudaStream_t stream);
// The softmax router's backward, RouteTopKBackward then SoftmaxBackward fused:
// dprobs = the top-k (renormalised when `normalize`) weights' backward from
// dweight (N,K), plus aux_dprob (E) on every row when non-null (the
// load-balancing loss's gradient); dlogits (N,E) += p * (dprobs - sum(dprobs * p)).
// Limit: num_experts <= 8192.
cudaError_t LaunchRouterBackward(const float* probs, const int32_t* topk_ids,
                                 const float* topk_weight, const float* dweight,
                                 const float* aux_dprob, int64_t n, int64_t num_experts,
                                 int64_t top_k, bool normalize, float* dlogits,
                                 cudaStream_t stream);

// DeepSeek-V3's sigmoid router (RouteGroupedSigmoidBackward): dlogits (N,E) +=
// the gradient through w = c s / sum(s) (or c s when !norm_topk_prob or
// top_k == 1), c = routed_scaling_factor, and through s = sigmoid(logits); the
// selection bias gets no gradient.
cudaError_t LaunchGroupedSigmoidRouterBackward(const float* scores, const int32_t* topk_ids,
                                               const float* dweight, int64_t n, int64_t num_experts,
                                               int64_t top_k, bool norm_topk_prob,
                                               float routed_scaling_factor, float* dlogits,
                                               cudaStream_t stream);

// ---- attention_backward.cu ---------------------------------------------------
// Causal GQA attention backward (AttentionBackward): dq, dk, dv += gradients.
// `dscores` is a workspace of s.batch * s.q_heads * s.t * s.t floats (the
// size of probs), overwritten.
cudaError_t LaunchAttentionBackward(const AttentionShape& s, const float* q, const float* k,
                                    const float* v, const float* probs, const float* dout,
                                    float* dq, float* dk, float* dv, float* dscores,
                                    cudaStream_t stream);

// ---- adamw_update.cu ---------------------------------------------------------
// AdamWUpdateScalar over n elements in place on the fp32 master p and the
// moments m, v, then, when `weight` is non-null, weight = p rounded to
// `weight_dtype` (kBF16 or kF16: round to nearest even; kF32: a copy), as
// AdamW::StepOne does for a bf16/fp16 parameter.
cudaError_t LaunchAdamWUpdate(const AdamWConstants& c, const float* g, float* p, float* m, float* v,
                              int64_t n, models::DType weight_dtype, void* weight,
                              cudaStream_t stream);

}  // namespace expertd::train::cuda

#endif  // EXPERTD_ENGINE_TRAIN_CUDA_TRAIN_KERNELS_H_
