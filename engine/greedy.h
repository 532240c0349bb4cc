// Prompt + greedy continuation on one sequence: what `expertd-run` and the
// golden tests need (the serving path uses Engine::Step + the sampler).
#ifndef EXPERTD_ENGINE_GREEDY_H_
#define EXPERTD_ENGINE_GREEDY_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/engine.h"

namespace expertd::engine {

struct GreedyResult {
  std::vector<float> last_logits;     // [vocab] at the last prompt position
  std::vector<LayerRouting> routing;  // per layer, for every prompt position
  std::vector<int32_t> generated;     // greedy tokens (EOS does not stop)
};

// Index of the largest value; the first one on ties (torch.argmax).
int32_t Argmax(absl::Span<const float> logits);

// Adds sequence `id`, prefills `prompt` (in chunks of at most
// `prefill_chunk` tokens; 0 = one chunk), then decodes `generate` tokens one
// step at a time through the KV cache, and removes the sequence.
absl::StatusOr<GreedyResult> RunGreedy(Engine* engine, SequenceId id,
                                       absl::Span<const int32_t> prompt, int64_t generate,
                                       int64_t prefill_chunk = 0);

}  // namespace expertd::engine

#endif  // EXPERTD_ENGINE_GREEDY_H_
