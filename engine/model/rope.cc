#include "engine/model/rope.h"

#include <algorithm>
#include <cmath>

namespace expertd::engine {
namespace {

constexpr double kPi = 3.14159265358979323846;

// base ** (arange(0, dim, 2).float() / dim), in fp32 like torch.
std::vector<float> PosFreqs(double theta, int64_t dim) {
  std::vector<float> out;
  for (int64_t i = 0; i < dim; i += 2) {
    const float exponent = static_cast<float>(i) / static_cast<float>(dim);
    out.push_back(static_cast<float>(std::pow(theta, static_cast<double>(exponent))));
  }
  return out;
}

double YarnMscale(double scale, double mscale) {
  return scale <= 1.0 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0;
}

void ApplyLlama3(const models::RopeScaling& s, std::vector<float>* inv_freq) {
  const double old_len = static_cast<double>(s.original_max_position_embeddings);
  const double low_wavelen = old_len / s.low_freq_factor;
  const double high_wavelen = old_len / s.high_freq_factor;
  for (float& f : *inv_freq) {
    const double wavelen = 2.0 * kPi / f;
    if (wavelen > low_wavelen) {
      f = static_cast<float>(f / s.factor);
    } else if (wavelen >= high_wavelen) {  // medium band: smooth blend
      const double smooth =
          (old_len / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
      f = static_cast<float>((1.0 - smooth) * f / s.factor + smooth * f);
    }
  }
}

float ApplyYarn(const models::RopeScaling& s, double theta, int64_t dim,
                std::vector<float>* inv_freq) {
  const double max_pos = static_cast<double>(s.original_max_position_embeddings);
  auto correction_dim = [&](double rotations) {
    return (dim * std::log(max_pos / (rotations * 2.0 * kPi))) / (2.0 * std::log(theta));
  };
  double low = correction_dim(s.beta_fast), high = correction_dim(s.beta_slow);
  if (s.truncate) {  // whole dimensions, as transformers did before "truncate" existed
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(0.0, low);
  high = std::min(static_cast<double>(dim - 1), high);
  if (low == high) high += 0.001;
  std::vector<float> pos = PosFreqs(theta, dim);
  for (size_t i = 0; i < pos.size(); ++i) {
    const double ramp = std::clamp((static_cast<double>(i) - low) / (high - low), 0.0, 1.0);
    const double extrapolation = 1.0 - ramp;  // weight of the unscaled frequency
    const double interp = 1.0 / (s.factor * pos[i]);
    const double extra = 1.0 / static_cast<double>(pos[i]);
    (*inv_freq)[i] = static_cast<float>(interp * (1.0 - extrapolation) + extra * extrapolation);
  }
  if (s.mscale != 0.0 && s.mscale_all_dim != 0.0) {
    return static_cast<float>(YarnMscale(s.factor, s.mscale) /
                              YarnMscale(s.factor, s.mscale_all_dim));
  }
  return static_cast<float>(YarnMscale(s.factor, 1.0));
}

}  // namespace

RopeTable ComputeRopeTable(const models::RopeScaling& scaling, double theta, int64_t rotary_dim) {
  RopeTable t;
  t.rotary_dim = rotary_dim;
  for (float p : PosFreqs(theta, rotary_dim)) t.inv_freq.push_back(1.0f / p);
  switch (scaling.type) {
    case models::RopeScalingType::kNone:
      break;
    case models::RopeScalingType::kLinear:
      for (float& f : t.inv_freq) f = static_cast<float>(f / scaling.factor);
      break;
    case models::RopeScalingType::kLlama3:
      ApplyLlama3(scaling, &t.inv_freq);
      break;
    case models::RopeScalingType::kYarn:
      t.attention_factor = ApplyYarn(scaling, theta, rotary_dim, &t.inv_freq);
      break;
  }
  return t;
}

}  // namespace expertd::engine
