// FakeStepEngine: a StepEngine (server/step_engine.h) for scheduler tests.
// It keeps real KV-cache accounting (ceil(length / block_size) blocks per
// sequence, out of blocks_total), checks requests like engine::Engine
// (unknown or repeated id, empty chunk, token out of range: InvalidArgument;
// KV full: ResourceExhausted, nothing changed), and returns deterministic
// logits: the row after a sequence's token at position p peaks (10.0, the
// rest 0.0) at token NextToken(p), so greedy decoding is predictable and
// batch-invariant. FailStep(n, status) makes the n-th Step fail atomically.
//
// Thread-safe (one mutex), so tests may read its counters from any thread.
#ifndef EXPERTD_SERVER_FAKE_STEP_ENGINE_H_
#define EXPERTD_SERVER_FAKE_STEP_ENGINE_H_

#include <cstdint>
#include <map>

#include "absl/synchronization/mutex.h"
#include "server/step_engine.h"

namespace expertd::server {

class FakeStepEngine final : public StepEngine {
 public:
  struct Options {
    int32_t vocab_size = 64;
    int64_t block_size = 4;
    int64_t blocks_total = 64;
  };
  FakeStepEngine() : FakeStepEngine(Options{}) {}
  explicit FakeStepEngine(Options options) : options_(options) {}

  // The greedy token after the token at position `position`.
  int32_t NextToken(int64_t position) const {
    return static_cast<int32_t>((position * 7 + 3) % options_.vocab_size);
  }

  // The n-th Step call (1-based, counted since construction) returns `status`.
  void FailStep(int64_t n, absl::Status status);
  int64_t steps() const;      // Step calls so far, failed ones included
  int64_t sequences() const;  // sequences now added

  absl::Status AddSequence(engine::SequenceId id) override;
  absl::Status RemoveSequence(engine::SequenceId id) override;
  absl::StatusOr<int64_t> BlocksNeeded(engine::SequenceId id, int64_t new_tokens) const override;
  engine::KvCacheStats kv_cache_stats() const override;
  absl::StatusOr<engine::StepResult> Step(const engine::StepRequest& request) override;
  int32_t vocab_size() const override { return options_.vocab_size; }

 private:
  int64_t Blocks(int64_t tokens) const {
    return (tokens + options_.block_size - 1) / options_.block_size;
  }
  int64_t UsedBlocksLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status CheckLocked(const engine::StepRequest& request) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Options options_;
  mutable absl::Mutex mu_;
  std::map<engine::SequenceId, int64_t> lengths_ ABSL_GUARDED_BY(mu_);  // tokens in the KV cache
  int64_t steps_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t fail_step_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status fail_status_ ABSL_GUARDED_BY(mu_);
};

}  // namespace expertd::server

#endif  // EXPERTD_SERVER_FAKE_STEP_ENGINE_H_
