// DeepSeek-V3's router: the gate matmul on the backend, the grouped selection
// (grouped_topk.h) on the host (a few hundred scores per token; the MoE block
// brings the ids to the host right after anyway), ids/weights back to the device.
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "engine/model/grouped_topk.h"
#include "engine/model/router.h"
#include "models/checkpoint/tensor_names.h"
#include "models/dtype/dtype.h"

namespace expertd::engine {
namespace {

class GroupedSigmoidRouter final : public Router {
 public:
  GroupedSigmoidRouter(WeightRef gate, std::vector<float> bias, const GroupedTopKConfig& config)
      : gate_(gate), bias_(std::move(bias)), config_(config) {}

  int64_t top_k() const override { return config_.top_k; }
  WeightRef gate_weight() const override { return gate_; }

  absl::Status Route(const LayerContext& ctx, const float* x, int32_t* ids,
                     float* weights) override {
    const int64_t rows = ctx.batch->rows, e = config_.num_experts, k = config_.top_k;
    float* logits = ctx.ws->f(Buf::kRouterLogits);
    MatmulParams m;
    m.x = x;
    m.x_stride = gate_.cols;
    m.w = gate_;
    m.y = logits;
    m.y_stride = e;
    m.m = rows;
    ctx.backend->Matmul(m);
    host_logits_.resize(rows * e);
    host_ids_.resize(rows * k);
    host_weights_.resize(rows * k);
    RETURN_IF_ERROR(
        ctx.backend->CopyToHost(host_logits_.data(), logits, host_logits_.size() * sizeof(float)));
    GroupedSigmoidTopK(config_, host_logits_.data(), bias_.data(), rows, host_ids_.data(),
                       host_weights_.data());
    RETURN_IF_ERROR(
        ctx.backend->CopyToDevice(ids, host_ids_.data(), host_ids_.size() * sizeof(int32_t)));
    return ctx.backend->CopyToDevice(weights, host_weights_.data(),
                                     host_weights_.size() * sizeof(float));
  }

 private:
  const WeightRef gate_;
  const std::vector<float> bias_;  // e_score_correction_bias, host fp32
  const GroupedTopKConfig config_;
  std::vector<float> host_logits_, host_weights_;  // engine-thread scratch
  std::vector<int32_t> host_ids_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Router>> CreateGroupedSigmoidRouter(ResidentWeights* store,
                                                                   const models::ModelConfig& c,
                                                                   int layer) {
  ASSIGN_OR_RETURN(WeightRef gate,
                   store->Load(models::RouterName(c, layer), c.num_experts, c.hidden_size));
  const std::string bias_name = models::RouterBiasName(layer);
  ASSIGN_OR_RETURN(models::TensorView view, store->source().Get(bias_name));
  if (view.numel() != c.num_experts) {
    return absl::InvalidArgumentError(absl::StrCat("tensor '", bias_name, "' has ", view.numel(),
                                                   " values, expected ", c.num_experts));
  }
  std::vector<float> bias(c.num_experts);
  models::ConvertToF32(view.dtype, view.data, bias.data(), bias.size());
  GroupedTopKConfig g;
  g.num_experts = c.num_experts;
  g.top_k = c.num_experts_per_tok;
  g.n_group = c.n_group;
  g.topk_group = c.topk_group;
  g.normalize = c.norm_topk_prob;
  g.routed_scaling_factor = static_cast<float>(c.routed_scaling_factor);
  return std::unique_ptr<Router>(new GroupedSigmoidRouter(gate, std::move(bias), g));
}

}  // namespace expertd::engine
