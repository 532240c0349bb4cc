// ServingState: what every RPC handler needs to know about the daemon's
// lifecycle (loading -> ready -> draining) and the served model. Shared by the
// services; thread-safe.
//
// The served model can change while the daemon runs (a checkpoint is
// activated). A handler takes model() once and keeps that shared_ptr for the
// whole request, so a request runs on one model from start to end. A model
// replaced by SetModel stays alive while anything still holds it and is
// destroyed on the state's release thread once the last holder lets go: never
// on a scheduler thread (its own scheduler would join itself) nor on an RPC
// thread (destroying a runtime drains a scheduler and frees gigabytes).
#ifndef EXPERTD_SERVER_SERVING_STATE_H_
#define EXPERTD_SERVER_SERVING_STATE_H_

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "base/clock.h"
#include "models/config/model_config.h"
#include "server/options.h"

namespace expertd::server {

class ModelRuntime;

// The checkpoint id of the model the daemon was started with (--model_dir).
inline constexpr char kBaseCheckpointId[] = "base";

// Everything known about the served model once loading finished. Immutable;
// replaced as a whole (shared_ptr) when a new checkpoint is activated.
struct LoadedModel {
  std::string name;
  std::string dir;
  std::string checkpoint_id = kBaseCheckpointId;  // what ActivateCheckpoint names it by
  models::ModelConfig config;
  std::shared_ptr<ModelRuntime> runtime;  // engine, tokenizer, scheduler
};

class ServingState {
 public:
  // `clock` (the daemon's source of request arrival times, uptime and
  // scheduler time) must outlive the state.
  explicit ServingState(ServerOptions options, Clock* clock = RealClock::Get());
  // Waits (bounded) until every model set here has been released.
  ~ServingState();

  const ServerOptions& options() const { return options_; }
  absl::Time start_time() const { return start_time_; }
  Clock* clock() const { return clock_; }

  // Null while the model is loading.
  std::shared_ptr<const LoadedModel> model() const;
  // Makes `model` the one new requests get. The previous one is retired: it
  // keeps serving whoever holds it and is destroyed on the release thread
  // when the last holder lets go.
  void SetModel(std::shared_ptr<const LoadedModel> model);
  // The served model first (when there is one), then every retired model
  // still held by a request. For draining all of them at shutdown and for
  // counting requests across them.
  std::vector<std::shared_ptr<const LoadedModel>> live_models() const;

  void BeginDrain() { draining_.store(true); }
  bool draining() const { return draining_.load(); }
  bool ready() const { return model() != nullptr && !draining(); }

  // OK when new inference requests may start; UNAVAILABLE (with why) otherwise.
  absl::Status CheckAcceptingRequests() const;

 private:
  class Releaser;

  const ServerOptions options_;
  Clock* const clock_;
  const absl::Time start_time_;
  std::atomic<bool> draining_{false};
  // Declared before model_, so it outlives the last model handed to it.
  const std::shared_ptr<Releaser> releaser_;
  mutable absl::Mutex mu_;
  std::shared_ptr<const LoadedModel> model_ ABSL_GUARDED_BY(mu_);
  std::vector<std::weak_ptr<const LoadedModel>> retired_ ABSL_GUARDED_BY(mu_);
};

}  // namespace expertd::server

#endif  // EXPERTD_SERVER_SERVING_STATE_H_
