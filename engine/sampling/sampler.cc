#include "engine/sampling/sampler.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <limits>

namespace expertd::engine {
namespace {

// Index of the largest value; lowest index on ties.
int32_t ArgMax(absl::Span<const float> v) {
  int32_t best = 0;
  for (int32_t i = 1; i < static_cast<int32_t>(v.size()); ++i) {
    if (v[i] > v[best]) best = i;
  }
  return best;
}

double LogSumExp(absl::Span<const float> v) {
  float m = *std::max_element(v.begin(), v.end());
  if (!std::isfinite(m)) return m;
  double sum = 0;
  for (float x : v) sum += std::exp(static_cast<double>(x) - m);
  return m + std::log(sum);
}

}  // namespace

uint64_t SamplingRng::NextU64() {
  uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

double SamplingRng::NextUniform() { return static_cast<double>(NextU64() >> 11) * 0x1.0p-53; }

float LogSoftmaxAt(absl::Span<const float> logits, int32_t id) {
  return static_cast<float>(logits[id] - LogSumExp(logits));
}

std::vector<std::pair<int32_t, float>> TopLogprobs(absl::Span<const float> logits, int n) {
  std::vector<std::pair<int32_t, float>> out;
  if (n <= 0 || logits.empty()) return out;
  n = std::min<int>(n, static_cast<int>(logits.size()));
  std::vector<int32_t> idx(logits.size());
  for (size_t i = 0; i < idx.size(); ++i) idx[i] = static_cast<int32_t>(i);
  auto better = [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); };
  std::partial_sort(idx.begin(), idx.begin() + n, idx.end(), better);
  const double lse = LogSumExp(logits);
  for (int i = 0; i < n; ++i) out.emplace_back(idx[i], static_cast<float>(logits[idx[i]] - lse));
  return out;
}

void Sampler::ApplyPenalties(const SamplingParams& p, absl::Span<const int32_t> prompt,
                             absl::Span<const int32_t> output) {
  const int32_t vocab = static_cast<int32_t>(work_.size());
  if (p.repetition_penalty != 1.0f) {
    // Each distinct token once (HF gathers, penalises and scatters).
    counts_.assign(vocab, 0);
    auto mark = [&](int32_t t) {
      if (t >= 0 && t < vocab && counts_[t]++ == 0) {
        float& x = work_[t];
        x = x > 0 ? x / p.repetition_penalty : x * p.repetition_penalty;
      }
    };
    for (int32_t t : prompt) mark(t);
    for (int32_t t : output) mark(t);
  }
  if (p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f) {
    counts_.assign(vocab, 0);
    for (int32_t t : output) {
      if (t >= 0 && t < vocab) ++counts_[t];
    }
    for (int32_t t = 0; t < vocab; ++t) {
      if (counts_[t] > 0) work_[t] -= p.presence_penalty + p.frequency_penalty * static_cast<float>(counts_[t]);
    }
  }
}

SampledToken Sampler::Sample(absl::Span<const float> logits, const SamplingParams& p,
                             absl::Span<const int32_t> prompt, absl::Span<const int32_t> output, int top_logprobs,
                             SamplingRng* rng) {
  assert(!logits.empty());
  work_.assign(logits.begin(), logits.end());
  ApplyPenalties(p, prompt, output);

  SampledToken result;
  if (p.temperature <= 0.0f) {
    result.id = ArgMax(work_);
  } else {
    const int32_t vocab = static_cast<int32_t>(work_.size());
    for (float& x : work_) x /= p.temperature;
    // Candidates sorted most likely first (lowest id on ties): deterministic.
    order_.resize(vocab);
    for (int32_t i = 0; i < vocab; ++i) order_[i] = i;
    auto better = [&](int32_t a, int32_t b) { return work_[a] > work_[b] || (work_[a] == work_[b] && a < b); };
    int32_t keep = vocab;
    if (p.top_k > 0 && p.top_k < vocab) {
      keep = p.top_k;
      std::partial_sort(order_.begin(), order_.begin() + keep, order_.end(), better);
    } else {
      std::sort(order_.begin(), order_.end(), better);
    }
    // Softmax over the kept candidates (double for a stable cumulative sum).
    const double m = work_[order_[0]];
    std::vector<double> probs(keep);
    double total = 0;
    for (int32_t i = 0; i < keep; ++i) total += probs[i] = std::exp(static_cast<double>(work_[order_[i]]) - m);
    for (double& q : probs) q /= total;
    if (p.top_p < 1.0f) {
      double cum = 0;
      int32_t n = 0;
      while (n < keep) {
        cum += probs[n++];
        if (cum >= p.top_p) break;
      }
      keep = std::max<int32_t>(n, 1);
    }
    if (p.min_p > 0.0f) {
      const double floor = p.min_p * probs[0];
      int32_t n = 1;
      while (n < keep && probs[n] >= floor) ++n;
      keep = n;
    }
    double mass = 0;
    for (int32_t i = 0; i < keep; ++i) mass += probs[i];
    const double u = rng->NextUniform() * mass;
    double cum = 0;
    result.id = order_[keep - 1];
    for (int32_t i = 0; i < keep; ++i) {
      cum += probs[i];
      if (u < cum) {
        result.id = order_[i];
        break;
      }
    }
  }
  result.logprob = LogSoftmaxAt(logits, result.id);
  result.top = TopLogprobs(logits, top_logprobs);
  return result;
}

}  // namespace expertd::engine
