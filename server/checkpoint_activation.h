// CheckpointActivator: puts a checkpoint into service on a running daemon
// (AdminService.ActivateCheckpoint).
//
// Semantics (docs/operations.md, "Activating a checkpoint"):
// - The checkpoint is loaded as a complete second ModelRuntime (weights,
//   tokenizer, KV cache and scheduler) beside the served one, so the served
//   model keeps serving at full speed while it loads. Memory for two models
//   is needed during the switch.
// - The switch is one pointer swap in ServingState: every request that
//   arrives after it runs on the new model; every request accepted before it
//   (running or queued) finishes on the model it started on, on that model's
//   own scheduler. A sequence therefore never mixes weights, and nothing is
//   dropped or failed. The old model is destroyed when its last request ends.
// - "base" names the model the daemon started with (--model_dir,
//   --model_name); any other id is resolved through the CheckpointCatalog
//   (the job system). Activating the model already served is a no-op.
// - A checkpoint that cannot serve the same clients (another architecture,
//   vocabulary or tokenizer) is refused with FAILED_PRECONDITION naming the
//   difference; one that fails to load returns the loader's error. In both
//   cases the served model is untouched.
// - One activation at a time: a call while another is loading gets ABORTED
//   (retry once the first returns) instead of queueing behind a load that
//   may take minutes.
// - The checkpoint being loaded and the one served stay pinned in the
//   catalog, so the job system's checkpoint retention never deletes them;
//   the pin of a checkpoint is released when another one replaces it (or
//   when its activation fails).
//
// Thread-safe.
#ifndef EXPERTD_SERVER_CHECKPOINT_ACTIVATION_H_
#define EXPERTD_SERVER_CHECKPOINT_ACTIVATION_H_

#include <functional>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "models/config/model_config.h"
#include "models/tokenizer/tokenizer.h"
#include "server/jobs/job_executor.h"
#include "server/metrics/serving_metrics.h"
#include "server/scheduler.h"
#include "server/serving_state.h"

namespace expertd::server {

struct ActivationResult {
  std::string model_name;  // the name now served
  std::string checkpoint_id;
  absl::Time activate_time;
};

class CheckpointActivator {
 public:
  using Done = std::function<void(absl::StatusOr<ActivationResult>)>;

  // `state` and `listener` (the new schedulers' metrics; may be null) must
  // outlive the activator; `metrics` may be null.
  CheckpointActivator(ServingState* state, SchedulerListener* listener, ServingMetrics* metrics);
  ~CheckpointActivator();  // waits for an activation in progress

  // Where checkpoint ids come from (the job store). While it is null (the
  // default) only "base" can be activated; other ids get FAILED_PRECONDITION.
  // `catalog` must stay valid while an activation may run (in the daemon:
  // until Shutdown has returned). May be called at any time.
  void SetCatalog(jobs::CheckpointCatalog* catalog);

  // Exactly one of job_id (its latest checkpoint) or checkpoint_id. Runs the
  // activation on the activator's thread and calls `done` from it; calls
  // `done` at once (on the caller's thread) with ABORTED when another
  // activation is in progress, INVALID_ARGUMENT for a malformed request.
  void ActivateAsync(std::string job_id, std::string checkpoint_id, Done done);

  // The same, blocking.
  absl::StatusOr<ActivationResult> Activate(std::string job_id, std::string checkpoint_id);

 private:
  struct Target {
    std::string checkpoint_id;
    std::string model_name;
    std::string dir;
    // The catalog that pinned the checkpoint (retention keeps it); null for
    // "base".
    jobs::CheckpointCatalog* pinned_in = nullptr;
  };

  absl::StatusOr<ActivationResult> Run(const std::string& job_id, const std::string& checkpoint_id);
  absl::StatusOr<Target> Resolve(const std::string& job_id, const std::string& checkpoint_id);
  absl::StatusOr<ActivationResult> LoadAndSwitch(const Target& target);

  ServingState* const state_;
  SchedulerListener* const listener_;
  ServingMetrics* const metrics_;

  absl::Mutex mu_;
  jobs::CheckpointCatalog* catalog_ ABSL_GUARDED_BY(mu_) = nullptr;
  bool busy_ ABSL_GUARDED_BY(mu_) = false;
  std::string busy_with_ ABSL_GUARDED_BY(mu_);  // for the ABORTED message
  std::thread worker_ ABSL_GUARDED_BY(mu_);     // the last activation's thread
};

// FAILED_PRECONDITION naming the first difference that would change what
// clients see (architecture, vocabulary, tokenizer), else OK. Exposed for
// tests. Either tokenizer may be null (the directory has no tokenizer.json).
absl::Status CheckServingCompatible(const models::ModelConfig& served,
                                    const models::Tokenizer* served_tokenizer,
                                    const models::ModelConfig& candidate,
                                    const models::Tokenizer* candidate_tokenizer);

}  // namespace expertd::server

#endif  // EXPERTD_SERVER_CHECKPOINT_ACTIVATION_H_
