// Grouped-query attention, as Hugging Face's eager implementation computes it:
//   q = x Wq^T (+bq), k = x Wk^T (+bk), v = x Wv^T (+bv)
//   q/k RMSNorm: per head (Qwen3-MoE) or over the whole projection (OLMoE)
//   clip_qkv (OLMoE): clamp q, k, v to [-c, c]
//   RoPE on q, k at each token's position; append k, v to the KV cache
//   softmax(q k^T / sqrt(head_dim)) v over positions 0..pos (causal), or
//   the last sliding_window of them on a sliding-window layer
//   gpt-oss: a sink logit per head joins each softmax (AttentionParams::sinks)
//   residual += attn Wo^T (+bo)
#include <cmath>

#include "base/status_macros.h"
#include "engine/model/attention.h"
#include "models/checkpoint/tensor_names.h"

namespace expertd::engine {
namespace {

using models::AttnTensor;

class GqaAttention final : public AttentionLayer {
 public:
  GqaAttention(const models::ModelConfig& c, const DeviceRope& rope)
      : heads_(c.num_attention_heads),
        kv_heads_(c.num_key_value_heads),
        head_dim_(c.head_dim),
        hidden_(c.hidden_size),
        eps_(static_cast<float>(c.rms_norm_eps)),
        qk_norm_(c.qk_norm),
        clip_(static_cast<float>(c.clip_qkv)),
        rope_(rope) {}

  absl::Status Load(ResidentWeights* store, const models::ModelConfig& c, int layer) {
    window_ = c.AttentionWindow(layer);
    const int64_t qw = heads_ * head_dim_, kw = kv_heads_ * head_dim_;
    auto name = [&](AttnTensor t) { return models::AttentionName(layer, t); };
    ASSIGN_OR_RETURN(wq_, store->Load(name(AttnTensor::kQProj), qw, hidden_));
    ASSIGN_OR_RETURN(wk_, store->Load(name(AttnTensor::kKProj), kw, hidden_));
    ASSIGN_OR_RETURN(wv_, store->Load(name(AttnTensor::kVProj), kw, hidden_));
    ASSIGN_OR_RETURN(wo_, store->Load(name(AttnTensor::kOProj), hidden_, qw));
    if (c.attention_bias) {
      ASSIGN_OR_RETURN(bq_, store->Load(name(AttnTensor::kQBias), 1, qw));
      ASSIGN_OR_RETURN(bk_, store->Load(name(AttnTensor::kKBias), 1, kw));
      ASSIGN_OR_RETURN(bv_, store->Load(name(AttnTensor::kVBias), 1, kw));
    }
    if (c.attention_out_bias) {
      ASSIGN_OR_RETURN(bo_, store->Load(name(AttnTensor::kOBias), 1, hidden_));
    }
    if (c.attention_sinks) {
      ASSIGN_OR_RETURN(sinks_, store->Load(name(AttnTensor::kSinks), 1, heads_));
    }
    switch (qk_norm_) {
      case models::QkNorm::kNone:
        break;
      case models::QkNorm::kPerHead: {
        ASSIGN_OR_RETURN(q_norm_, store->Load(name(AttnTensor::kQNorm), 1, head_dim_));
        ASSIGN_OR_RETURN(k_norm_, store->Load(name(AttnTensor::kKNorm), 1, head_dim_));
        break;
      }
      case models::QkNorm::kWholeProjection: {
        ASSIGN_OR_RETURN(q_norm_, store->Load(name(AttnTensor::kQNorm), 1, qw));
        ASSIGN_OR_RETURN(k_norm_, store->Load(name(AttnTensor::kKNorm), 1, kw));
        break;
      }
    }
    return absl::OkStatus();
  }

  void Forward(const LayerContext& ctx, const float* x, float* residual) override {
    Backend* be = ctx.backend;
    Workspace* ws = ctx.ws;
    const int64_t rows = ctx.batch->rows;
    const int64_t qw = heads_ * head_dim_, kw = kv_heads_ * head_dim_;
    float* q = ws->f(Buf::kQ);
    float* k = ws->f(Buf::kK);
    float* v = ws->f(Buf::kV);
    Project(be, x, rows, wq_, bq_, q);
    Project(be, x, rows, wk_, bk_, k);
    Project(be, x, rows, wv_, bv_, v);
    NormQk(be, rows, q, k);
    if (clip_ > 0.0f) {
      be->Clamp(ClampParams{q, qw, rows, qw, clip_});
      be->Clamp(ClampParams{k, kw, rows, kw, clip_});
      be->Clamp(ClampParams{v, kw, rows, kw, clip_});
    }
    ApplyRope(be, ws, rows, q, heads_);
    ApplyRope(be, ws, rows, k, kv_heads_);
    AppendAndAttend(ctx, rows, q, k, v);
    MatmulParams o;
    o.x = ws->f(Buf::kAttn);
    o.x_stride = qw;
    o.w = wo_;
    o.y = residual;
    o.y_stride = hidden_;
    o.m = rows;
    o.bias = bo_;
    o.accumulate = true;  // residual + o_proj(attn), o_proj summed first
    be->Matmul(o);
  }

