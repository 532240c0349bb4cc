#include "tests/golden/deepseek_reference.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "models/checkpoint/tensor_names.h"
#include "models/dtype/dtype.h"

namespace expertd::golden {
namespace {

using Vec = std::vector<double>;
using Mat = std::vector<Vec>;  // [rows][cols]
using models::AttnTensor;
using models::ExpertProj;

constexpr double kPi = 3.14159265358979323846;

class Reference {
 public:
  explicit Reference(const engine::WeightSource& w) : w_(w), c_(w.config()) {}

  absl::StatusOr<Mat> Logits(const std::vector<int32_t>& tokens) {
    ASSIGN_OR_RETURN(Mat embed, Load(models::EmbedTokensName()));
    Mat h;
    for (int32_t t : tokens) h.push_back(embed[t]);
    for (int layer = 0; layer < c_.num_hidden_layers; ++layer) {
      ASSIGN_OR_RETURN(Mat in_norm, Load(models::InputNormName(layer)));
      ASSIGN_OR_RETURN(Mat attn, Attention(layer, Norm(h, in_norm[0], c_.rms_norm_eps)));
      Add(&h, attn);
      ASSIGN_OR_RETURN(Mat post_norm, Load(models::PostAttentionNormName(layer)));
      const Mat x = Norm(h, post_norm[0], c_.rms_norm_eps);
      for (size_t t = 0; t < h.size(); ++t) {
        ASSIGN_OR_RETURN(Vec y, c_.is_moe_layer[layer] ? Moe(layer, x[t]) : DenseMlp(layer, x[t]));
        for (size_t i = 0; i < y.size(); ++i) h[t][i] += y[i];
      }
    }
    ASSIGN_OR_RETURN(Mat final_norm, Load(models::FinalNormName()));
    ASSIGN_OR_RETURN(Mat head, Load(models::LmHeadName(c_)));
    return Linear(head, Norm(h, final_norm[0], c_.rms_norm_eps));
  }

 private:
  absl::StatusOr<Mat> Load(const std::string& name) {
    ASSIGN_OR_RETURN(models::TensorView v, w_.Get(name));
    std::vector<float> f(v.numel());
    models::ConvertToF32(v.dtype, v.data, f.data(), f.size());
    const int64_t cols = v.shape.back(), rows = static_cast<int64_t>(f.size()) / cols;
    Mat m(rows, Vec(cols));
    for (int64_t r = 0; r < rows; ++r)
      std::copy(f.begin() + r * cols, f.begin() + (r + 1) * cols, m[r].begin());
    return m;
  }

  static Vec Mul(const Mat& w, const Vec& x) {
    Vec y(w.size());
    for (size_t r = 0; r < w.size(); ++r)
      y[r] = std::inner_product(x.begin(), x.end(), w[r].begin(), 0.0);
    return y;
  }
  static Mat Linear(const Mat& w, const Mat& x) {
    Mat y;
    for (const Vec& row : x) y.push_back(Mul(w, row));
    return y;
  }
  static void Add(Mat* a, const Mat& b) {
    for (size_t t = 0; t < a->size(); ++t)
      for (size_t i = 0; i < b[t].size(); ++i) (*a)[t][i] += b[t][i];
  }
  static Vec NormRow(const Vec& x, const Vec& w, double eps) {
    double ss = 0;
    for (double v : x) ss += v * v;
    const double inv = 1.0 / std::sqrt(ss / x.size() + eps);
    Vec y(x.size());
    for (size_t i = 0; i < x.size(); ++i) y[i] = x[i] * inv * w[i];
    return y;
  }
  static Mat Norm(const Mat& x, const Vec& w, double eps) {
    Mat y;
    for (const Vec& row : x) y.push_back(NormRow(row, w, eps));
    return y;
  }

  static double Mscale(double s, double m) { return s <= 1.0 ? 1.0 : 0.1 * m * std::log(s) + 1.0; }

  // DeepseekV3RotaryEmbedding / DeepseekV3YarnRotaryEmbedding, in double.
  void RopeTable(Vec* inv_freq, double* mscale) const {
    const int64_t d = c_.qk_rope_head_dim;
    const models::RopeScaling& s = c_.rope_scaling;
    *mscale = 1.0;
    for (int64_t i = 0; i < d / 2; ++i) inv_freq->push_back(std::pow(c_.rope_theta, -2.0 * i / d));
    if (s.type != models::RopeScalingType::kYarn) return;
    auto dim_of = [&](double rot) {
      return d * std::log(s.original_max_position_embeddings / (rot * 2 * kPi)) /
             (2 * std::log(c_.rope_theta));
    };
    const double low = std::max(0.0, std::floor(dim_of(s.beta_fast)));
    double high = std::min<double>(d - 1, std::ceil(dim_of(s.beta_slow)));
    if (low == high) high += 0.001;
    for (int64_t i = 0; i < d / 2; ++i) {
      const double mask = 1.0 - std::clamp((i - low) / (high - low), 0.0, 1.0);
      const double extra = (*inv_freq)[i];
      (*inv_freq)[i] = extra / s.factor * (1 - mask) + extra * mask;
    }
    *mscale = Mscale(s.factor, s.mscale) / Mscale(s.factor, s.mscale_all_dim);
  }

