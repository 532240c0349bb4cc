#include "engine/train/cuda/cuda_backward_ops.h"

#include "absl/strings/str_cat.h"
#include "engine/train/cuda/train_kernels.h"

namespace expertd::train::cuda {

void CudaBackwardOps::Record(cudaError_t e, const char* op) {
  if (e == cudaSuccess || !first_error_.ok()) return;
  first_error_ =
      e == cudaErrorInvalidValue
          ? absl::InvalidArgumentError(absl::StrCat(op, ": shape outside the CUDA kernel's limits"))
          : absl::InternalError(absl::StrCat(op, ": ", cudaGetErrorString(e)));
}

void CudaBackwardOps::RmsNormBackward(const float* x, const float* w, const float* rstd,
                                      const float* dy, float* dx, float* dw, int64_t n, int64_t d) {
  Record(LaunchRmsNormBackward(x, w, rstd, dy, dx, dw, n, d, stream_), "RmsNormBackward");
}

void CudaBackwardOps::SwiGluBackward(const float* gate, const float* up, const float* dact,
                                     float* dgate, float* dup, int64_t count) {
  Record(LaunchSwiGluBackward(gate, up, dact, dgate, dup, count, stream_), "SwiGluBackward");
}

void CudaBackwardOps::RopeBackward(const float* cos, const float* sin, int64_t half, float* dx,
                                   int64_t batch, int64_t t, int64_t heads) {
  Record(LaunchRopeBackward(cos, sin, half, dx, batch, t, heads, stream_), "RopeBackward");
}

void CudaBackwardOps::EmbeddingBackward(const int32_t* ids, const float* dy, int64_t n, int64_t d,
                                        int32_t padding_idx, float* dtable) {
  Record(LaunchEmbeddingBackward(ids, dy, n, d, padding_idx, dtable, stream_), "EmbeddingBackward");
}

void CudaBackwardOps::CrossEntropy(const float* logits, const int32_t* targets, int64_t n,
                                   int64_t v, float scale, float* dlogits, double* row_loss) {
  Record(LaunchCrossEntropy(logits, targets, n, v, scale, dlogits, row_loss, stream_),
         "CrossEntropy");
}

void CudaBackwardOps::RouterBackward(const float* probs, const int32_t* topk_ids,
                                     const float* topk_weight, const float* dweight,
                                     const float* aux_dprob, int64_t n, int64_t num_experts,
                                     int64_t top_k, bool normalize, float* dlogits) {
  Record(LaunchRouterBackward(probs, topk_ids, topk_weight, dweight, aux_dprob, n, num_experts,
                              top_k, normalize, dlogits, stream_),
         "RouterBackward");
}

void CudaBackwardOps::GroupedSigmoidRouterBackward(const float* scores, const int32_t* topk_ids,
                                                   const float* dweight, int64_t n,
                                                   int64_t num_experts, int64_t top_k,
                                                   bool norm_topk_prob, float routed_scaling_factor,
                                                   float* dlogits) {
  Record(
      LaunchGroupedSigmoidRouterBackward(scores, topk_ids, dweight, n, num_experts, top_k,
                                         norm_topk_prob, routed_scaling_factor, dlogits, stream_),
      "GroupedSigmoidRouterBackward");
}

void CudaBackwardOps::AttentionBackward(const AttentionShape& s, const float* q, const float* k,
                                        const float* v, const float* probs, const float* dout,
                                        float* dq, float* dk, float* dv, float* dscores) {
  Record(LaunchAttentionBackward(s, q, k, v, probs, dout, dq, dk, dv, dscores, stream_),
         "AttentionBackward");
}

void CudaBackwardOps::AdamWUpdate(const AdamWConstants& c, const float* g, float* p, float* m,
                                  float* v, int64_t n, models::DType weight_dtype, void* weight) {
  Record(LaunchAdamWUpdate(c, g, p, m, v, n, weight_dtype, weight, stream_), "AdamWUpdate");
}

absl::Status CudaBackwardOps::Synchronize() {
  Record(cudaStreamSynchronize(stream_), "Synchronize");
  absl::Status s = first_error_;
  first_error_ = absl::OkStatus();
  return s;
}

}  // namespace expertd::train::cuda
