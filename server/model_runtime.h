// ModelRuntime: everything needed to serve one model — the opened checkpoint,
// the engine, the tokenizer (when the directory has tokenizer.json) and the
// scheduler that owns the engine. Built by the daemon's loader thread.
#ifndef EXPERTD_SERVER_MODEL_RUNTIME_H_
#define EXPERTD_SERVER_MODEL_RUNTIME_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/engine.h"
#include "engine/experts/expert_store.h"
#include "engine/parallel/multi_device_experts.h"
#include "models/chat_template/chat_template.h"
#include "models/checkpoint/checkpoint.h"
#include "models/tokenizer/tokenizer.h"
#include "server/generation_request.h"
#include "server/options.h"
#include "server/scheduler.h"

namespace expertd::server {

class ModelRuntime {
 public:
  // Opens options.model_dir, loads the weights onto the backend and starts
  // the scheduler. `listener` (may be null) and `clock` (the scheduler's
  // time) must outlive the runtime.
  static absl::StatusOr<std::unique_ptr<ModelRuntime>> Load(const ServerOptions& options,
                                                            SchedulerListener* listener,
                                                            Clock* clock);
  ~ModelRuntime();  // drains the scheduler (immediately) if still running

  const models::ModelConfig& config() const { return checkpoint_->config(); }
  const models::Checkpoint& checkpoint() const { return *checkpoint_; }
  // Null when the model directory has no tokenizer.json.
  const models::Tokenizer* tokenizer() const { return tokenizer_.get(); }
  // The chat template(s) of tokenizer_config.json (or --chat_template); never
  // null, has_template() false when there is none.
  const chat_template::ChatFormatter& chat_formatter() const { return *chat_formatter_; }
  Scheduler* scheduler() { return scheduler_.get(); }
  const ValidationLimits& limits() const { return limits_; }
  // Tokenizes text prompts (null function without a tokenizer).
  TextTokenizer text_tokenizer() const;
  const std::string& backend_name() const { return backend_name_; }
  // Configuration problems found at load (also logged), for GetModelInfo.
  const std::vector<std::string>& warnings() const { return warnings_; }
  // The tiered expert store (--expert_offload), or null when every expert is
  // resident. Owned by the engine; thread-safe stats().
  const engine::ExpertStore* expert_store() const { return expert_store_; }
  // With --expert_offload over several --devices: the provider's counters,
  // whose DeviceStoreStats() reads each device's store (expert_store() is
  // then null); null otherwise.
  const engine::parallel::MultiDeviceCounters* device_counters() const {
    return device_counters_.get();
  }

 private:
  ModelRuntime() = default;
  static absl::StatusOr<std::shared_ptr<const chat_template::ChatFormatter>> LoadChatFormatter(
      const ServerOptions& options);

  std::shared_ptr<const models::Checkpoint> checkpoint_;
  std::unique_ptr<models::Tokenizer> tokenizer_;
  std::shared_ptr<const chat_template::ChatFormatter> chat_formatter_;
  std::unique_ptr<engine::Engine> engine_;
  std::unique_ptr<Scheduler> scheduler_;  // destroyed before engine_
  ValidationLimits limits_;
  std::string backend_name_;
  std::vector<std::string> warnings_;
  engine::ExpertStore* expert_store_ = nullptr;  // owned by engine_
  std::shared_ptr<engine::parallel::MultiDeviceCounters> device_counters_;
};

}  // namespace expertd::server

#endif  // EXPERTD_SERVER_MODEL_RUNTIME_H_
