// StepEngine: what the scheduler needs from an inference engine, and no more:
// sequences in and out, KV-cache accounting, one batched forward step. The
// scheduler drives this interface, so its tests can run on a fake
// (server/fake_step_engine.h) that fails chosen steps, and production adapts
// engine::Engine to it (AdaptEngine below).
//
// The contract is engine::Engine's (engine/engine.h): Step runs one forward
// pass over every chunk and is atomic (an error changes no sequence); results
// come back in request order with logits of vocab_size() floats per row.
//
// Threading: not thread-safe, except kv_cache_stats(), which any thread may
// call. One thread (the scheduler's) calls everything else.
#ifndef EXPERTD_SERVER_STEP_ENGINE_H_
#define EXPERTD_SERVER_STEP_ENGINE_H_

#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/engine.h"

namespace expertd::server {

class StepEngine {
 public:
  virtual ~StepEngine() = default;

  // AlreadyExists / NotFound on misuse.
  virtual absl::Status AddSequence(engine::SequenceId id) = 0;
  virtual absl::Status RemoveSequence(engine::SequenceId id) = 0;  // frees its KV blocks
  // KV blocks that appending `new_tokens` to `id` would take from the pool.
  virtual absl::StatusOr<int64_t> BlocksNeeded(engine::SequenceId id, int64_t new_tokens) const = 0;
  // Thread-safe snapshot.
  virtual engine::KvCacheStats kv_cache_stats() const = 0;
  virtual absl::StatusOr<engine::StepResult> Step(const engine::StepRequest& request) = 0;
  // Logits per row.
  virtual int32_t vocab_size() const = 0;
};

// engine::Engine as a StepEngine. `engine` must outlive the adapter.
std::unique_ptr<StepEngine> AdaptEngine(engine::Engine* engine);

}  // namespace expertd::server

#endif  // EXPERTD_SERVER_STEP_ENGINE_H_
