// ServingState: what every RPC handler needs to know about the daemon's
// lifecycle (loading -> ready -> draining) and the loaded model. Shared by the
// services; thread-safe.
#ifndef EXPERTD_SERVER_SERVING_STATE_H_
#define EXPERTD_SERVER_SERVING_STATE_H_

#include <atomic>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "base/clock.h"
#include "models/config/model_config.h"
#include "server/options.h"

namespace expertd::server {

class ModelRuntime;

// Everything known about the served model once loading finished. Immutable;
// replaced as a whole (shared_ptr) when a new checkpoint is activated.
struct LoadedModel {
  std::string name;
  std::string dir;
  models::ModelConfig config;
  std::shared_ptr<ModelRuntime> runtime;  // engine, tokenizer, scheduler
};

class ServingState {
 public:
  // `clock` (the daemon's source of request arrival times, uptime and
  // scheduler time) must outlive the state.
  explicit ServingState(ServerOptions options, Clock* clock = RealClock::Get());

  const ServerOptions& options() const { return options_; }
  absl::Time start_time() const { return start_time_; }
  Clock* clock() const { return clock_; }

  // Null while the model is loading.
  std::shared_ptr<const LoadedModel> model() const;
  void SetModel(std::shared_ptr<const LoadedModel> model);

  void BeginDrain() { draining_.store(true); }
  bool draining() const { return draining_.load(); }
  bool ready() const { return model() != nullptr && !draining(); }

  // OK when new inference requests may start; UNAVAILABLE (with why) otherwise.
  absl::Status CheckAcceptingRequests() const;

 private:
  const ServerOptions options_;
  Clock* const clock_;
  const absl::Time start_time_;
  std::atomic<bool> draining_{false};
  mutable absl::Mutex mu_;
  std::shared_ptr<const LoadedModel> model_ ABSL_GUARDED_BY(mu_);
};

}  // namespace expertd::server

#endif  // EXPERTD_SERVER_SERVING_STATE_H_
