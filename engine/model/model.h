// Model: the MoE decoder stack of one checkpoint, loaded onto a backend.
//
//   h = embed(tokens)
//   for each layer:  h += attention(rmsnorm(h))        (AttentionLayer)
//                    x = rmsnorm(h); hook(x)           (ExpertProvider::OnRouterInput)
//                    h += feed_forward(x)              (dense MLP or MoE block)
//   logits = lm_head(rmsnorm(h[logit rows]))
//
// Supported: Mixtral, Qwen2-MoE, Qwen3-MoE, OLMoE (grouped-query attention,
// softmax routing) and DeepSeek-V3 (multi-head latent attention over a
// compressed KV cache, sigmoid grouped routing, first_k_dense_replace dense
// layers; its multi-token-prediction layers are ignored, with a log line).
//
// Thread safety: Forward is called by the engine thread only.
#ifndef EXPERTD_ENGINE_MODEL_MODEL_H_
#define EXPERTD_ENGINE_MODEL_MODEL_H_

#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/backend/backend.h"
#include "engine/kv/kv_cache.h"
#include "engine/model/attention.h"
#include "engine/model/expert_provider.h"
#include "engine/model/feed_forward.h"
#include "engine/model/layer_context.h"
#include "engine/model/resident_weights.h"
#include "engine/model/weight_source.h"
#include "engine/model/workspace.h"

namespace expertd::engine {

// OK when this engine can run `config`; otherwise Unimplemented naming what is missing.
absl::Status CheckSupported(const models::ModelConfig& config);

class Model {
 public:
  // Loads the dense weights (routed experts come from the ExpertProvider).
  // `backend` and `source` must outlive the model.
  static absl::StatusOr<std::unique_ptr<Model>> Create(Backend* backend,
                                                       const WeightSource* source);

  const models::ModelConfig& config() const { return config_; }
  ModelDims dims() const { return ModelDims::From(config_); }
  KvWidths kv_widths() const { return AttentionKvWidths(config_); }

  // Runs the decoder over `batch`, whose layout arrays are already in `ws`
  // (Buf::kTokenIds ... kLogitIndex). Leaves the logits in Buf::kLogits
  // [logit_rows, vocab]. When `routing` is non-null it gets one RowRouting per
  // layer (top_k 0 for dense layers). Errors come from the expert provider.
  absl::Status Forward(const StepBatch& batch, Workspace* ws, KvCache* kv, ExpertProvider* experts,
                       std::vector<RowRouting>* routing);

  // How MoE layers run their experts' GEMMs (expert_gemm.h). Default kAuto.
  void set_expert_gemm(ExpertGemm g) { expert_gemm_ = g; }

 private:
  struct Layer {
    WeightRef input_norm, post_norm;
    std::unique_ptr<AttentionLayer> attention;
    std::unique_ptr<FeedForward> ffn;
  };
  Model(Backend* backend, const WeightSource* source)
      : backend_(backend), config_(source->config()), store_(backend, source) {}
  absl::Status Load();
  RouterInput MakeRouterInput(int layer, const float* x, int64_t rows) const;

  Backend* backend_;
  const models::ModelConfig config_;
  ResidentWeights store_;
  ExpertGemm expert_gemm_ = ExpertGemm::kAuto;
  DeviceBuffer inv_freq_;
  RopeTable rope_;
  WeightRef embed_, final_norm_, lm_head_;
  std::vector<Layer> layers_;
};

}  // namespace expertd::engine

#endif  // EXPERTD_ENGINE_MODEL_MODEL_H_