 private:
  void Project(Backend* be, const float* x, int64_t rows, const WeightRef& w, const WeightRef& b,
               float* y) {
    MatmulParams p;
    p.x = x;
    p.x_stride = hidden_;
    p.w = w;
    p.bias = b;
    p.y = y;
    p.y_stride = w.rows;
    p.m = rows;
    be->Matmul(p);
  }

  void NormQk(Backend* be, int64_t rows, float* q, float* k) {
    const int64_t qw = heads_ * head_dim_, kw = kv_heads_ * head_dim_;
    switch (qk_norm_) {
      case models::QkNorm::kNone:
        return;
      case models::QkNorm::kPerHead:
        be->RmsNorm(
            RmsNormParams{q, head_dim_, q, head_dim_, rows * heads_, head_dim_, q_norm_, eps_});
        be->RmsNorm(
            RmsNormParams{k, head_dim_, k, head_dim_, rows * kv_heads_, head_dim_, k_norm_, eps_});
        return;
      case models::QkNorm::kWholeProjection:
        be->RmsNorm(RmsNormParams{q, qw, q, qw, rows, qw, q_norm_, eps_});
        be->RmsNorm(RmsNormParams{k, kw, k, kw, rows, kw, k_norm_, eps_});
        return;
    }
  }

  void ApplyRope(Backend* be, Workspace* ws, int64_t rows, float* x, int64_t heads) {
    RopeParams p;
    p.x = x;
    p.row_stride = heads * head_dim_;
    p.rows = rows;
    p.heads = heads;
    p.head_dim = head_dim_;
    p.rotary_dim = rope_.rotary_dim;
    p.positions = ws->i32(Buf::kPositions);
    p.inv_freq = rope_.inv_freq;
    p.attention_factor = rope_.attention_factor;
    be->Rope(p);
  }

  void AppendAndAttend(const LayerContext& ctx, int64_t rows, const float* q, const float* k,
                       const float* v) {
    Backend* be = ctx.backend;
    Workspace* ws = ctx.ws;
    const int64_t qw = heads_ * head_dim_, kw = kv_heads_ * head_dim_;
    KvAppendParams a;
    a.k = k;
    a.k_stride = kw;
    a.v = v;
    a.v_stride = kw;
    a.rows = rows;
    a.kv_heads = kv_heads_;
    a.head_dim = head_dim_;
    a.slots = ws->i64(Buf::kSlotMap);
    a.k_cache = ctx.kv->k_pool(ctx.layer);
    a.v_cache = ctx.kv->v_pool(ctx.layer);
    be->KvAppend(a);
    AttentionParams p;
    p.q = q;
    p.q_stride = qw;
    p.out = ws->f(Buf::kAttn);
    p.out_stride = qw;
    p.rows = rows;
    p.heads = heads_;
    p.kv_heads = kv_heads_;
    p.head_dim = head_dim_;
    p.scale = 1.0f / std::sqrt(static_cast<float>(head_dim_));
    p.seq = ws->i32(Buf::kSeqIndex);
    p.pos = ws->i32(Buf::kPositions);
    p.block_tables = ws->i32(Buf::kBlockTables);
    p.max_blocks_per_seq = ctx.batch->max_blocks;
    p.block_size = ctx.kv->block_size();
    p.k_cache = a.k_cache;
    p.v_cache = a.v_cache;
    p.window = window_;
    p.sinks = sinks_;
    be->Attention(p);
  }

  // Constant after construction.
  const int64_t heads_, kv_heads_, head_dim_, hidden_;
  const float eps_;
  const models::QkNorm qk_norm_;
  const float clip_;
  const DeviceRope rope_;
  int64_t window_ = 0;  // AttentionParams::window of this layer
  WeightRef wq_, wk_, wv_, wo_, bq_, bk_, bv_, bo_, sinks_, q_norm_, k_norm_;
};

}  // namespace

KvWidths AttentionKvWidths(const models::ModelConfig& c) {
  if (c.uses_mla()) return KvWidths{c.kv_lora_rank + c.qk_rope_head_dim, 0};
  return KvWidths{c.num_key_value_heads * c.head_dim, c.num_key_value_heads * c.head_dim};
}

absl::StatusOr<std::unique_ptr<AttentionLayer>> CreateGqaAttention(
    ResidentWeights* store, const models::ModelConfig& config, int layer, const DeviceRope& rope) {
  auto attn = std::make_unique<GqaAttention>(config, rope);
  RETURN_IF_ERROR(attn->Load(store, config, layer));
  return std::unique_ptr<AttentionLayer>(std::move(attn));
}

}  // namespace expertd::engine
