// Engine: an MoE language model ready to run forward steps over a batch of
// sequences, on any backend. Knows nothing of gRPC; the server adapts it.
//
//   auto engine = Engine::Create(checkpoint, options);      // loads weights
//   engine->AddSequence(7);                                  // empty KV
//   StepRequest req;
//   req.chunks.push_back({7, prompt_ids});                   // prefill
//   auto out = engine->Step(req);                            // logits per seq
//   req.chunks = {{7, {next_token}}};                        // decode
//   ...
//   engine->RemoveSequence(7);                               // frees KV blocks
//
// One Step runs ONE forward pass over every chunk in the request: a sequence
// contributes either a prefill chunk (many tokens) or one decode token, at its
// current position (= its length so far). Several sequences of different
// lengths are batched together. Results are batch-invariant: a sequence's
// logits are bitwise the same whatever else is in the step, and a prompt fed
// in several chunks gives bitwise the logits of one long prefill.
//
// Threading contract: an Engine is NOT thread-safe. One thread (the serving
// scheduler's engine thread) calls every method except kv_cache_stats(),
// which any thread may call (metrics). Step blocks until the logits are on the
// host.
//
// Memory contract: Step is atomic. If the KV cache cannot hold every chunk's
// new tokens it returns ResourceExhausted and no sequence changes; the caller
// (scheduler) should use BlocksNeeded() / kv_cache_stats() to admit work.
#ifndef EXPERTD_ENGINE_ENGINE_H_
#define EXPERTD_ENGINE_ENGINE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/backend/backend.h"
#include "engine/kv/kv_cache.h"  // KvCacheStats
#include "engine/model/expert_gemm.h"
#include "engine/model/expert_provider.h"
#include "engine/model/weight_source.h"
#include "models/checkpoint/checkpoint.h"
#include "models/config/model_config.h"

namespace expertd::engine {

using SequenceId = uint64_t;

// Makes the engine's backend from its options.
using BackendFactory =
    std::function<absl::StatusOr<std::unique_ptr<Backend>>(const BackendOptions& options)>;

struct EngineOptions {
  BackendOptions backend;  // "auto" | "cpu" | "cuda", threads, device limit
  // Null: CreateBackend(backend). Tests inject a wrapping backend here
  // (engine/backend/instrumented_backend.h counts ops and fails chosen ones).
  BackendFactory backend_factory;
  uint64_t kv_cache_bytes = 64ull << 20;  // KV budget; sets the number of blocks
  int64_t kv_block_size = 16;             // tokens per KV block
  int64_t max_step_tokens = 8192;         // tokens per Step (sizes activations)
  // Null: every routed expert resident in device memory. The expert store (engine/experts) plugs
  // its tiered store in here.
  ExpertProviderFactory expert_provider_factory;
  // Routed experts' GEMMs: one per expert or grouped; kAuto = the measured
  // rule (engine/model/expert_gemm.h). Results are bitwise the same.
  ExpertGemm expert_gemm = ExpertGemm::kAuto;
};

// New tokens of one sequence for one Step.
struct SequenceChunk {
  SequenceId id = 0;
  std::vector<int32_t> tokens;  // >= 1, each in [0, vocab_size)
  bool all_logits = false;      // logits of every chunk position, not only the last
};

struct StepRequest {
  std::vector<SequenceChunk> chunks;  // distinct ids, each added with AddSequence
  bool record_routing = false;        // fill SequenceResult::routing
};

// One decoder layer's routing for one sequence's chunk.
struct LayerRouting {
  int top_k = 0;                    // 0: a dense layer (no router)
  std::vector<int32_t> expert_ids;  // [tokens, top_k], router rank order
  std::vector<float> weights;       // [tokens, top_k], as multiplied into the experts' outputs
};

struct SequenceResult {
  SequenceId id = 0;
  int64_t logit_rows = 0;             // 1, or the chunk length with all_logits
  std::vector<float> logits;          // [logit_rows, vocab_size], fp32
  std::vector<LayerRouting> routing;  // [num_hidden_layers] when recorded
};

struct StepResult {
  std::vector<SequenceResult> sequences;  // in request order
};

class Engine {
 public:
  // Loads every dense weight (and, through the expert provider, the experts)
  // onto the backend. Errors: an unsupported architecture (e.g. DeepSeek-V3:
  // Unimplemented naming it), a missing or mis-shaped tensor, device memory
  // or KV budget too small.
  static absl::StatusOr<std::unique_ptr<Engine>> Create(
      std::shared_ptr<const models::Checkpoint> checkpoint, const EngineOptions& options);
  static absl::StatusOr<std::unique_ptr<Engine>> Create(std::shared_ptr<const WeightSource> weights,
                                                        const EngineOptions& options);
  ~Engine();

  const models::ModelConfig& config() const;
  Backend* backend();

  // Sequences. AlreadyExists / NotFound on misuse.
  absl::Status AddSequence(SequenceId id);
  absl::Status RemoveSequence(SequenceId id);  // frees its KV blocks
  bool HasSequence(SequenceId id) const;
  // Tokens already in the KV cache (the position of the next token).
  absl::StatusOr<int64_t> SequenceLength(SequenceId id) const;
  // KV blocks that appending `new_tokens` would take from the free pool.
  absl::StatusOr<int64_t> BlocksNeeded(SequenceId id, int64_t new_tokens) const;
  // Thread-safe snapshot.
  KvCacheStats kv_cache_stats() const;

  // Runs one forward pass (see the file comment). InvalidArgument for a bad
  // request (unknown or repeated id, empty chunk, token out of range, too
  // many tokens, position past max_position_embeddings);
  // ResourceExhausted when the KV cache is full (nothing changed).
  absl::StatusOr<StepResult> Step(const StepRequest& request);

 private:
  struct Impl;
  explicit Engine(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace expertd::engine

#endif  // EXPERTD_ENGINE_ENGINE_H_
