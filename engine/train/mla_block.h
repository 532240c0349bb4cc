// DeepSeek-V3's multi-head latent attention for training, in the expanded
// form (per-head keys and values are materialised; the absorbed form only
// saves cache bytes at decode). With n = qk_nope_head_dim, r =
// qk_rope_head_dim, v = v_head_dim, L = kv_lora_rank, per token x:
//   q       = q_b(rmsnorm(q_a(x)))   (or q_proj(x) when q_lora_rank == 0)
//   [c, kr] = kv_a_proj_with_mqa(x); c = rmsnorm(c)  (eps 1e-6 for both norms,
//             as the reference builds them)
//   [k_nope_h, v_h] = kv_b(c) per head; k_pe = RoPE(kr), shared by all heads
//   q_h = [q_nope_h, RoPE(q_pe_h)], k_h = [k_nope_h, k_pe]
//   out = o_proj(causal softmax(scale * q_h . k_h) v_h)
// RoPE de-interleaves the r dims (pairs (2i, 2i+1) -> (i, i + r/2)) before a
// rotate-half rotation, as the reference; the tables carry YaRN's mscale.
#ifndef EXPERTD_ENGINE_TRAIN_MLA_BLOCK_H_
#define EXPERTD_ENGINE_TRAIN_MLA_BLOCK_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/train/ops.h"
#include "engine/train/parameter.h"
#include "models/config/model_config.h"

namespace expertd::train {

struct MlaParams {
  Parameter *q_a = nullptr, *q_a_norm = nullptr, *q_b = nullptr;  // q_lora_rank > 0
  Parameter* q_proj = nullptr;                                    // q_lora_rank == 0
  Parameter *kv_a = nullptr, *kv_a_norm = nullptr, *kv_b = nullptr, *o = nullptr;
};

struct MlaDims {
  int64_t batch = 0, t = 0, heads = 0;
  int64_t q_lora = 0, latent = 0, nope = 0, rope = 0, v = 0;
  float scale = 0.0f;  // softmax scale (multiplies the scores)
  int64_t rows() const { return batch * t; }
  int64_t qk_dim() const { return nope + rope; }
};

struct MlaActivations {
  std::vector<float> q_a, q_a_rstd, q_a_normed;  // (N, q_lora): with q_lora_rank only
  std::vector<float> kv_a, c_rstd, c;            // (N, L + r), (N), (N, L)
  std::vector<float> q, k, v;                    // (N, H, n + r), (N, H, n + r), (N, H, v)
  std::vector<float> probs;                      // (B, H, T, T)
  std::vector<float> attn;                       // (N, H * v)
};

// The dims of `config` for a batch of B sequences of T tokens.
MlaDims MakeMlaDims(const models::ModelConfig& config, int64_t batch, int64_t t);
// DeepSeek's rotary tables for positions [0, t) over qk_rope_head_dim: plain,
// or YaRN (DeepseekV3YarnRotaryEmbedding, fp32 steps as torch) with cos/sin
// times mscale(factor, mscale) / mscale(factor, mscale_all_dim).
// Unimplemented for other rope_scaling types.
absl::StatusOr<RopeTables> MakeMlaRopeTables(const models::ModelConfig& config, int64_t t);
// (n + r)^-0.5, times mscale(factor, mscale_all_dim)^2 under YaRN.
float MlaSoftmaxScale(const models::ModelConfig& config);

// out (N, hidden) = MLA(x). Writes out.
void MlaForward(const MlaParams& p, const MlaDims& d, const RopeTables& rope, const float* x,
                MlaActivations* a, float* out, ThreadPool* pool);
// dx (N, hidden) += d/dx of sum(dout * out); parameter gradients accumulate.
void MlaBackward(const MlaParams& p, const MlaDims& d, const RopeTables& rope, const float* x,
                 const MlaActivations& a, const float* dout, float* dx, ThreadPool* pool);

}  // namespace expertd::train

#endif  // EXPERTD_ENGINE_TRAIN_MLA_BLOCK_H_
