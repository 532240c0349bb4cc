#include "engine/train/mla_block.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "engine/train/linear.h"

namespace expertd::train {
namespace {

// The reference constructs q_a_layernorm and kv_a_layernorm without the
// config's rms_norm_eps.
constexpr float kLatentNormEps = 1e-6f;
constexpr double kPi = 3.14159265358979323846;

// yarn_get_mscale.
double YarnMscale(double scale, double mscale) {
  return scale <= 1.0 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0;
}

// yarn_find_correction_dim (Python floats: double).
double CorrectionDim(double rotations, int64_t dim, double theta, double max_pos) {
  return (dim * std::log(max_pos / (rotations * 2.0 * kPi))) / (2.0 * std::log(theta));
}

// Copies the r rope dims of `heads` heads from src (stride src_stride per
// row, head stride src_head) de-interleaved into dst (N, heads, r).
void Deinterleave(const float* src, int64_t src_stride, int64_t src_head, int64_t rows,
                  int64_t heads, int64_t r, float* dst) {
  const int64_t half = r / 2;
  for (int64_t n = 0; n < rows; ++n) {
    for (int64_t h = 0; h < heads; ++h) {
      const float* s = src + n * src_stride + h * src_head;
      float* o = dst + (n * heads + h) * r;
      for (int64_t i = 0; i < half; ++i) {
        o[i] = s[2 * i];
        o[half + i] = s[2 * i + 1];
      }
    }
  }
}

// The transpose of Deinterleave, accumulating: dst[2i] += src[i], ...
void InterleaveAdd(const float* src, int64_t rows, int64_t heads, int64_t r, float* dst,
                   int64_t dst_stride, int64_t dst_head) {
  const int64_t half = r / 2;
  for (int64_t n = 0; n < rows; ++n) {
    for (int64_t h = 0; h < heads; ++h) {
      const float* s = src + (n * heads + h) * r;
      float* o = dst + n * dst_stride + h * dst_head;
      for (int64_t i = 0; i < half; ++i) {
        o[2 * i] += s[i];
        o[2 * i + 1] += s[half + i];
      }
    }
  }
}

AttentionShape ShapeOf(const MlaDims& d) {
  AttentionShape s{d.batch, d.t, d.heads, d.heads, d.qk_dim()};
  s.v_dim = d.v;
  s.scale = d.scale;
  return s;
}

}  // namespace

MlaDims MakeMlaDims(const models::ModelConfig& c, int64_t batch, int64_t t) {
  MlaDims d;
  d.batch = batch;
  d.t = t;
  d.heads = c.num_attention_heads;
  d.q_lora = c.q_lora_rank;
  d.latent = c.kv_lora_rank;
  d.nope = c.qk_nope_head_dim;
  d.rope = c.qk_rope_head_dim;
  d.v = c.v_head_dim;
  d.scale = MlaSoftmaxScale(c);
  return d;
}

absl::StatusOr<RopeTables> MakeMlaRopeTables(const models::ModelConfig& c, int64_t t) {
  const int64_t dim = c.qk_rope_head_dim;
  const models::RopeScaling& s = c.rope_scaling;
  // base ** (arange(0, dim, 2) / dim) in fp32.
  std::vector<float> pos;
  for (int64_t i = 0; i < dim; i += 2) {
    const float exponent = static_cast<float>(i) / static_cast<float>(dim);
    pos.push_back(static_cast<float>(std::pow(c.rope_theta, static_cast<double>(exponent))));
  }
  std::vector<float> inv_freq;
  if (s.type == models::RopeScalingType::kNone) {
    for (float p : pos) inv_freq.push_back(1.0f / p);
    return MakeRopeTablesFromInvFreq(t, inv_freq, 1.0f);
  }
  if (s.type != models::RopeScalingType::kYarn) {
    return absl::UnimplementedError("training MLA supports only yarn rope_scaling (or none)");
  }
  const double max_pos = static_cast<double>(s.original_max_position_embeddings);
  const double low =
      std::max(0.0, std::floor(CorrectionDim(s.beta_fast, dim, c.rope_theta, max_pos)));
  double high = std::min(static_cast<double>(dim - 1),
                         std::ceil(CorrectionDim(s.beta_slow, dim, c.rope_theta, max_pos)));
  if (low == high) high += 0.001;  // yarn_linear_ramp_mask's guard
  const float factor = static_cast<float>(s.factor);
  const float span = static_cast<float>(high - low);
  for (size_t i = 0; i < pos.size(); ++i) {
    const float extra = 1.0f / pos[i];
    const float inter = 1.0f / (factor * pos[i]);
    const float ramp =
        std::clamp((static_cast<float>(i) - static_cast<float>(low)) / span, 0.0f, 1.0f);
    const float mask = 1.0f - ramp;
    inv_freq.push_back(inter * (1.0f - mask) + extra * mask);
  }
  const float attention_factor =
      static_cast<float>(YarnMscale(s.factor, s.mscale) / YarnMscale(s.factor, s.mscale_all_dim));
  return MakeRopeTablesFromInvFreq(t, inv_freq, attention_factor);
}

float MlaSoftmaxScale(const models::ModelConfig& c) {
  double scale = std::pow(static_cast<double>(c.qk_nope_head_dim + c.qk_rope_head_dim), -0.5);
  const models::RopeScaling& s = c.rope_scaling;
  if (s.type != models::RopeScalingType::kNone && s.mscale_all_dim != 0.0) {
    const double m = YarnMscale(s.factor, s.mscale_all_dim);
    scale = scale * m * m;
  }
  return static_cast<float>(scale);
}

void MlaForward(const MlaParams& p, const MlaDims& d, const RopeTables& rope, const float* x,
                MlaActivations* a, float* out, ThreadPool* pool) {
  const int64_t n = d.rows(), h = d.heads, qk = d.qk_dim(), kvw = d.latent + d.rope;
  std::vector<float> q(n * h * qk);
  if (p.q_a != nullptr) {
    a->q_a.resize(n * d.q_lora);
    a->q_a_normed.resize(n * d.q_lora);
    a->q_a_rstd.resize(n);
    ParamLinearForward(*p.q_a, nullptr, x, a->q_a.data(), n, pool);
    RmsNormForward(a->q_a.data(), p.q_a_norm->value.data(), kLatentNormEps, a->q_a_normed.data(),
                   a->q_a_rstd.data(), n, d.q_lora, pool);
    ParamLinearForward(*p.q_b, nullptr, a->q_a_normed.data(), q.data(), n, pool);
  } else {
    ParamLinearForward(*p.q_proj, nullptr, x, q.data(), n, pool);
  }
  a->kv_a.resize(n * kvw);
  ParamLinearForward(*p.kv_a, nullptr, x, a->kv_a.data(), n, pool);
  std::vector<float> c_raw(n * d.latent);
  for (int64_t r = 0; r < n; ++r) {
    std::memcpy(&c_raw[r * d.latent], &a->kv_a[r * kvw], d.latent * sizeof(float));
  }
  a->c.resize(n * d.latent);
  a->c_rstd.resize(n);
  RmsNormForward(c_raw.data(), p.kv_a_norm->value.data(), kLatentNormEps, a->c.data(),
                 a->c_rstd.data(), n, d.latent, pool);
  const int64_t kvb_w = h * (d.nope + d.v);
  std::vector<float> kvb(n * kvb_w);
  ParamLinearForward(*p.kv_b, nullptr, a->c.data(), kvb.data(), n, pool);
  std::vector<float> q_pe(n * h * d.rope), k_pe(n * d.rope);
  Deinterleave(q.data() + d.nope, h * qk, qk, n, h, d.rope, q_pe.data());
  Deinterleave(a->kv_a.data() + d.latent, kvw, 0, n, 1, d.rope, k_pe.data());
  RopeForward(rope, q_pe.data(), d.batch, d.t, h);
  RopeForward(rope, k_pe.data(), d.batch, d.t, 1);
  a->q.resize(n * h * qk);
  a->k.resize(n * h * qk);
  a->v.resize(n * h * d.v);
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t hh = 0; hh < h; ++hh) {
      float* qo = &a->q[(r * h + hh) * qk];
      float* ko = &a->k[(r * h + hh) * qk];
      const float* kv_row = &kvb[r * kvb_w + hh * (d.nope + d.v)];
      std::memcpy(qo, &q[(r * h + hh) * qk], d.nope * sizeof(float));
      std::memcpy(qo + d.nope, &q_pe[(r * h + hh) * d.rope], d.rope * sizeof(float));
      std::memcpy(ko, kv_row, d.nope * sizeof(float));
      std::memcpy(ko + d.nope, &k_pe[r * d.rope], d.rope * sizeof(float));
      std::memcpy(&a->v[(r * h + hh) * d.v], kv_row + d.nope, d.v * sizeof(float));
    }
  }
  a->probs.resize(d.batch * h * d.t * d.t);
  a->attn.resize(n * h * d.v);
  AttentionForward(ShapeOf(d), a->q.data(), a->k.data(), a->v.data(), a->probs.data(),
                   a->attn.data(), pool);
  ParamLinearForward(*p.o, nullptr, a->attn.data(), out, n, pool);
}

