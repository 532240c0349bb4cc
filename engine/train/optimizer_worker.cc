#include "engine/train/optimizer_worker.h"

namespace expertd::train {

OptimizerWorker::OptimizerWorker(std::function<absl::Status(size_t)> update)
    : update_(std::move(update)), thread_([this] { Run(); }) {}

OptimizerWorker::~OptimizerWorker() { Close().IgnoreError(); }

void OptimizerWorker::Push(size_t index) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(index);
  }
  cv_.notify_all();
}

void OptimizerWorker::Run() {
  for (;;) {
    size_t index;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return closed_ || !queue_.empty(); });
      if (queue_.empty()) return;  // closed and drained
      index = queue_.front();
      queue_.pop_front();
    }
    absl::Status st = update_(index);
    std::lock_guard<std::mutex> lock(mu_);
    if (status_.ok()) status_ = st;
  }
}

absl::Status OptimizerWorker::Close() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    closed_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  std::lock_guard<std::mutex> lock(mu_);
  return status_;
}

}  // namespace expertd::train
