#include "engine/greedy.h"

#include <algorithm>

#include "base/status_macros.h"

namespace expertd::engine {

int32_t Argmax(absl::Span<const float> logits) {
  int32_t best = 0;
  for (size_t i = 1; i < logits.size(); ++i) {
    if (logits[i] > logits[best]) best = static_cast<int32_t>(i);
  }
  return best;
}

namespace {

absl::StatusOr<GreedyResult> Run(Engine* engine, SequenceId id, absl::Span<const int32_t> prompt,
                                 int64_t generate, int64_t chunk) {
  GreedyResult out;
  if (prompt.empty()) return absl::InvalidArgumentError("empty prompt");
  if (chunk <= 0) chunk = static_cast<int64_t>(prompt.size());
  for (size_t begin = 0; begin < prompt.size(); begin += chunk) {
    const size_t end = std::min(prompt.size(), begin + static_cast<size_t>(chunk));
    StepRequest req;
    req.record_routing = true;
    req.chunks.push_back(
        SequenceChunk{id, std::vector<int32_t>(prompt.begin() + begin, prompt.begin() + end)});
    ASSIGN_OR_RETURN(StepResult r, engine->Step(req));
    SequenceResult& s = r.sequences[0];
    if (out.routing.empty()) {
      out.routing = std::move(s.routing);
    } else {
      for (size_t l = 0; l < out.routing.size(); ++l) {
        auto& dst = out.routing[l];
        dst.expert_ids.insert(dst.expert_ids.end(), s.routing[l].expert_ids.begin(),
                              s.routing[l].expert_ids.end());
        dst.weights.insert(dst.weights.end(), s.routing[l].weights.begin(),
                           s.routing[l].weights.end());
      }
    }
    out.last_logits = std::move(s.logits);
  }
  std::vector<float> logits = out.last_logits;
  for (int64_t i = 0; i < generate; ++i) {
    const int32_t next = Argmax(logits);
    out.generated.push_back(next);
    if (i + 1 == generate) break;
    StepRequest req;
    req.chunks.push_back(SequenceChunk{id, {next}});
    ASSIGN_OR_RETURN(StepResult r, engine->Step(req));
    logits = std::move(r.sequences[0].logits);
  }
  return out;
}

}  // namespace

absl::StatusOr<GreedyResult> RunGreedy(Engine* engine, SequenceId id,
                                       absl::Span<const int32_t> prompt, int64_t generate,
                                       int64_t prefill_chunk) {
  RETURN_IF_ERROR(engine->AddSequence(id));
  absl::StatusOr<GreedyResult> result = Run(engine, id, prompt, generate, prefill_chunk);
  RETURN_IF_ERROR(engine->RemoveSequence(id));
  return result;
}

}  // namespace expertd::engine