void MlaBackward(const MlaParams& p, const MlaDims& d, const RopeTables& rope, const float* x,
                 const MlaActivations& a, const float* dout, float* dx, ThreadPool* pool) {
  const int64_t n = d.rows(), h = d.heads, qk = d.qk_dim(), kvw = d.latent + d.rope;
  const int64_t kvb_w = h * (d.nope + d.v);
  std::vector<float> dattn(n * h * d.v, 0.0f);
  ParamLinearBackward(p.o, nullptr, a.attn.data(), dout, dattn.data(), n, pool);
  std::vector<float> dq_full(n * h * qk, 0.0f), dk_full(n * h * qk, 0.0f), dv(n * h * d.v, 0.0f);
  AttentionBackward(ShapeOf(d), a.q.data(), a.k.data(), a.v.data(), a.probs.data(), dattn.data(),
                    dq_full.data(), dk_full.data(), dv.data(), pool);
  // Split into q (N, H*qk) nope parts, the rope parts, and kv_b's output.
  std::vector<float> dq(n * h * qk, 0.0f), dkvb(n * kvb_w, 0.0f);
  std::vector<float> dq_pe(n * h * d.rope), dk_pe(n * d.rope, 0.0f);
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t hh = 0; hh < h; ++hh) {
      const float* gq = &dq_full[(r * h + hh) * qk];
      const float* gk = &dk_full[(r * h + hh) * qk];
      float* gkv = &dkvb[r * kvb_w + hh * (d.nope + d.v)];
      std::memcpy(&dq[(r * h + hh) * qk], gq, d.nope * sizeof(float));
      std::memcpy(&dq_pe[(r * h + hh) * d.rope], gq + d.nope, d.rope * sizeof(float));
      std::memcpy(gkv, gk, d.nope * sizeof(float));
      std::memcpy(gkv + d.nope, &dv[(r * h + hh) * d.v], d.v * sizeof(float));
      for (int64_t i = 0; i < d.rope; ++i) dk_pe[r * d.rope + i] += gk[d.nope + i];
    }
  }
  RopeBackward(rope, dq_pe.data(), d.batch, d.t, h);
  RopeBackward(rope, dk_pe.data(), d.batch, d.t, 1);
  InterleaveAdd(dq_pe.data(), n, h, d.rope, dq.data() + d.nope, h * qk, qk);
  std::vector<float> dkv_a(n * kvw, 0.0f);
  InterleaveAdd(dk_pe.data(), n, 1, d.rope, dkv_a.data() + d.latent, kvw, 0);
  // c = rmsnorm(kv_a[:, :L]); kv_b reads c.
  std::vector<float> dc(n * d.latent, 0.0f), c_raw(n * d.latent), dc_raw(n * d.latent, 0.0f);
  ParamLinearBackward(p.kv_b, nullptr, a.c.data(), dkvb.data(), dc.data(), n, pool);
  for (int64_t r = 0; r < n; ++r) {
    std::memcpy(&c_raw[r * d.latent], &a.kv_a[r * kvw], d.latent * sizeof(float));
  }
  RmsNormBackward(c_raw.data(), p.kv_a_norm->value.data(), a.c_rstd.data(), dc.data(),
                  dc_raw.data(), p.kv_a_norm->GradForAccumulation(), n, d.latent, pool);
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t i = 0; i < d.latent; ++i) dkv_a[r * kvw + i] += dc_raw[r * d.latent + i];
  }
  ParamLinearBackward(p.kv_a, nullptr, x, dkv_a.data(), dx, n, pool);
  if (p.q_a == nullptr) {
    ParamLinearBackward(p.q_proj, nullptr, x, dq.data(), dx, n, pool);
    return;
  }
  std::vector<float> dqa_n(n * d.q_lora, 0.0f), dqa(n * d.q_lora, 0.0f);
  ParamLinearBackward(p.q_b, nullptr, a.q_a_normed.data(), dq.data(), dqa_n.data(), n, pool);
  RmsNormBackward(a.q_a.data(), p.q_a_norm->value.data(), a.q_a_rstd.data(), dqa_n.data(),
                  dqa.data(), p.q_a_norm->GradForAccumulation(), n, d.q_lora, pool);
  ParamLinearBackward(p.q_a, nullptr, x, dqa.data(), dx, n, pool);
}

}  // namespace expertd::train
