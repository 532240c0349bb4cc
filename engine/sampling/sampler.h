// Token sampling from one sequence's logits: greedy, temperature, top-k,
// top-p, min-p, repetition / presence / frequency penalties, seeded RNG, and
// log-probabilities with top-n alternatives.
//
// Order of operations (documented in docs/api.md):
//   1. repetition penalty (Hugging Face): every distinct token of prompt and
//      output has its logit divided by p when positive, multiplied when not;
//   2. presence / frequency penalties (OpenAI), over the output only:
//      logit -= presence * [count > 0] + frequency * count;
//   3. temperature 0: argmax (lowest id on ties) and stop here;
//   4. logits / temperature, top-k, softmax, top-p (smallest set of most
//      likely tokens whose mass reaches top_p), min-p (drop p < min_p * p_max),
//      renormalise, draw with the request's own RNG.
// Reported logprobs are the model's raw distribution (log-softmax of the
// logits before any of the above), as vLLM reports by default.
//
// Determinism: a request's RNG is consumed exactly once per sampled token, so
// the same seed gives the same tokens whatever else is batched with it.
// Thread-compatible: one Sampler per thread (it keeps scratch buffers).
#ifndef EXPERTD_ENGINE_SAMPLING_SAMPLER_H_
#define EXPERTD_ENGINE_SAMPLING_SAMPLER_H_

#include <cstdint>
#include <utility>
#include <vector>

#include "absl/types/span.h"

namespace expertd::engine {

struct SamplingParams {
  float temperature = 1.0f;  // 0 = greedy
  int32_t top_k = 0;         // 0 = off
  float top_p = 1.0f;        // 1 = off
  float min_p = 0.0f;        // 0 = off
  float repetition_penalty = 1.0f;
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
};

// SplitMix64: tiny, fast, and the stream depends only on the seed.
class SamplingRng {
 public:
  explicit SamplingRng(uint64_t seed) : state_(seed) {}
  uint64_t NextU64();
  double NextUniform();  // [0, 1)

 private:
  uint64_t state_;
};

struct SampledToken {
  int32_t id = 0;
  float logprob = 0;  // raw model log-probability of `id`
  std::vector<std::pair<int32_t, float>> top;  // top-n (id, logprob), most likely first
};

class Sampler {
 public:
  // logits: [vocab]. prompt/output: the sequence so far (for penalties).
  // top_logprobs: how many alternatives to report (0 = none).
  SampledToken Sample(absl::Span<const float> logits, const SamplingParams& params, absl::Span<const int32_t> prompt,
                      absl::Span<const int32_t> output, int top_logprobs, SamplingRng* rng);

 private:
  void ApplyPenalties(const SamplingParams& params, absl::Span<const int32_t> prompt,
                      absl::Span<const int32_t> output);

  std::vector<float> work_;
  std::vector<int32_t> order_;
  std::vector<int32_t> counts_;
};

// log-softmax of `logits` at `id`, and the top-n entries (most likely first,
// lowest id on ties).
float LogSoftmaxAt(absl::Span<const float> logits, int32_t id);
std::vector<std::pair<int32_t, float>> TopLogprobs(absl::Span<const float> logits, int n);

}  // namespace expertd::engine

#endif  // EXPERTD_ENGINE_SAMPLING_SAMPLER_H_
