#include "server/step_engine.h"

namespace expertd::server {
namespace {

class EngineAdapter final : public StepEngine {
 public:
  explicit EngineAdapter(engine::Engine* engine) : engine_(engine) {}

  absl::Status AddSequence(engine::SequenceId id) override { return engine_->AddSequence(id); }
  absl::Status RemoveSequence(engine::SequenceId id) override {
    return engine_->RemoveSequence(id);
  }
  absl::StatusOr<int64_t> BlocksNeeded(engine::SequenceId id, int64_t new_tokens) const override {
    return engine_->BlocksNeeded(id, new_tokens);
  }
  engine::KvCacheStats kv_cache_stats() const override { return engine_->kv_cache_stats(); }
  absl::StatusOr<engine::StepResult> Step(const engine::StepRequest& request) override {
    return engine_->Step(request);
  }
  int32_t vocab_size() const override { return static_cast<int32_t>(engine_->config().vocab_size); }

 private:
  engine::Engine* const engine_;
};

}  // namespace

std::unique_ptr<StepEngine> AdaptEngine(engine::Engine* engine) {
  return std::make_unique<EngineAdapter>(engine);
}

}  // namespace expertd::server
