// BackwardOps on one CUDA stream: each op enqueues its kernel(s)
// (train_kernels.h); a launch error is kept and returned by Synchronize(),
// as CudaBackend does for the forward ops. Pointers are device memory (e.g.
// CudaBackend buffers; its compute stream keeps forward and backward in
// order). Not thread-safe: one caller at a time.
#ifndef EXPERTD_ENGINE_TRAIN_CUDA_CUDA_BACKWARD_OPS_H_
#define EXPERTD_ENGINE_TRAIN_CUDA_CUDA_BACKWARD_OPS_H_

#include <cuda_runtime_api.h>

#include "engine/train/backward_ops.h"

namespace expertd::train::cuda {

class CudaBackwardOps final : public BackwardOps {
 public:
  explicit CudaBackwardOps(cudaStream_t stream) : stream_(stream) {}

  void RmsNormBackward(const float* x, const float* w, const float* rstd, const float* dy,
                       float* dx, float* dw, int64_t n, int64_t d) override;
  void SwiGluBackward(const float* gate, const float* up, const float* dact, float* dgate,
                      float* dup, int64_t count) override;
  void RopeBackward(const float* cos, const float* sin, int64_t half, float* dx, int64_t batch,
                    int64_t t, int64_t heads) override;
  void EmbeddingBackward(const int32_t* ids, const float* dy, int64_t n, int64_t d,
                         int32_t padding_idx, float* dtable) override;
  void CrossEntropy(const float* logits, const int32_t* targets, int64_t n, int64_t v, float scale,
                    float* dlogits, double* row_loss) override;
  void RouterBackward(const float* probs, const int32_t* topk_ids, const float* topk_weight,
                      const float* dweight, const float* aux_dprob, int64_t n, int64_t num_experts,
                      int64_t top_k, bool normalize, float* dlogits) override;
  void GroupedSigmoidRouterBackward(const float* scores, const int32_t* topk_ids,
                                    const float* dweight, int64_t n, int64_t num_experts,
                                    int64_t top_k, bool norm_topk_prob, float routed_scaling_factor,
                                    float* dlogits) override;
  void AttentionBackward(const AttentionShape& s, const float* q, const float* k, const float* v,
                         const float* probs, const float* dout, float* dq, float* dk, float* dv,
                         float* dscores) override;
  void AdamWUpdate(const AdamWConstants& c, const float* g, float* p, float* m, float* v, int64_t n,
                   models::DType weight_dtype, void* weight) override;
  absl::Status Synchronize() override;

 private:
  // Keeps the first failure (with the op's name) for Synchronize.
  void Record(cudaError_t e, const char* op);

  cudaStream_t stream_;
  absl::Status first_error_;
};

}  // namespace expertd::train::cuda

#endif  // EXPERTD_ENGINE_TRAIN_CUDA_CUDA_BACKWARD_OPS_H_
