// Sampler: turns one sequence's next-token logits into a token.
//
// One Sampler per request; it keeps the request's RNG and token history, so
// a request's output depends only on its own logits and seed (and the
// engine's logits are batch-invariant): the same request gives the same
// tokens whatever else the server is running.
//
// Pipeline, in this order (Hugging Face's logits processors, then warpers):
//   0. logit_bias (OpenAI semantics, as vLLM applies it: first): the bias of
//      each listed token id is added to its logit; ids outside the logits are
//      ignored here (the server refuses them against the vocabulary first).
//   1. repetition_penalty (HF semantics, over prompt + generated tokens):
//      a logit l of a seen token becomes l / p if l > 0, else l * p.
//   2. presence / frequency penalties (OpenAI semantics, generated tokens
//      only): l -= frequency_penalty * count + presence_penalty * (count > 0).
//   3. temperature == 0 -> greedy: the highest logit, lowest id on ties.
//      Otherwise l /= temperature, then
//   4. top_k (keep the k highest; ties to the lower id), top_p (keep the
//      smallest prefix of the descending distribution whose mass reaches
//      top_p), min_p (keep tokens with p >= min_p * p_max);
//   5. sample from the renormalised survivors with one uniform draw from the
//      request's RNG (std::mt19937_64 seeded with `seed`).
// Log-probabilities (optional) are those of the MODEL distribution
// (log_softmax of the raw logits, before penalties and temperature), as
// OpenAI's API reports them; top_logprobs gives the n most likely tokens.
//
// Thread safety: a Sampler is used by one thread at a time.
#ifndef EXPERTD_ENGINE_SAMPLING_SAMPLER_H_
#define EXPERTD_ENGINE_SAMPLING_SAMPLER_H_

#include <cstdint>
#include <random>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"

namespace expertd::engine {

struct SamplingParams {
  double temperature = 1.0;         // 0 = greedy; [0, 100]
  int32_t top_k = 0;                // 0 = off
  double top_p = 1.0;               // (0, 1]; 1 = off
  double min_p = 0.0;               // [0, 1]; 0 = off
  double repetition_penalty = 1.0;  // (0, 100]; 1 = off
  double presence_penalty = 0.0;    // [-2, 2]
  double frequency_penalty = 0.0;   // [-2, 2]
  // (token id, bias) pairs added to the logits before everything else; bias in
  // [-100, 100] (OpenAI's range: -100 bans a token, 100 all but forces it).
  std::vector<std::pair<int32_t, float>> logit_bias;
  uint64_t seed = 0;
  bool logprobs = false;     // report the chosen token's logprob
  int32_t top_logprobs = 0;  // [0, 20] alternatives to report
};

// InvalidArgument naming the first out-of-range field.
absl::Status ValidateSamplingParams(const SamplingParams& params);

struct TokenLogprob {
  int32_t token = 0;
  float logprob = 0.0f;
};

struct SampleResult {
  int32_t token = 0;
  float logprob = 0.0f;           // when params.logprobs
  std::vector<TokenLogprob> top;  // params.top_logprobs entries, most likely first
};

// The candidates that survive steps 1-4 with their renormalised
// probabilities, most likely first (exposed for tests and for debugging).
struct Distribution {
  std::vector<int32_t> ids;
  std::vector<double> probs;
};

class Sampler {
 public:
  // REQUIRES: ValidateSamplingParams(params).ok().
  Sampler(const SamplingParams& params, absl::Span<const int32_t> prompt);

  // Samples the next token from `logits` [vocab] and records it as generated.
  SampleResult Sample(absl::Span<const float> logits);

  // Steps 0-2 on a copy of the logits.
  std::vector<float> Penalized(absl::Span<const float> logits) const;
  // Steps 0-4 (temperature > 0).
  Distribution Filtered(absl::Span<const float> logits) const;

  const std::vector<int32_t>& generated() const { return generated_; }

 private:
  const SamplingParams params_;
  std::mt19937_64 rng_;
  std::unordered_set<int32_t> seen_;             // prompt + generated
  std::unordered_map<int32_t, int32_t> counts_;  // generated only
  std::vector<int32_t> generated_;
};

}  // namespace expertd::engine

#endif  // EXPERTD_ENGINE_SAMPLING_SAMPLER_H_
