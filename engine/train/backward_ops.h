// The training engine's backward ops and AdamW update behind one interface
// per backend, the seam a step loop uses to run them where its tensors live
// (the forward ops' equivalent is engine/backend/backend.h). Every pointer is
// in the backend's memory: host memory for CpuBackwardOps, device memory for
// the CUDA twin (engine/train/cuda/cuda_backward_ops.h). Each method has the
// contract of the CPU function of the same name (ops.h, moe_block.h,
// adamw.h), which CpuBackwardOps calls and which is the reference the CUDA
// kernels are tested against. Ops may run asynchronously: results are ready,
// and errors reported, at Synchronize().
//
// Thread safety: one caller at a time (ops run in call order).
#ifndef EXPERTD_ENGINE_TRAIN_BACKWARD_OPS_H_
#define EXPERTD_ENGINE_TRAIN_BACKWARD_OPS_H_

#include <cstdint>

#include "absl/status/status.h"
#include "engine/train/adamw.h"
#include "engine/train/ops.h"
#include "models/dtype/dtype.h"

namespace expertd::train {

class BackwardOps {
 public:
  virtual ~BackwardOps() = default;

  virtual void RmsNormBackward(const float* x, const float* w, const float* rstd, const float* dy,
                               float* dx, float* dw, int64_t n, int64_t d) = 0;
  virtual void SwiGluBackward(const float* gate, const float* up, const float* dact, float* dgate,
                              float* dup, int64_t count) = 0;
  // cos/sin: a RopeTables' (T, half) arrays in this backend's memory.
  virtual void RopeBackward(const float* cos, const float* sin, int64_t half, float* dx,
                            int64_t batch, int64_t t, int64_t heads) = 0;
  virtual void EmbeddingBackward(const int32_t* ids, const float* dy, int64_t n, int64_t d,
                                 int32_t padding_idx, float* dtable) = 0;
  // CrossEntropyRows: row losses written to row_loss (N doubles).
  virtual void CrossEntropy(const float* logits, const int32_t* targets, int64_t n, int64_t v,
                            float scale, float* dlogits, double* row_loss) = 0;
  // The softmax router: RouteTopKBackward into zeroed dprobs, plus aux_dprob
  // (E; may be null) on every row, then SoftmaxBackward into dlogits (+=).
  virtual void RouterBackward(const float* probs, const int32_t* topk_ids, const float* topk_weight,
                              const float* dweight, const float* aux_dprob, int64_t n,
                              int64_t num_experts, int64_t top_k, bool normalize,
                              float* dlogits) = 0;
  // DeepSeek-V3's grouped sigmoid router (RouteGroupedSigmoidBackward over
  // these settings): dlogits (N,E) += from dweight (N,K).
  virtual void GroupedSigmoidRouterBackward(const float* scores, const int32_t* topk_ids,
                                            const float* dweight, int64_t n, int64_t num_experts,
                                            int64_t top_k, bool norm_topk_prob,
                                            float routed_scaling_factor, float* dlogits) = 0;
  // dscores: workspace of batch * q_heads * t * t floats (the CPU ignores it).
  virtual void AttentionBackward(const AttentionShape& s, const float* q, const float* k,
                                 const float* v, const float* probs, const float* dout, float* dq,
                                 float* dk, float* dv, float* dscores) = 0;
  // AdamWUpdateScalar on (p, m, v), then weight = p in weight_dtype when
  // weight is non-null (the stored weight of a bf16/fp16/fp32 parameter).
  virtual void AdamWUpdate(const AdamWConstants& c, const float* g, float* p, float* m, float* v,
                           int64_t n, models::DType weight_dtype, void* weight) = 0;

  // Waits for every op enqueued so far; the first error since the last call.
  virtual absl::Status Synchronize() = 0;
};

// The CPU functions themselves, on `pool` (may be null); synchronous.
class CpuBackwardOps final : public BackwardOps {
 public:
  explicit CpuBackwardOps(engine::ThreadPool* pool) : pool_(pool) {}

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
  absl::Status Synchronize() override { return absl::OkStatus(); }

 private:
  engine::ThreadPool* const pool_;
};

}  // namespace expertd::train

#endif  // EXPERTD_ENGINE_TRAIN_BACKWARD_OPS_H_
