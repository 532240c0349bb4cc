#include "engine/model/model.h"

#include "absl/strings/str_cat.h"
#include "base/log.h"
#include "base/status_macros.h"
#include "engine/model/mla_rope.h"
#include "engine/model/router.h"
#include "models/checkpoint/tensor_names.h"

namespace expertd::engine {

namespace {

// DeepSeek-V3: what its reference modeling code itself can run.
absl::Status CheckDeepseekSupported(const models::ModelConfig& c) {
  const std::string arch = models::ArchitectureName(c.architecture);
  if (!c.uses_mla()) return absl::UnimplementedError(arch + ": kv_lora_rank must be set (MLA)");
  if (c.router_scoring != models::RouterScoring::kSigmoid || c.topk_method != "noaux_tc") {
    return absl::UnimplementedError(
        arch + ": only scoring_func sigmoid with topk_method noaux_tc is supported");
  }
  const int64_t per_group = c.num_experts / c.n_group;
  if (per_group < 2 || c.topk_group * per_group < c.num_experts_per_tok) {
    return absl::UnimplementedError(
        absl::StrCat(arch, ": n_group ", c.n_group, " / topk_group ", c.topk_group,
                     " cannot select ", c.num_experts_per_tok, " of ", c.num_experts, " experts"));
  }
  if (c.qk_rope_head_dim % 2 != 0) return absl::UnimplementedError(arch + ": odd qk_rope_head_dim");
  if (c.attention_bias)
    return absl::UnimplementedError(arch + ": attention_bias is not supported with MLA");
  return ComputeMlaRopeTable(c).status();
}

}  // namespace

absl::Status CheckSupported(const models::ModelConfig& c) {
  const std::string arch = models::ArchitectureName(c.architecture);
  if (c.num_experts <= 0 || c.num_experts_per_tok <= 0 || c.num_experts_per_tok > c.num_experts ||
      c.num_experts_per_tok > 64) {
    return absl::UnimplementedError(absl::StrCat(arch, ": unsupported expert count ", c.num_experts,
                                                 " / top-k ", c.num_experts_per_tok));
  }
  if (c.architecture == models::Architecture::kDeepseekV3) return CheckDeepseekSupported(c);
  if (c.uses_mla() || c.router_scoring != models::RouterScoring::kSoftmax) {
    return absl::UnimplementedError(arch + ": MLA and sigmoid routing are DeepSeek-V3 only");
  }
  if (c.head_dim % 2 != 0)
    return absl::UnimplementedError(absl::StrCat(arch, ": odd head_dim ", c.head_dim));
  if (c.num_attention_heads % c.num_key_value_heads != 0) {
    return absl::UnimplementedError(
        absl::StrCat(arch, ": num_attention_heads not a multiple of num_key_value_heads"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Model>> Model::Create(Backend* backend, const WeightSource* source) {
  RETURN_IF_ERROR(CheckSupported(source->config()));
  const models::ModelConfig& c = source->config();
  if ((c.sliding_window > 0 || c.attention_sinks) && !backend->HasWindowedAttention()) {
    return absl::UnimplementedError(
        absl::StrCat(models::ArchitectureName(c.architecture), ": sliding_window ",
                     c.sliding_window, c.attention_sinks ? " and attention sinks need" : " needs",
                     " sliding-window attention, which the ", backend->name(),
                     " backend does not have; serve this model with --backend=cpu"));
  }
  std::unique_ptr<Model> model(new Model(backend, source));
  RETURN_IF_ERROR(model->Load());
  return model;
}

absl::Status Model::Load() {
  const models::ModelConfig& c = config_;
  const int64_t h = c.hidden_size;
  if (c.uses_mla()) {
    ASSIGN_OR_RETURN(rope_, ComputeMlaRopeTable(c));
  } else {
    rope_ = ComputeRopeTable(c.rope_scaling, c.rope_theta, c.head_dim);
  }
  if (c.num_nextn_predict_layers > 0) {
    EXPERTD_LOG(
        Info, "multi-token-prediction layers are not used for decoding; their tensors are ignored")
        .With("architecture", models::ArchitectureName(c.architecture))
        .With("num_nextn_predict_layers", c.num_nextn_predict_layers);
  }
  const uint64_t freq_bytes = rope_.inv_freq.size() * sizeof(float);
  ASSIGN_OR_RETURN(inv_freq_, backend_->Allocate(freq_bytes));
  RETURN_IF_ERROR(backend_->CopyToDevice(inv_freq_.data(), rope_.inv_freq.data(), freq_bytes));
  const DeviceRope rope{inv_freq_.as<float>(), rope_.rotary_dim, rope_.attention_factor};

  ASSIGN_OR_RETURN(embed_, store_.Load(models::EmbedTokensName(), c.vocab_size, h));
  if (embed_.dtype == models::DType::kF8E4M3) {
    return absl::InvalidArgumentError(
        "an FP8 embedding table is not supported (FP8 checkpoints keep embed_tokens in bf16)");
  }
  ASSIGN_OR_RETURN(final_norm_, store_.Load(models::FinalNormName(), 1, h));
  ASSIGN_OR_RETURN(lm_head_, store_.Load(models::LmHeadName(c), c.vocab_size, h));
  for (int layer = 0; layer < c.num_hidden_layers; ++layer) {
    Layer l;
    ASSIGN_OR_RETURN(l.input_norm, store_.Load(models::InputNormName(layer), 1, h));
    ASSIGN_OR_RETURN(l.post_norm, store_.Load(models::PostAttentionNormName(layer), 1, h));
    if (c.uses_mla()) {
      ASSIGN_OR_RETURN(l.attention, CreateMlaAttention(&store_, c, layer, rope));
    } else {
      ASSIGN_OR_RETURN(l.attention, CreateGqaAttention(&store_, c, layer, rope));
    }
    if (c.is_moe_layer[layer]) {
      std::unique_ptr<Router> router;
      if (c.router_scoring == models::RouterScoring::kSigmoid) {
        ASSIGN_OR_RETURN(router, CreateGroupedSigmoidRouter(&store_, c, layer));
      } else {
        ASSIGN_OR_RETURN(router, CreateSoftmaxTopKRouter(&store_, c, layer));
      }
      ASSIGN_OR_RETURN(l.ffn, CreateMoeBlock(&store_, c, layer, std::move(router)));
    } else {
      ASSIGN_OR_RETURN(l.ffn, CreateDenseMlp(&store_, c, layer));
    }
    layers_.push_back(std::move(l));
  }
  return absl::OkStatus();
}

RouterInput Model::MakeRouterInput(int layer, const float* x, int64_t rows) const {
  RouterInput in;
  in.layer = layer;
  in.hidden = x;
  in.rows = rows;
  in.hidden_size = config_.hidden_size;
  for (size_t next = layer + 1; next < layers_.size(); ++next) {
    if (Router* r = layers_[next].ffn->router()) {
      in.next_moe_layer = static_cast<int>(next);
      in.next_router = r->gate_weight();
      break;
    }
  }
  return in;
}

absl::Status Model::Forward(const StepBatch& batch, Workspace* ws, KvCache* kv,
                            ExpertProvider* experts, std::vector<RowRouting>* routing) {
  Backend* be = backend_;
  const int64_t rows = batch.rows, h = config_.hidden_size;
  const float eps = static_cast<float>(config_.rms_norm_eps);
  float* hidden = ws->f(Buf::kHidden);
  float* normed = ws->f(Buf::kNormed);
  be->Embedding(EmbeddingParams{ws->i32(Buf::kTokenIds), rows, embed_, hidden});
  if (routing != nullptr) routing->assign(layers_.size(), RowRouting{});
  LayerContext ctx{be, ws, &batch, kv, experts, 0, expert_gemm_};
  for (size_t i = 0; i < layers_.size(); ++i) {
    const Layer& l = layers_[i];
    ctx.layer = static_cast<int>(i);
    be->RmsNorm(RmsNormParams{hidden, h, normed, h, rows, h, l.input_norm, eps});
    l.attention->Forward(ctx, normed, hidden);
    be->RmsNorm(RmsNormParams{hidden, h, normed, h, rows, h, l.post_norm, eps});
    experts->OnRouterInput(MakeRouterInput(ctx.layer, normed, rows));
    RETURN_IF_ERROR(l.ffn->Forward(ctx, normed, hidden, routing ? &(*routing)[i] : nullptr));
  }
  float* last = ws->f(Buf::kLogitHidden);
  be->GatherRows(GatherRowsParams{hidden, h, ws->i32(Buf::kLogitIndex), last, batch.logit_rows, h});
  be->RmsNorm(RmsNormParams{last, h, last, h, batch.logit_rows, h, final_norm_, eps});
  MatmulParams head;
  head.x = last;
  head.x_stride = h;
  head.w = lm_head_;
  head.y = ws->f(Buf::kLogits);
  head.y_stride = config_.vocab_size;
  head.m = batch.logit_rows;
  be->Matmul(head);
  return absl::OkStatus();
}

}  // namespace expertd::engine
