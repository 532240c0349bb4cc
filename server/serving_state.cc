#include "server/serving_state.h"

#include <algorithm>
#include <deque>
#include <thread>

#include "base/log.h"

namespace expertd::server {

// Destroys released models on its own thread. Shared-owned by the deleters of
// the models it wraps, so a model released late can always reach it.
class ServingState::Releaser : public std::enable_shared_from_this<Releaser> {
 public:
  static std::shared_ptr<Releaser> Create() {
    auto releaser = std::make_shared<Releaser>();
    releaser->thread_ = std::thread([r = releaser.get()] { r->Loop(); });
    return releaser;
  }

  // A handle on `model` whose last copy hands `model` to this thread.
  std::shared_ptr<const LoadedModel> Wrap(std::shared_ptr<const LoadedModel> model) {
    {
      absl::MutexLock lock(&mu_);
      ++outstanding_;
    }
    const LoadedModel* raw = model.get();
    return std::shared_ptr<const LoadedModel>(
        raw, [self = shared_from_this(), model = std::move(model)](const LoadedModel*) mutable {
          self->Post(std::move(model));
        });
  }

  // Waits up to `timeout` for every wrapped model to be destroyed, then stops
  // the thread. A model still held then (a bug elsewhere) is reported and the
  // thread is left running for it rather than freeing what it still uses.
  void Stop(absl::Duration timeout) {
    bool all_released;
    {
      absl::MutexLock lock(&mu_);
      auto released = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return outstanding_ == 0; };
      all_released = mu_.AwaitWithTimeout(absl::Condition(&released), timeout);
      if (all_released) stop_ = true;
    }
    if (all_released) {
      thread_.join();
    } else {
      EXPERTD_LOG(Error, "a served model is still referenced at shutdown; not destroying it");
      self_ = shared_from_this();  // the detached thread may outlive every other owner
      thread_.detach();
    }
  }

 private:
  void Post(std::shared_ptr<const LoadedModel> model) {
    absl::MutexLock lock(&mu_);
    queue_.push_back(std::move(model));
  }

  void Loop() {
    for (;;) {
      std::shared_ptr<const LoadedModel> next;
      {
        absl::MutexLock lock(&mu_);
        auto ready = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return stop_ || !queue_.empty(); };
        mu_.Await(absl::Condition(&ready));
        if (queue_.empty()) return;  // stop_ and nothing left
        next = std::move(queue_.front());
        queue_.pop_front();
      }
      next.reset();  // ~ModelRuntime: drains its scheduler, frees weights and KV cache
      absl::MutexLock lock(&mu_);
      --outstanding_;
    }
  }

  absl::Mutex mu_;
  std::deque<std::shared_ptr<const LoadedModel>> queue_ ABSL_GUARDED_BY(mu_);
  int64_t outstanding_ ABSL_GUARDED_BY(mu_) = 0;  // wrapped, not yet destroyed
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
  std::shared_ptr<Releaser> self_;  // set only when the thread is detached
};

ServingState::ServingState(ServerOptions options, Clock* clock)
    : options_(std::move(options)),
      clock_(clock),
      start_time_(clock->Now()),
      releaser_(Releaser::Create()) {}

ServingState::~ServingState() {
  {
    absl::MutexLock lock(&mu_);
    model_.reset();
    retired_.clear();
  }
  releaser_->Stop(absl::Seconds(30));
}

std::shared_ptr<const LoadedModel> ServingState::model() const {
  absl::MutexLock lock(&mu_);
  return model_;
}

void ServingState::SetModel(std::shared_ptr<const LoadedModel> model) {
  std::shared_ptr<const LoadedModel> previous;  // released outside the lock
  if (model != nullptr) model = releaser_->Wrap(std::move(model));
  absl::MutexLock lock(&mu_);
  retired_.erase(std::remove_if(retired_.begin(), retired_.end(),
                                [](const auto& weak) { return weak.expired(); }),
                 retired_.end());
  if (model_ != nullptr) retired_.push_back(model_);
  previous = std::move(model_);
  model_ = std::move(model);
}

std::vector<std::shared_ptr<const LoadedModel>> ServingState::live_models() const {
  std::vector<std::shared_ptr<const LoadedModel>> live;
  absl::MutexLock lock(&mu_);
  if (model_ != nullptr) live.push_back(model_);
  for (const auto& weak : retired_) {
    if (auto m = weak.lock()) live.push_back(std::move(m));
  }
  return live;
}

absl::Status ServingState::CheckAcceptingRequests() const {
  if (draining())
    return absl::UnavailableError("server is shutting down; retry on another replica");
  if (model() == nullptr) return absl::UnavailableError("model is still loading; retry shortly");
  return absl::OkStatus();
}

}  // namespace expertd::server