  // De-interleave, then rotate-half, as apply_rotary_pos_emb does.
  static Vec Rope(const Vec& u, int64_t pos, const Vec& inv_freq, double mscale) {
    const size_t half = u.size() / 2;
    Vec p(u.size()), out(u.size());
    for (size_t i = 0; i < half; ++i) {
      p[i] = u[2 * i];
      p[i + half] = u[2 * i + 1];
    }
    for (size_t i = 0; i < half; ++i) {
      const double cs = std::cos(pos * inv_freq[i]) * mscale,
                   sn = std::sin(pos * inv_freq[i]) * mscale;
      out[i] = p[i] * cs - p[i + half] * sn;
      out[i + half] = p[i + half] * cs + p[i] * sn;
    }
    return out;
  }

  absl::StatusOr<Mat> Attention(int layer, const Mat& x) {
    auto name = [&](AttnTensor t) { return models::AttentionName(layer, t); };
    const int64_t nh = c_.num_attention_heads, n = c_.qk_nope_head_dim, r = c_.qk_rope_head_dim;
    const int64_t v = c_.v_head_dim, kvr = c_.kv_lora_rank, qd = n + r;
    Mat q;
    if (c_.q_lora_rank > 0) {
      ASSIGN_OR_RETURN(Mat qa, Load(name(AttnTensor::kQAProj)));
      ASSIGN_OR_RETURN(Mat qn, Load(name(AttnTensor::kQALayerNorm)));
      ASSIGN_OR_RETURN(Mat qb, Load(name(AttnTensor::kQBProj)));
      q = Linear(qb, Norm(Linear(qa, x), qn[0], 1e-6));
    } else {
      ASSIGN_OR_RETURN(Mat qp, Load(name(AttnTensor::kQProj)));
      q = Linear(qp, x);
    }
    ASSIGN_OR_RETURN(Mat kva, Load(name(AttnTensor::kKvAProjWithMqa)));
    ASSIGN_OR_RETURN(Mat kvn, Load(name(AttnTensor::kKvALayerNorm)));
    ASSIGN_OR_RETURN(Mat kvb, Load(name(AttnTensor::kKvBProj)));
    ASSIGN_OR_RETURN(Mat wo, Load(name(AttnTensor::kOProj)));
    Vec inv_freq;
    double mscale;
    RopeTable(&inv_freq, &mscale);
    double scale = 1.0 / std::sqrt(static_cast<double>(qd));
    if (c_.rope_scaling.type != models::RopeScalingType::kNone &&
        c_.rope_scaling.mscale_all_dim != 0) {
      const double m = Mscale(c_.rope_scaling.factor, c_.rope_scaling.mscale_all_dim);
      scale *= m * m;
    }
    const size_t T = x.size();
    Mat k_pe(T), kv(T);
    for (size_t t = 0; t < T; ++t) {
      const Vec ckv = Mul(kva, x[t]);
      kv[t] = Mul(kvb, NormRow(Vec(ckv.begin(), ckv.begin() + kvr), kvn[0], 1e-6));
      k_pe[t] = Rope(Vec(ckv.begin() + kvr, ckv.end()), t, inv_freq, mscale);
    }
    Mat out(T, Vec(nh * v, 0.0));
    for (size_t t = 0; t < T; ++t) {
      for (int64_t h = 0; h < nh; ++h) {
        const double* qh = q[t].data() + h * qd;
        const Vec q_pe = Rope(Vec(qh + n, qh + qd), t, inv_freq, mscale);
        Vec s(t + 1);
        for (size_t j = 0; j <= t; ++j) {
          const double* kh = kv[j].data() + h * (n + v);
          double dot = 0;
          for (int64_t i = 0; i < n; ++i) dot += qh[i] * kh[i];
          for (int64_t i = 0; i < r; ++i) dot += q_pe[i] * k_pe[j][i];
          s[j] = dot * scale;
        }
        const double mx = *std::max_element(s.begin(), s.end());
        double sum = 0;
        for (double& e : s) sum += (e = std::exp(e - mx));
        for (size_t j = 0; j <= t; ++j) {
          const double* vh = kv[j].data() + h * (n + v) + n;
          for (int64_t i = 0; i < v; ++i) out[t][h * v + i] += s[j] / sum * vh[i];
        }
      }
    }
    return Linear(wo, out);
  }

