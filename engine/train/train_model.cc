#include "engine/train/train_model.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "engine/train/ops.h"
#include "models/checkpoint/checkpoint.h"
#include "models/checkpoint/tensor_names.h"
#include "models/dtype/dtype.h"

namespace expertd::train {

using models::AttnTensor;
using models::ExpertProj;

struct TrainModel::LayerActivations {
  std::vector<float> x_in, rstd1, h1;
  AttentionActivations attn;
  std::vector<float> x_mid, rstd2, h2;
  FeedForwardActivations ffn;
};

absl::StatusOr<std::unique_ptr<TrainModel>> TrainModel::Load(const std::string& dir) {
  ASSIGN_OR_RETURN(std::unique_ptr<models::Checkpoint> ckpt, models::Checkpoint::Open(dir));
  RETURN_IF_ERROR(ckpt->ValidateAgainstConfig());
  std::unique_ptr<TrainModel> m(new TrainModel());
  m->config_ = ckpt->config();
  const models::ModelConfig& c = m->config_;
  if (c.uses_mla() || c.router_scoring != models::RouterScoring::kSoftmax) {
    return absl::UnimplementedError(absl::StrCat(
        dir, ": training ", models::ArchitectureName(c.architecture), " is not supported yet"));
  }
  if (c.rope_scaling.type != models::RopeScalingType::kNone) {
    return absl::UnimplementedError(dir + ": training with rope_scaling is not supported yet");
  }
  // HF builds nn.Embedding(padding_idx=config.pad_token_id) from config.json
  // alone (generation_config.json does not count).
  ASSIGN_OR_RETURN(models::ModelConfig raw, models::LoadModelConfig(dir + "/config.json"));
  m->padding_idx_ = raw.pad_token_id;
  for (const std::string& name : ckpt->Names()) {
    ASSIGN_OR_RETURN(models::TensorView view, ckpt->Get(name));
    Parameter p;
    p.name = name;
    p.shape = view.shape;
    p.dtype = view.dtype;
    p.value.resize(view.numel());
    models::ConvertToF32(view.dtype, view.data, p.value.data(), p.value.size());
    m->params_.push_back(std::move(p));
  }
  for (size_t i = 0; i < m->params_.size(); ++i) m->index_[m->params_[i].name] = i;
  RETURN_IF_ERROR(m->Bind());
  m->executor_ = std::make_unique<InMemoryFeedForwardExecutor>();
  return m;
}

Parameter* TrainModel::Find(const std::string& name) {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &params_[it->second];
}

namespace {

// Looks up `name`; `*out` stays null when absent and !required.
absl::Status Lookup(TrainModel* m, const std::string& name, bool required, Parameter** out) {
  *out = m->Find(name);
  if (*out == nullptr && required) {
    return absl::InvalidArgumentError("checkpoint has no tensor " + name);
  }
  return absl::OkStatus();
}

absl::Status BindMlp(TrainModel* m, const std::string& gate, const std::string& up,
                     const std::string& down, MlpParams* p) {
  RETURN_IF_ERROR(Lookup(m, gate, true, &p->gate));
  RETURN_IF_ERROR(Lookup(m, up, true, &p->up));
  return Lookup(m, down, true, &p->down);
}

absl::Status BindAttention(TrainModel* m, const models::ModelConfig& c, int64_t l,
                           AttentionParams* a) {
  RETURN_IF_ERROR(Lookup(m, AttentionName(l, AttnTensor::kQProj), true, &a->q));
  RETURN_IF_ERROR(Lookup(m, AttentionName(l, AttnTensor::kKProj), true, &a->k));
  RETURN_IF_ERROR(Lookup(m, AttentionName(l, AttnTensor::kVProj), true, &a->v));
  RETURN_IF_ERROR(Lookup(m, AttentionName(l, AttnTensor::kOProj), true, &a->o));
  const bool bias = c.attention_bias;
  RETURN_IF_ERROR(Lookup(m, AttentionName(l, AttnTensor::kQBias), bias, &a->q_bias));
  RETURN_IF_ERROR(Lookup(m, AttentionName(l, AttnTensor::kKBias), bias, &a->k_bias));
  RETURN_IF_ERROR(Lookup(m, AttentionName(l, AttnTensor::kVBias), bias, &a->v_bias));
  const bool norm = c.qk_norm != models::QkNorm::kNone;
  if (!norm) return absl::OkStatus();
  RETURN_IF_ERROR(Lookup(m, AttentionName(l, AttnTensor::kQNorm), true, &a->q_norm));
  return Lookup(m, AttentionName(l, AttnTensor::kKNorm), true, &a->k_norm);
}

absl::Status BindFeedForward(TrainModel* m, const models::ModelConfig& c, int64_t l,
                             FeedForwardParams* f) {
  f->moe = c.is_moe_layer[l];
  if (!f->moe) {
    return BindMlp(m, DenseMlpWeightName(l, ExpertProj::kGate),
                   DenseMlpWeightName(l, ExpertProj::kUp),
                   DenseMlpWeightName(l, ExpertProj::kDown), &f->dense);
  }
  f->top_k = c.num_experts_per_tok;
  // Mixtral always renormalises; the others follow norm_topk_prob.
  f->norm_topk_prob = c.norm_topk_prob || c.architecture == models::Architecture::kMixtral;
  RETURN_IF_ERROR(Lookup(m, RouterName(c, l), true, &f->router));
  f->experts.resize(c.num_experts);
  for (int64_t e = 0; e < c.num_experts; ++e) {
    RETURN_IF_ERROR(BindMlp(m, ExpertWeightName(c, l, e, ExpertProj::kGate),
                            ExpertWeightName(c, l, e, ExpertProj::kUp),
                            ExpertWeightName(c, l, e, ExpertProj::kDown), &f->experts[e]));
  }
  if (c.shared_expert_intermediate_size > 0) {
    RETURN_IF_ERROR(BindMlp(m, SharedExpertWeightName(c, l, ExpertProj::kGate),
                            SharedExpertWeightName(c, l, ExpertProj::kUp),
                            SharedExpertWeightName(c, l, ExpertProj::kDown), &f->shared));
    if (c.shared_expert_gated) {
      RETURN_IF_ERROR(Lookup(m, models::SharedExpertGateName(l), true, &f->shared_gate));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status TrainModel::Bind() {
  const models::ModelConfig& c = config_;
  RETURN_IF_ERROR(Lookup(this, models::EmbedTokensName(), true, &embed_));
  RETURN_IF_ERROR(Lookup(this, models::FinalNormName(), true, &final_norm_));
  RETURN_IF_ERROR(Lookup(this, models::LmHeadName(c), true, &lm_head_));
  layers_.resize(c.num_hidden_layers);
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    LayerParams& lp = layers_[l];
    RETURN_IF_ERROR(Lookup(this, models::InputNormName(l), true, &lp.input_norm));
    RETURN_IF_ERROR(Lookup(this, models::PostAttentionNormName(l), true, &lp.post_attention_norm));
    RETURN_IF_ERROR(BindAttention(this, c, l, &lp.attn));
    RETURN_IF_ERROR(BindFeedForward(this, c, l, &lp.ffn));
  }
  return absl::OkStatus();
}

absl::Status TrainModel::ValidateBatch(const TrainBatch& batch) const {
  if (batch.batch <= 0 || batch.seq_len < 2) {
    return absl::InvalidArgumentError("a batch needs at least one sequence of at least 2 tokens");
  }
  const size_t n = static_cast<size_t>(batch.batch * batch.seq_len);
  if (batch.input_ids.size() != n || (!batch.labels.empty() && batch.labels.size() != n)) {
    return absl::InvalidArgumentError("input_ids/labels do not match batch x seq_len");
  }
  if (batch.seq_len > config_.max_position_embeddings) {
    return absl::InvalidArgumentError(absl::StrCat("sequence length ", batch.seq_len,
                                                   " exceeds max_position_embeddings ",
                                                   config_.max_position_embeddings));
  }
  for (size_t i = 0; i < n; ++i) {
    const int32_t id = batch.input_ids[i];
    if (id < 0 || id >= config_.vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat("token id ", id, " at position ", i,
                                                     " is outside [0, ", config_.vocab_size, ")"));
    }
    const int32_t label = batch.labels.empty() ? id : batch.labels[i];
    if (label != kIgnoreIndex && (label < 0 || label >= config_.vocab_size)) {
      return absl::InvalidArgumentError(absl::StrCat("label ", label, " at position ", i,
                                                     " is neither -100 nor a token id"));
    }
  }
  return absl::OkStatus();
}

namespace {

void Add(const float* a, const float* b, float* out, int64_t count) {
  for (int64_t i = 0; i < count; ++i) out[i] = a[i] + b[i];
}

// HF load_balancing_loss_func: rows = every token of every MoE layer;
// aux = E * sum_e (fraction of (row, rank) picks of e) * (mean router prob of e).
// Writes count[e] = picks of e summed over ranks.
double AuxLoss(const std::vector<const FeedForwardActivations*>& moe, int64_t n,
               int64_t num_experts, std::vector<double>* count) {
  count->assign(num_experts, 0.0);
  std::vector<double> prob_sum(num_experts, 0.0);
  for (const FeedForwardActivations* a : moe) {
    for (int32_t id : a->topk_ids) (*count)[id] += 1.0;
    for (int64_t r = 0; r < n; ++r) {
      for (int64_t e = 0; e < num_experts; ++e) prob_sum[e] += a->probs[r * num_experts + e];
    }
  }
  const double rows = static_cast<double>(n * moe.size());
  double aux = 0.0;
  for (int64_t e = 0; e < num_experts; ++e) aux += ((*count)[e] / rows) * (prob_sum[e] / rows);
  return aux * num_experts;
}

}  // namespace

absl::StatusOr<LossBreakdown> TrainModel::Step(const TrainBatch& batch, bool backward,
                                               float loss_scale, ThreadPool* pool) {
  RETURN_IF_ERROR(ValidateBatch(batch));
  const models::ModelConfig& c = config_;
  const int64_t b = batch.batch, t = batch.seq_len, n = b * t, h = c.hidden_size;
  const int64_t vocab = c.vocab_size;
  const std::vector<int32_t>& labels = batch.labels.empty() ? batch.input_ids : batch.labels;
  std::vector<int32_t> targets(n, kIgnoreIndex);  // labels shifted: row t predicts t + 1
  int64_t predicted = 0;
  for (int64_t r = 0; r < n; ++r) {
    if (r % t == t - 1) continue;
    targets[r] = labels[r + 1];
    predicted += targets[r] != kIgnoreIndex;
  }
  if (predicted == 0) return absl::InvalidArgumentError("the batch predicts no token");

  const AttentionDims dims{b, t, h, c.num_attention_heads, c.num_key_value_heads, c.head_dim,
                           c.qk_norm, static_cast<float>(c.rms_norm_eps),
                           static_cast<float>(c.clip_qkv)};
  const float eps = static_cast<float>(c.rms_norm_eps);
  const RopeTables rope = MakeRopeTables(t, c.head_dim, c.rope_theta);
  std::vector<float> x(n * h), tmp(n * h);
  for (int64_t r = 0; r < n; ++r) {
    std::memcpy(&x[r * h], &embed_->value[batch.input_ids[r] * h], h * sizeof(float));
  }
  std::vector<LayerActivations> acts(layers_.size());
  std::vector<const FeedForwardActivations*> moe_acts;
  for (size_t l = 0; l < layers_.size(); ++l) {
    const LayerParams& lp = layers_[l];
    LayerActivations& a = acts[l];
    a.x_in = x;
    a.h1.resize(n * h);
    a.rstd1.resize(n);
    RmsNormForward(x.data(), lp.input_norm->value.data(), eps, a.h1.data(), a.rstd1.data(), n, h,
                   pool);
    AttentionBlockForward(lp.attn, dims, rope, a.h1.data(), &a.attn, tmp.data(), pool);
    a.x_mid.resize(n * h);
    Add(a.x_in.data(), tmp.data(), a.x_mid.data(), n * h);
    a.h2.resize(n * h);
    a.rstd2.resize(n);
    RmsNormForward(a.x_mid.data(), lp.post_attention_norm->value.data(), eps, a.h2.data(),
                   a.rstd2.data(), n, h, pool);
    executor_->Forward(lp.ffn, a.h2.data(), n, h, &a.ffn, tmp.data(), pool);
    Add(a.x_mid.data(), tmp.data(), x.data(), n * h);
    if (lp.ffn.moe) moe_acts.push_back(&a.ffn);
  }
  std::vector<float> hf(n * h), rstdf(n), logits(n * vocab);
  RmsNormForward(x.data(), final_norm_->value.data(), eps, hf.data(), rstdf.data(), n, h, pool);
  LinearForward(hf.data(), lm_head_->value.data(), nullptr, logits.data(), n, h, vocab, pool);
  std::vector<float> dlogits(backward ? n * vocab : 0);
  const double ce_sum =
      CrossEntropy(logits.data(), targets.data(), n, vocab,
                   loss_scale / static_cast<float>(predicted), backward ? dlogits.data() : nullptr,
                   pool);
  LossBreakdown loss;
  loss.predicted_tokens = predicted;
  loss.ce = static_cast<float>(ce_sum / static_cast<double>(predicted));
  std::vector<float> aux_dprob;
  if (!moe_acts.empty()) {
    std::vector<double> count;
    loss.aux = static_cast<float>(AuxLoss(moe_acts, n, c.num_experts, &count));
    // d aux / d prob[row][e] = E * (count[e] / R) / R for every row of every MoE layer.
    const double rows = static_cast<double>(n * moe_acts.size());
    aux_dprob.resize(c.num_experts);
    for (int64_t e = 0; e < c.num_experts; ++e) {
      aux_dprob[e] = static_cast<float>(static_cast<double>(loss_scale) * c.router_aux_loss_coef *
                                        c.num_experts * count[e] / (rows * rows));
    }
  }
  loss.total = loss.ce + static_cast<float>(c.router_aux_loss_coef) * loss.aux;
  if (!backward) return loss;

  std::vector<float> dhf(n * h, 0.0f), dx(n * h, 0.0f);
  LinearBackward(hf.data(), lm_head_->value.data(), dlogits.data(), dhf.data(),
                 lm_head_->GradForAccumulation(), nullptr, n, h, vocab, pool);
  RmsNormBackward(x.data(), final_norm_->value.data(), rstdf.data(), dhf.data(), dx.data(),
                  final_norm_->GradForAccumulation(), n, h, pool);
  std::vector<float> dh(n * h);
  for (size_t li = layers_.size(); li-- > 0;) {
    LayerParams& lp = layers_[li];
    const LayerActivations& a = acts[li];
    // x_out = x_mid + ffn(norm2(x_mid)): dx is d x_out, and becomes d x_mid.
    std::fill(dh.begin(), dh.end(), 0.0f);
    executor_->Backward(lp.ffn, a.h2.data(), a.ffn, dx.data(), lp.ffn.moe ? aux_dprob
                                                                           : std::vector<float>{},
                        n, h, dh.data(), pool);
    RmsNormBackward(a.x_mid.data(), lp.post_attention_norm->value.data(), a.rstd2.data(),
                    dh.data(), dx.data(), lp.post_attention_norm->GradForAccumulation(), n, h,
                    pool);
    // x_mid = x_in + attn(norm1(x_in)): dx becomes d x_in.
    std::fill(dh.begin(), dh.end(), 0.0f);
    AttentionBlockBackward(lp.attn, dims, rope, a.h1.data(), a.attn, dx.data(), dh.data(), pool);
    RmsNormBackward(a.x_in.data(), lp.input_norm->value.data(), a.rstd1.data(), dh.data(),
                    dx.data(), lp.input_norm->GradForAccumulation(), n, h, pool);
  }
  if (float* de = embed_->GradForAccumulation()) {
    for (int64_t r = 0; r < n; ++r) {
      const int32_t id = batch.input_ids[r];
      if (id == padding_idx_) continue;  // nn.Embedding(padding_idx): no gradient
      for (int64_t k = 0; k < h; ++k) de[id * h + k] += dx[r * h + k];
    }
  }
  return loss;
}

}  // namespace expertd::train
