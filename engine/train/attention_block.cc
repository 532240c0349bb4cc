#include "engine/train/attention_block.h"

#include <algorithm>
#include <cmath>

#include "engine/train/linear.h"

namespace expertd::train {
namespace {

// Applies a q or k norm in place-free form: y = norm(x). rstd sized here.
void QkNormForward(const Parameter* w, const AttentionDims& d, int64_t heads, const float* x,
                   float* y, std::vector<float>* rstd, ThreadPool* pool) {
  const int64_t n = d.rows();
  if (d.qk_norm == models::QkNorm::kPerHead) {
    rstd->resize(n * heads);
    RmsNormForward(x, w->value.data(), d.norm_eps, y, rstd->data(), n * heads, d.head_dim, pool);
  } else {
    rstd->resize(n);
    RmsNormForward(x, w->value.data(), d.norm_eps, y, rstd->data(), n, heads * d.head_dim, pool);
  }
}

void QkNormBackward(Parameter* w, const AttentionDims& d, int64_t heads, const float* x,
                    const std::vector<float>& rstd, const float* dy, float* dx, ThreadPool* pool) {
  const int64_t n = d.rows();
  if (d.qk_norm == models::QkNorm::kPerHead) {
    RmsNormBackward(x, w->value.data(), rstd.data(), dy, dx, w->GradForAccumulation(), n * heads,
                    d.head_dim, pool);
  } else {
    RmsNormBackward(x, w->value.data(), rstd.data(), dy, dx, w->GradForAccumulation(), n,
                    heads * d.head_dim, pool);
  }
}

void Clamp(std::vector<float>* x, float c) {
  for (float& v : *x) v = std::min(std::max(v, -c), c);
}

// Zeroes the gradient where the forward clamp was active.
void ClampBackward(const std::vector<float>& clamped, float c, float* dx) {
  for (size_t i = 0; i < clamped.size(); ++i) {
    if (std::fabs(clamped[i]) >= c) dx[i] = 0.0f;
  }
}

}  // namespace

void AttentionBlockForward(const AttentionParams& p, const AttentionDims& d, const RopeTables& rope,
                           const float* x, AttentionActivations* a, float* out, ThreadPool* pool) {
  const int64_t n = d.rows(), qd = d.q_heads * d.head_dim, kd = d.kv_heads * d.head_dim;
  a->q_lin.resize(n * qd);
  a->k_lin.resize(n * kd);
  a->v.resize(n * kd);
  ParamLinearForward(*p.q, p.q_bias, x, a->q_lin.data(), n, pool);
  ParamLinearForward(*p.k, p.k_bias, x, a->k_lin.data(), n, pool);
  ParamLinearForward(*p.v, p.v_bias, x, a->v.data(), n, pool);
  a->q = a->q_lin;
  a->k = a->k_lin;
  if (d.qk_norm != models::QkNorm::kNone) {
    QkNormForward(p.q_norm, d, d.q_heads, a->q_lin.data(), a->q.data(), &a->q_rstd, pool);
    QkNormForward(p.k_norm, d, d.kv_heads, a->k_lin.data(), a->k.data(), &a->k_rstd, pool);
  }
  if (d.clip_qkv > 0.0f) {  // OLMoE clamps after the q/k norm
    Clamp(&a->q, d.clip_qkv);
    Clamp(&a->k, d.clip_qkv);
    Clamp(&a->v, d.clip_qkv);
    a->q_clamped = a->q;
    a->k_clamped = a->k;
  }
  RopeForward(rope, a->q.data(), d.batch, d.t, d.q_heads);
  RopeForward(rope, a->k.data(), d.batch, d.t, d.kv_heads);
  const AttentionShape shape{d.batch, d.t, d.q_heads, d.kv_heads, d.head_dim};
  a->probs.resize(d.batch * d.q_heads * d.t * d.t);
  a->attn.resize(n * qd);
  train::AttentionForward(shape, a->q.data(), a->k.data(), a->v.data(), a->probs.data(),
                          a->attn.data(), pool);
  ParamLinearForward(*p.o, nullptr, a->attn.data(), out, n, pool);
}

void AttentionBlockBackward(const AttentionParams& p, const AttentionDims& d,
                            const RopeTables& rope, const float* x, const AttentionActivations& a,
                            const float* dout, float* dx, ThreadPool* pool) {
  const int64_t n = d.rows(), qd = d.q_heads * d.head_dim, kd = d.kv_heads * d.head_dim;
  std::vector<float> dattn(n * qd, 0.0f);
  ParamLinearBackward(p.o, nullptr, a.attn.data(), dout, dattn.data(), n, pool);
  std::vector<float> dq(n * qd, 0.0f), dk(n * kd, 0.0f), dv(n * kd, 0.0f);
  const AttentionShape shape{d.batch, d.t, d.q_heads, d.kv_heads, d.head_dim};
  train::AttentionBackward(shape, a.q.data(), a.k.data(), a.v.data(), a.probs.data(), dattn.data(),
                           dq.data(), dk.data(), dv.data(), pool);
  RopeBackward(rope, dq.data(), d.batch, d.t, d.q_heads);
  RopeBackward(rope, dk.data(), d.batch, d.t, d.kv_heads);
  if (d.clip_qkv > 0.0f) {
    ClampBackward(a.q_clamped, d.clip_qkv, dq.data());
    ClampBackward(a.k_clamped, d.clip_qkv, dk.data());
    ClampBackward(a.v, d.clip_qkv, dv.data());
  }
  if (d.qk_norm != models::QkNorm::kNone) {
    std::vector<float> dq_lin(n * qd, 0.0f), dk_lin(n * kd, 0.0f);
    QkNormBackward(p.q_norm, d, d.q_heads, a.q_lin.data(), a.q_rstd, dq.data(), dq_lin.data(),
                   pool);
    QkNormBackward(p.k_norm, d, d.kv_heads, a.k_lin.data(), a.k_rstd, dk.data(), dk_lin.data(),
                   pool);
    dq.swap(dq_lin);
    dk.swap(dk_lin);
  }
  ParamLinearBackward(p.q, p.q_bias, x, dq.data(), dx, n, pool);
  ParamLinearBackward(p.k, p.k_bias, x, dk.data(), dx, n, pool);
  ParamLinearBackward(p.v, p.v_bias, x, dv.data(), dx, n, pool);
}

}  // namespace expertd::train