  absl::StatusOr<Vec> Mlp(const std::string& gate, const std::string& up, const std::string& down,
                          const Vec& x) {
    ASSIGN_OR_RETURN(Mat g, Load(gate));
    ASSIGN_OR_RETURN(Mat u, Load(up));
    ASSIGN_OR_RETURN(Mat d, Load(down));
    Vec a = Mul(g, x), b = Mul(u, x);
    for (size_t i = 0; i < a.size(); ++i) a[i] = a[i] / (1.0 + std::exp(-a[i])) * b[i];
    return Mul(d, a);
  }

  absl::StatusOr<Vec> DenseMlp(int layer, const Vec& x) {
    return Mlp(models::DenseMlpWeightName(layer, ExpertProj::kGate),
               models::DenseMlpWeightName(layer, ExpertProj::kUp),
               models::DenseMlpWeightName(layer, ExpertProj::kDown), x);
  }

  static std::vector<int> Top(const Vec& v, int64_t k) {
    std::vector<int> idx(v.size());
    std::iota(idx.begin(), idx.end(), 0);
    std::stable_sort(idx.begin(), idx.end(), [&](int a, int b) { return v[a] > v[b]; });
    idx.resize(k);
    return idx;
  }

  absl::StatusOr<Vec> Moe(int layer, const Vec& x) {
    ASSIGN_OR_RETURN(Mat gate, Load(models::RouterName(c_, layer)));
    ASSIGN_OR_RETURN(Mat bias, Load(models::RouterBiasName(layer)));
    const int64_t e = c_.num_experts, per = e / c_.n_group;
    const Vec logits = Mul(gate, x);
    Vec s(e), choice(e), group(c_.n_group);
    for (int64_t i = 0; i < e; ++i) {
      s[i] = 1.0 / (1.0 + std::exp(-logits[i]));
      choice[i] = s[i] + bias[0][i];
    }
    for (int64_t g = 0; g < c_.n_group; ++g) {
      const std::vector<int> best =
          Top(Vec(choice.begin() + g * per, choice.begin() + (g + 1) * per), 2);
      group[g] = choice[g * per + best[0]] + choice[g * per + best[1]];
    }
    const std::vector<int> kept = Top(group, c_.topk_group);
    for (int64_t i = 0; i < e; ++i) {
      if (std::find(kept.begin(), kept.end(), i / per) == kept.end()) choice[i] = 0.0;
    }
    const std::vector<int> ids = Top(choice, c_.num_experts_per_tok);
    double sum = 0;
    for (int id : ids) sum += s[id];
    Vec y(x.size(), 0.0);
    for (int id : ids) {
      double w = s[id];
      if (ids.size() > 1 && c_.norm_topk_prob) w /= sum + 1e-20;
      w *= c_.routed_scaling_factor;
      ASSIGN_OR_RETURN(Vec o, Mlp(models::ExpertWeightName(c_, layer, id, ExpertProj::kGate),
                                  models::ExpertWeightName(c_, layer, id, ExpertProj::kUp),
                                  models::ExpertWeightName(c_, layer, id, ExpertProj::kDown), x));
      for (size_t i = 0; i < y.size(); ++i) y[i] += w * o[i];
    }
    if (c_.shared_expert_intermediate_size > 0) {
      ASSIGN_OR_RETURN(Vec o, Mlp(models::SharedExpertWeightName(c_, layer, ExpertProj::kGate),
                                  models::SharedExpertWeightName(c_, layer, ExpertProj::kUp),
                                  models::SharedExpertWeightName(c_, layer, ExpertProj::kDown), x));
      for (size_t i = 0; i < y.size(); ++i) y[i] += o[i];
    }
    return y;
  }

  const engine::WeightSource& w_;
  const models::ModelConfig& c_;
};

}  // namespace

absl::StatusOr<std::vector<std::vector<double>>> DeepseekReferenceLogits(
    const engine::WeightSource& weights, const std::vector<int32_t>& tokens) {
  if (weights.config().architecture != models::Architecture::kDeepseekV3) {
    return absl::InvalidArgumentError("DeepseekReferenceLogits: not a DeepSeek-V3 config");
  }
  Reference ref(weights);
  return ref.Logits(tokens);
}

}  // namespace expertd::golden
