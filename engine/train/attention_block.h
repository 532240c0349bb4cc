// The attention half of a decoder layer for training: q/k/v projections
// (optional bias), optional OLMoE clip_qkv, optional q/k RMSNorm (per head as
// Qwen3-MoE, or over the whole projection as OLMoE), rotate-half RoPE,
// causal GQA softmax attention, o projection. Forward saves what backward
// needs.
#ifndef EXPERTD_ENGINE_TRAIN_ATTENTION_BLOCK_H_
#define EXPERTD_ENGINE_TRAIN_ATTENTION_BLOCK_H_

#include <cstdint>
#include <vector>

#include "engine/train/ops.h"
#include "engine/train/parameter.h"
#include "models/config/model_config.h"

namespace expertd::train {

struct AttentionParams {
  Parameter *q = nullptr, *k = nullptr, *v = nullptr, *o = nullptr;
  Parameter *q_bias = nullptr, *k_bias = nullptr, *v_bias = nullptr;  // or null
  Parameter *q_norm = nullptr, *k_norm = nullptr;                     // or null
};

struct AttentionDims {
  int64_t batch = 0, t = 0, hidden = 0, q_heads = 0, kv_heads = 0, head_dim = 0;
  models::QkNorm qk_norm = models::QkNorm::kNone;
  float norm_eps = 1e-6f;
  float clip_qkv = 0.0f;  // 0 = off
  int64_t rows() const { return batch * t; }
};

struct AttentionActivations {
  std::vector<float> q_lin, k_lin;          // projections (after clip), before q/k norm
  std::vector<float> q_rstd, k_rstd;        // q/k norm statistics
  std::vector<float> q_clamped, k_clamped;  // with clip_qkv: after the clamp, before RoPE
  std::vector<float> q, k, v;               // what attention consumed (normed, rotated)
  std::vector<float> probs;                 // (B,Hq,T,T)
  std::vector<float> attn;                  // (N, Hq*Dh) before o_proj
};

// out (N,H) = o_proj(attention(x)). Writes out.
void AttentionBlockForward(const AttentionParams& p, const AttentionDims& d, const RopeTables& rope,
                           const float* x, AttentionActivations* a, float* out, ThreadPool* pool);
// dx (N,H) += d/dx of sum(dout * out); parameter gradients accumulate.
void AttentionBlockBackward(const AttentionParams& p, const AttentionDims& d,
                            const RopeTables& rope, const float* x, const AttentionActivations& a,
                            const float* dout, float* dx, ThreadPool* pool);

}  // namespace expertd::train

#endif  // EXPERTD_ENGINE_TRAIN_ATTENTION_BLOCK_H_
