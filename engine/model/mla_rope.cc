#include "engine/model/mla_rope.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"

namespace expertd::engine {
namespace {

constexpr double kPi = 3.14159265358979323846;

double YarnMscale(double scale, double mscale) {
  return scale <= 1.0 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0;
}

// theta ** (arange(0, dim, 2).float() / dim), fp32 like torch.
std::vector<float> PosFreqs(double theta, int64_t dim) {
  std::vector<float> out;
  for (int64_t i = 0; i < dim; i += 2) {
    const float exponent = static_cast<float>(i) / static_cast<float>(dim);
    out.push_back(static_cast<float>(std::pow(theta, static_cast<double>(exponent))));
  }
  return out;
}

// yarn_find_correction_dim: the dimension whose wavelength makes
// `rotations` turns over max_pos positions (Python floats: double).
double CorrectionDim(double rotations, int64_t dim, double theta, double max_pos) {
  return (dim * std::log(max_pos / (rotations * 2.0 * kPi))) / (2.0 * std::log(theta));
}

}  // namespace

absl::StatusOr<RopeTable> ComputeMlaRopeTable(const models::ModelConfig& c) {
  const int64_t dim = c.qk_rope_head_dim;
  const models::RopeScaling& s = c.rope_scaling;
  RopeTable t;
  t.rotary_dim = dim;
  const std::vector<float> pos = PosFreqs(c.rope_theta, dim);
  if (s.type == models::RopeScalingType::kNone) {
    for (float p : pos) t.inv_freq.push_back(1.0f / p);
    return t;
  }
  if (s.type != models::RopeScalingType::kYarn) {
    return absl::UnimplementedError(
        absl::StrCat(models::ArchitectureName(c.architecture),
                     ": only yarn rope_scaling (or none) is supported with MLA"));
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
    const float a = inter * (1.0f - mask);
    const float b = extra * mask;
    t.inv_freq.push_back(a + b);
  }
  t.attention_factor =
      static_cast<float>(YarnMscale(s.factor, s.mscale) / YarnMscale(s.factor, s.mscale_all_dim));
  return t;
}

double MlaSoftmaxScale(const models::ModelConfig& c) {
  double scale = std::pow(static_cast<double>(c.qk_nope_head_dim + c.qk_rope_head_dim), -0.5);
  const models::RopeScaling& s = c.rope_scaling;
  if (s.type != models::RopeScalingType::kNone && s.mscale_all_dim != 0.0) {
    const double m = YarnMscale(s.factor, s.mscale_all_dim);
    scale = scale * m * m;
  }
  return scale;
}

}  // namespace expertd::engine
