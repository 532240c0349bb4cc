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
  MlaActivations mla;
  std::vector<float> x_mid, rstd2, h2;
  FeedForwardActivations ffn;
  DeviceReservation held;  // the bytes above, outside ffn (which holds its own)
};

namespace {

template <typename T>
int64_t Bytes(const std::vector<T>& v) {
  return static_cast<int64_t>(v.size() * sizeof(T));
}

int64_t AttentionBytes(const AttentionActivations& a) {
  return Bytes(a.q_lin) + Bytes(a.k_lin) + Bytes(a.q_rstd) + Bytes(a.k_rstd) +
         Bytes(a.q_clamped) + Bytes(a.k_clamped) + Bytes(a.q) + Bytes(a.k) + Bytes(a.v) +
         Bytes(a.probs) + Bytes(a.attn);
}

int64_t MlaBytes(const MlaActivations& a) {
  return Bytes(a.q_a) + Bytes(a.q_a_rstd) + Bytes(a.q_a_normed) + Bytes(a.kv_a) + Bytes(a.c_rstd) +
         Bytes(a.c) + Bytes(a.q) + Bytes(a.k) + Bytes(a.v) + Bytes(a.probs) + Bytes(a.attn);
}

}  // namespace

absl::StatusOr<std::unique_ptr<TrainModel>> TrainModel::Load(const std::string& dir) {
  return Load(dir, models::CheckpointOptions{});
}

