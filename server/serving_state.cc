#include "server/serving_state.h"

namespace expertd::server {

ServingState::ServingState(ServerOptions options, Clock* clock)
    : options_(std::move(options)), clock_(clock), start_time_(clock->Now()) {}

std::shared_ptr<const LoadedModel> ServingState::model() const {
  absl::MutexLock lock(&mu_);
  return model_;
}

void ServingState::SetModel(std::shared_ptr<const LoadedModel> model) {
  absl::MutexLock lock(&mu_);
  model_ = std::move(model);
}

absl::Status ServingState::CheckAcceptingRequests() const {
  if (draining())
    return absl::UnavailableError("server is shutting down; retry on another replica");
  if (model() == nullptr) return absl::UnavailableError("model is still loading; retry shortly");
  return absl::OkStatus();
}

}  // namespace expertd::server
