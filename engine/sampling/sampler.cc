#include "engine/sampling/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "absl/strings/str_cat.h"

namespace expertd::engine {
namespace {

absl::Status Range(const char* field, double v, double lo, double hi, bool lo_open = false) {
  const bool ok = std::isfinite(v) && (lo_open ? v > lo : v >= lo) && v <= hi;
  if (ok) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(field, " must be in ", lo_open ? "(" : "[", lo, ", ", hi, "], got ", v));
}

int32_t GreedyArgmax(const std::vector<float>& l) {
  int32_t best = 0;
  for (size_t i = 1; i < l.size(); ++i) {
    if (l[i] > l[best]) best = static_cast<int32_t>(i);
  }
  return best;
}

}  // namespace

absl::Status ValidateSamplingParams(const SamplingParams& p) {
  absl::Status st;
  st.Update(Range("temperature", p.temperature, 0, 100));
  st.Update(Range("top_k", p.top_k, 0, 1 << 30));
  st.Update(Range("top_p", p.top_p, 0, 1, /*lo_open=*/true));
  st.Update(Range("min_p", p.min_p, 0, 1));
  st.Update(Range("repetition_penalty", p.repetition_penalty, 0, 100, /*lo_open=*/true));
  st.Update(Range("presence_penalty", p.presence_penalty, -2, 2));
  st.Update(Range("frequency_penalty", p.frequency_penalty, -2, 2));
  st.Update(Range("top_logprobs", p.top_logprobs, 0, 20));
  for (const auto& [token, bias] : p.logit_bias) {
    if (token < 0) {
      st.Update(absl::InvalidArgumentError(
          absl::StrCat("logit_bias: token id ", token, " is negative")));
    }
    st.Update(Range("logit_bias", bias, -100, 100));
  }
  return st;
}

Sampler::Sampler(const SamplingParams& params, absl::Span<const int32_t> prompt)
    : params_(params), rng_(params.seed), seen_(prompt.begin(), prompt.end()) {}

std::vector<float> Sampler::Penalized(absl::Span<const float> logits) const {
  std::vector<float> l(logits.begin(), logits.end());
  const int32_t vocab = static_cast<int32_t>(l.size());
  for (const auto& [t, bias] : params_.logit_bias) {
    if (t >= 0 && t < vocab) l[t] += bias;
  }
  if (params_.repetition_penalty != 1.0) {
    const float p = static_cast<float>(params_.repetition_penalty);
    for (int32_t t : seen_) {
      if (t >= 0 && t < vocab) l[t] = l[t] > 0 ? l[t] / p : l[t] * p;
    }
  }
  if (params_.presence_penalty != 0.0 || params_.frequency_penalty != 0.0) {
    for (const auto& [t, n] : counts_) {
      if (t < 0 || t >= vocab) continue;
      l[t] = static_cast<float>(l[t] - params_.frequency_penalty * n - params_.presence_penalty);
    }
  }
  return l;
}

Distribution Sampler::Filtered(absl::Span<const float> logits) const {
  std::vector<float> l = Penalized(logits);
  std::vector<int32_t> order(l.size());
  std::iota(order.begin(), order.end(), 0);
  auto before = [&](int32_t a, int32_t b) { return l[a] > l[b] || (l[a] == l[b] && a < b); };
  size_t keep = order.size();
  if (params_.top_k > 0 && static_cast<size_t>(params_.top_k) < keep) keep = params_.top_k;
  std::partial_sort(order.begin(), order.begin() + keep, order.end(), before);
  order.resize(keep);
  // Softmax of l / T over the survivors, in double.
  Distribution d;
  const double t = params_.temperature;
  const double mx = l[order[0]] / t;
  double z = 0;
  for (int32_t id : order) {
    d.ids.push_back(id);
    d.probs.push_back(std::exp(l[id] / t - mx));
    z += d.probs.back();
  }
  for (double& p : d.probs) p /= z;
  size_t n = d.ids.size();
  if (params_.top_p < 1.0) {
    double cum = 0;
    for (size_t i = 0; i < n; ++i) {
      cum += d.probs[i];
      if (cum >= params_.top_p) {
        n = i + 1;
        break;
      }
    }
  }
  if (params_.min_p > 0.0) {
    const double threshold = params_.min_p * d.probs[0];
    size_t i = 1;
    while (i < n && d.probs[i] >= threshold) ++i;
    n = i;
  }
  d.ids.resize(n);
  d.probs.resize(n);
  double mass = std::accumulate(d.probs.begin(), d.probs.end(), 0.0);
  for (double& p : d.probs) p /= mass;
  return d;
}

SampleResult Sampler::Sample(absl::Span<const float> logits) {
  SampleResult r;
  if (params_.temperature == 0.0) {
    r.token = GreedyArgmax(Penalized(logits));
  } else {
    Distribution d = Filtered(logits);
    const double u = static_cast<double>(rng_() >> 11) * (1.0 / 9007199254740992.0);  // [0, 1)
    double cum = 0;
    r.token = d.ids.back();
    for (size_t i = 0; i < d.ids.size(); ++i) {
      cum += d.probs[i];
      if (u < cum) {
        r.token = d.ids[i];
        break;
      }
    }
  }
  if (params_.logprobs || params_.top_logprobs > 0) {
    double mx = *std::max_element(logits.begin(), logits.end());
    double z = 0;
    for (float v : logits) z += std::exp(v - mx);
    const double log_z = mx + std::log(z);
    r.logprob = static_cast<float>(logits[r.token] - log_z);
    std::vector<int32_t> order(logits.size());
    std::iota(order.begin(), order.end(), 0);
    const size_t n = std::min<size_t>(params_.top_logprobs, order.size());
    std::partial_sort(order.begin(), order.begin() + n, order.end(), [&](int32_t a, int32_t b) {
      return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
    });
    for (size_t i = 0; i < n; ++i)
      r.top.push_back({order[i], static_cast<float>(logits[order[i]] - log_z)});
  }
  generated_.push_back(r.token);
  seen_.insert(r.token);
  counts_[r.token]++;
  return r;
}

}  // namespace expertd::engine