absl::StatusOr<std::unique_ptr<TrainModel>> TrainModel::Load(
    const std::string& dir, const models::CheckpointOptions& options) {
  ASSIGN_OR_RETURN(std::unique_ptr<models::Checkpoint> ckpt,
                   models::Checkpoint::Open(dir, options));
  RETURN_IF_ERROR(ckpt->ValidateAgainstConfig());
  std::unique_ptr<TrainModel> m(new TrainModel());
  m->config_ = ckpt->config();
  const models::ModelConfig& c = m->config_;
  if (c.router_scoring == models::RouterScoring::kSigmoid && c.topk_method != "noaux_tc") {
    return absl::UnimplementedError(absl::StrCat(dir, ": training with topk_method \"",
                                                 c.topk_method, "\" is not supported yet"));
  }
  if (c.architecture == models::Architecture::kGptOss) {
    return absl::UnimplementedError(dir + ": training GptOssForCausalLM is not supported yet");
  }
  if (c.sliding_window > 0) {
    return absl::UnimplementedError(
        absl::StrCat(dir, ": training with sliding_window ", c.sliding_window,
                     " is not supported yet (the training attention reads every key)"));
  }
  if (c.uses_mla()) {
    RETURN_IF_ERROR(MakeMlaRopeTables(c, 1).status());
  } else if (c.rope_scaling.type != models::RopeScalingType::kNone) {
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

absl::Status TrainModel::AddParameters(std::vector<Parameter> extra) {
  for (Parameter& p : extra) {
    if (index_.count(p.name)) return absl::InvalidArgumentError("duplicate parameter " + p.name);
    index_[p.name] = params_.size();
    params_.push_back(std::move(p));
  }
  return Bind();
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

absl::Status BindMla(TrainModel* m, const models::ModelConfig& c, int64_t l, MlaParams* a) {
  if (c.q_lora_rank > 0) {
    RETURN_IF_ERROR(Lookup(m, AttentionName(l, AttnTensor::kQAProj), true, &a->q_a));
    RETURN_IF_ERROR(Lookup(m, AttentionName(l, AttnTensor::kQALayerNorm), true, &a->q_a_norm));
    RETURN_IF_ERROR(Lookup(m, AttentionName(l, AttnTensor::kQBProj), true, &a->q_b));
  } else {
    RETURN_IF_ERROR(Lookup(m, AttentionName(l, AttnTensor::kQProj), true, &a->q_proj));
  }
  RETURN_IF_ERROR(Lookup(m, AttentionName(l, AttnTensor::kKvAProjWithMqa), true, &a->kv_a));
  RETURN_IF_ERROR(Lookup(m, AttentionName(l, AttnTensor::kKvALayerNorm), true, &a->kv_a_norm));
  RETURN_IF_ERROR(Lookup(m, AttentionName(l, AttnTensor::kKvBProj), true, &a->kv_b));
  return Lookup(m, AttentionName(l, AttnTensor::kOProj), true, &a->o);
}

absl::Status BindFeedForward(TrainModel* m, const models::ModelConfig& c, int64_t l,
                             FeedForwardParams* f) {
  f->moe = c.is_moe_layer[l];
  if (!f->moe) {
    return BindMlp(m, DenseMlpWeightName(l, ExpertProj::kGate),
                   DenseMlpWeightName(l, ExpertProj::kUp), DenseMlpWeightName(l, ExpertProj::kDown),
                   &f->dense);
  }
  f->top_k = c.num_experts_per_tok;
  // Mixtral always renormalises; the others follow norm_topk_prob.
  f->norm_topk_prob = c.norm_topk_prob || c.architecture == models::Architecture::kMixtral;
  RETURN_IF_ERROR(Lookup(m, RouterName(c, l), true, &f->router));
  if (c.router_scoring == models::RouterScoring::kSigmoid) {
    f->norm_topk_prob = c.norm_topk_prob;
    RETURN_IF_ERROR(Lookup(m, models::RouterBiasName(l), true, &f->score_bias));
    f->n_group = c.n_group;
    f->topk_group = c.topk_group;
    f->routed_scaling_factor = static_cast<float>(c.routed_scaling_factor);
    f->idle_experts_skip_gradient = true;  // moe_infer skips an expert with no token
  }
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
    if (c.uses_mla()) {
      RETURN_IF_ERROR(BindMla(this, c, l, &lp.mla));
    } else {
      RETURN_IF_ERROR(BindAttention(this, c, l, &lp.attn));
    }
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
      return absl::InvalidArgumentError(
          absl::StrCat("label ", label, " at position ", i, " is neither -100 nor a token id"));
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

// Everything one Step shares between its forward and backward halves.
struct TrainModel::StepState {
  int64_t n = 0, h = 0;
  float eps = 0;
  AttentionDims dims;
  RopeTables rope;
  bool mla = false;
  MlaDims mla_dims;
  std::vector<LayerActivations> layers;
  std::vector<float> x_final, h_final, rstd_final;  // before / after the final norm
};

absl::Status TrainModel::LayerForward(const LayerParams& lp, StepState* st,
                                      std::vector<float>* x, LayerActivations* a,
                                      ThreadPool* pool) {
  const int64_t n = st->n, h = st->h;
  std::vector<float> tmp(n * h);
  a->x_in = *x;
  a->h1.resize(n * h);
  a->rstd1.resize(n);
  RmsNormForward(x->data(), lp.input_norm->value.data(), st->eps, a->h1.data(), a->rstd1.data(), n,
                 h, pool);
  if (st->mla) {
    MlaForward(lp.mla, st->mla_dims, st->rope, a->h1.data(), &a->mla, tmp.data(), pool);
  } else {
    AttentionBlockForward(lp.attn, st->dims, st->rope, a->h1.data(), &a->attn, tmp.data(), pool);
  }
  a->x_mid.resize(n * h);
  Add(a->x_in.data(), tmp.data(), a->x_mid.data(), n * h);
  a->h2.resize(n * h);
  a->rstd2.resize(n);
  RmsNormForward(a->x_mid.data(), lp.post_attention_norm->value.data(), st->eps, a->h2.data(),
                 a->rstd2.data(), n, h, pool);
  RETURN_IF_ERROR(a->held.Acquire(
      device_,
      Bytes(a->x_in) + Bytes(a->rstd1) + Bytes(a->h1) + AttentionBytes(a->attn) +
          MlaBytes(a->mla) + Bytes(a->x_mid) + Bytes(a->rstd2) + Bytes(a->h2),
      absl::StrCat("the attention activations of layer ", a - st->layers.data())));
  RETURN_IF_ERROR(executor_->Forward(lp.ffn, a->h2.data(), n, h, &a->ffn, tmp.data(), pool));
  Add(a->x_mid.data(), tmp.data(), x->data(), n * h);
  return absl::OkStatus();
}

absl::Status TrainModel::LayerBackward(LayerParams& lp, const StepState& st,
                                       const LayerActivations& a,
                                       const std::vector<float>& aux_dprob,
                                       std::vector<float>* dx, ThreadPool* pool) {
  const int64_t n = st.n, h = st.h;
  // x_out = x_mid + ffn(norm2(x_mid)): *dx is d x_out, and becomes d x_mid.
  std::vector<float> dh(n * h, 0.0f);
  RETURN_IF_ERROR(executor_->Backward(lp.ffn, a.h2.data(), a.ffn, dx->data(),
                                      lp.ffn.moe ? aux_dprob : std::vector<float>{}, n, h,
                                      dh.data(), pool));
  RmsNormBackward(a.x_mid.data(), lp.post_attention_norm->value.data(), a.rstd2.data(), dh.data(),
                  dx->data(), lp.post_attention_norm->GradForAccumulation(), n, h, pool);
  // x_mid = x_in + attn(norm1(x_in)): *dx becomes d x_in.
  std::fill(dh.begin(), dh.end(), 0.0f);
  if (st.mla) {
    MlaBackward(lp.mla, st.mla_dims, st.rope, a.h1.data(), a.mla, dx->data(), dh.data(), pool);
  } else {
    AttentionBlockBackward(lp.attn, st.dims, st.rope, a.h1.data(), a.attn, dx->data(), dh.data(),
                           pool);
  }
  RmsNormBackward(a.x_in.data(), lp.input_norm->value.data(), a.rstd1.data(), dh.data(), dx->data(),
                  lp.input_norm->GradForAccumulation(), n, h, pool);
  return absl::OkStatus();
}

namespace {

// Labels shifted as HF does: row t of a sequence predicts token t + 1; the
// last row of each sequence predicts nothing.
std::vector<int32_t> ShiftedTargets(const TrainBatch& batch, int64_t* predicted) {
  const std::vector<int32_t>& labels = batch.labels.empty() ? batch.input_ids : batch.labels;
  const int64_t n = batch.batch * batch.seq_len, t = batch.seq_len;
  std::vector<int32_t> targets(n, kIgnoreIndex);
  *predicted = 0;
  for (int64_t r = 0; r < n; ++r) {
    if (r % t == t - 1) continue;
    targets[r] = labels[r + 1];
    *predicted += targets[r] != kIgnoreIndex;
  }
  return targets;
}

}  // namespace

absl::Status TrainModel::Forward(const TrainBatch& batch, StepState* st, ThreadPool* pool) {
  const models::ModelConfig& c = config_;
  st->n = batch.batch * batch.seq_len;
  st->h = c.hidden_size;
  st->eps = static_cast<float>(c.rms_norm_eps);
  st->dims = AttentionDims{batch.batch,
                           batch.seq_len,
                           c.hidden_size,
                           c.num_attention_heads,
                           c.num_key_value_heads,
                           c.head_dim,
                           c.qk_norm,
                           st->eps,
                           static_cast<float>(c.clip_qkv)};
  st->mla = c.uses_mla();
  if (st->mla) {
    st->mla_dims = MakeMlaDims(c, batch.batch, batch.seq_len);
    // Checked at Load: the config's rope_scaling is one MLA supports.
    st->rope = *MakeMlaRopeTables(c, batch.seq_len);
  } else {
    st->rope = MakeRopeTables(batch.seq_len, c.head_dim, c.rope_theta);
  }
  const int64_t n = st->n, h = st->h;
  std::vector<float>& x = st->x_final;
  x.resize(n * h);
  for (int64_t r = 0; r < n; ++r) {
    std::memcpy(&x[r * h], &embed_->value[batch.input_ids[r] * h], h * sizeof(float));
  }
  st->layers.resize(layers_.size());
  for (size_t l = 0; l < layers_.size(); ++l) {
    RETURN_IF_ERROR(LayerForward(layers_[l], st, &x, &st->layers[l], pool));
  }
  st->h_final.resize(n * h);
  st->rstd_final.resize(n);
  RmsNormForward(x.data(), final_norm_->value.data(), st->eps, st->h_final.data(),
                 st->rstd_final.data(), n, h, pool);
  return absl::OkStatus();
}

std::vector<float> TrainModel::AuxLossAndGradient(const StepState& st, float loss_scale,
                                                  float* aux) const {
  std::vector<const FeedForwardActivations*> moe;
  for (size_t l = 0; l < layers_.size(); ++l) {
    if (layers_[l].ffn.moe) moe.push_back(&st.layers[l].ffn);
  }
  *aux = 0.0f;
  // DeepSeek's published code has no auxiliary loss.
  if (moe.empty() || config_.router_scoring != models::RouterScoring::kSoftmax) return {};
  const models::ModelConfig& c = config_;
  std::vector<double> count;
  *aux = static_cast<float>(AuxLoss(moe, st.n, c.num_experts, &count));
  // d aux / d prob[row][e] = E * (count[e] / R) / R for every row of every MoE layer.
  const double rows = static_cast<double>(st.n * moe.size());
  std::vector<float> dprob(c.num_experts);
  for (int64_t e = 0; e < c.num_experts; ++e) {
    dprob[e] = static_cast<float>(static_cast<double>(loss_scale) * c.router_aux_loss_coef *
                                  c.num_experts * count[e] / (rows * rows));
  }
  return dprob;
}

absl::StatusOr<std::vector<TrainModel::RouterTrace>> TrainModel::TraceRouting(
    const TrainBatch& batch, ThreadPool* pool) {
  RETURN_IF_ERROR(ValidateBatch(batch));
  StepState st;
  RETURN_IF_ERROR(Forward(batch, &st, pool));
  std::vector<RouterTrace> traces(layers_.size());
  for (size_t l = 0; l < layers_.size(); ++l) {
    LayerActivations& a = st.layers[l];
    traces[l].router_input = std::move(a.h2);
    if (!layers_[l].ffn.moe) continue;
    traces[l].probs = std::move(a.ffn.probs);
    traces[l].topk_ids = std::move(a.ffn.topk_ids);
  }
  return traces;
}

absl::StatusOr<LossBreakdown> TrainModel::Step(const TrainBatch& batch, bool backward,
                                               float loss_scale, ThreadPool* pool,
                                               std::vector<float>* logits_out) {
  RETURN_IF_ERROR(ValidateBatch(batch));
  LossBreakdown loss;
  const std::vector<int32_t> targets = ShiftedTargets(batch, &loss.predicted_tokens);
  if (loss.predicted_tokens == 0) return absl::InvalidArgumentError("the batch predicts no token");
  StepState st;
  RETURN_IF_ERROR(Forward(batch, &st, pool));
  const int64_t n = st.n, h = st.h, vocab = config_.vocab_size;
  DeviceReservation logits_held;
  RETURN_IF_ERROR(logits_held.Acquire(
      device_, (backward ? 2 : 1) * n * vocab * static_cast<int64_t>(sizeof(float)),
      "the LM head's logits"));
  std::vector<float> logits(n * vocab);
  LinearForward(st.h_final.data(), lm_head_->value.data(), nullptr, logits.data(), n, h, vocab,
                pool);
  if (logits_out != nullptr) *logits_out = logits;
  std::vector<float> dlogits(backward ? n * vocab : 0);
  const float ce_scale = loss_scale / static_cast<float>(loss.predicted_tokens);
  const double ce_sum = CrossEntropy(logits.data(), targets.data(), n, vocab, ce_scale,
                                     backward ? dlogits.data() : nullptr, pool);
  loss.ce = static_cast<float>(ce_sum / static_cast<double>(loss.predicted_tokens));
  const std::vector<float> aux_dprob = AuxLossAndGradient(st, loss_scale, &loss.aux);
  loss.total = loss.ce + static_cast<float>(config_.router_aux_loss_coef) * loss.aux;
  if (!backward) return loss;

  std::vector<float> dhf(n * h, 0.0f), dx(n * h, 0.0f);
  LinearBackward(st.h_final.data(), lm_head_->value.data(), dlogits.data(), dhf.data(),
                 lm_head_->GradForAccumulation(), nullptr, n, h, vocab, pool);
  RmsNormBackward(st.x_final.data(), final_norm_->value.data(), st.rstd_final.data(), dhf.data(),
                  dx.data(), final_norm_->GradForAccumulation(), n, h, pool);
  for (size_t l = layers_.size(); l-- > 0;) {
    RETURN_IF_ERROR(LayerBackward(layers_[l], st, st.layers[l], aux_dprob, &dx, pool));
    st.layers[l].held.Reset();
  }
  if (float* de = embed_->GradForAccumulation()) {
    EmbeddingBackward(batch.input_ids.data(), dx.data(), n, h, padding_idx_, de);
  }
  return loss;
}

}  // namespace expertd::train
