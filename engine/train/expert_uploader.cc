#include "engine/train/expert_uploader.h"

#include <chrono>

#include "absl/strings/str_cat.h"

namespace expertd::train {

namespace {

Parameter DeviceCopy(const Parameter& host) {
  Parameter d;
  d.name = host.name;
  d.shape = host.shape;
  d.dtype = host.dtype;
  d.value = host.value;  // the upload
  d.trainable = host.trainable;
  d.lora_a = host.lora_a;
  d.lora_b = host.lora_b;
  d.lora_scaling = host.lora_scaling;
  return d;
}

// The device gradient joins the host tier's: moved when the host has none
// yet (bitwise what accumulating in place would give), added otherwise.
void Download(Parameter* device, Parameter* host) {
  if (!device->has_grad) return;
  if (!host->has_grad) {
    host->grad = std::move(device->grad);
    host->has_grad = true;
  } else {
    for (size_t i = 0; i < host->grad.size(); ++i) host->grad[i] += device->grad[i];
  }
  device->has_grad = false;
}

}  // namespace

std::string ExpertName(const MlpParams& e) {
  const std::string& n = e.gate->name;  // model.layers.L.mlp.experts.E.gate_proj.weight
  const size_t cut = n.rfind('.', n.rfind('.') - 1);
  return cut == std::string::npos ? n : n.substr(0, cut);
}

void UploadExpertWeights(const MlpParams& host, DeviceExpert* device) {
  device->gate = DeviceCopy(*host.gate);
  device->up = DeviceCopy(*host.up);
  device->down = DeviceCopy(*host.down);
}

void DownloadExpertGradients(DeviceExpert* device, const MlpParams& host) {
  Download(&device->gate, host.gate);
  Download(&device->up, host.up);
  Download(&device->down, host.down);
}

int64_t ExpertSlotBytes(const MlpParams& expert, bool with_grads) {
  int64_t bytes = 0;
  for (const Parameter* w : {expert.gate, expert.up, expert.down}) {
    // From the shape: the values of an expert in the SSD tier are not in memory.
    int64_t numel = 1;
    for (int64_t d : w->shape) numel *= d;
    bytes += numel * static_cast<int64_t>(sizeof(float));
    if (with_grads && w->trainable) bytes += numel * static_cast<int64_t>(sizeof(float));
  }
  return bytes;
}

ExpertUploader::ExpertUploader(const FeedForwardParams& p, std::vector<int> order, bool with_grads,
                               int depth, DeviceMemoryTracker* device, TraceRecorder* trace,
                               ExpertTier* tier)
    : p_(p),
      order_(std::move(order)),
      with_grads_(with_grads),
      depth_(std::max(1, depth)),
      device_(device),
      trace_(trace),
      tier_(tier),
      thread_([this] { Run(); }) {}

ExpertUploader::~ExpertUploader() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  changed_.notify_all();
  thread_.join();
  // Uploaded for backward but never consumed (an error path): their pins go.
  for (size_t k = 0; k < ready_.size(); ++k) {
    if (TierId(done_ + k) >= 0 && with_grads_) tier_->Unpin(TierId(done_ + k), false);
  }
}

int ExpertUploader::TierId(size_t i) const {
  return tier_ == nullptr ? -1 : tier_->IdOf(p_.experts[order_[i]].gate);
}

void ExpertUploader::Run() {
  for (size_t i = 0; i < order_.size(); ++i) {
    const MlpParams& host = p_.experts[order_[i]];
    const int64_t bytes = ExpertSlotBytes(host, with_grads_);
    auto slot = std::make_unique<DeviceExpert>();
    {
      std::unique_lock<std::mutex> lock(mu_);
      // At most depth_ slots in flight; past the budget, wait for the
      // consumer to free every slot, then fail if one still does not fit.
      changed_.wait(lock, [&] { return stop_ || uploaded_ - done_ < static_cast<size_t>(depth_); });
      while (!stop_) {
        absl::Status st =
            slot->memory.Acquire(device_, bytes, absl::StrCat("expert weights ", ExpertName(host)));
        if (st.ok()) break;
        if (uploaded_ == done_) {
          error_ = st;
          stop_ = true;
          break;
        }
        changed_.wait(lock, [&] { return stop_ || uploaded_ == done_; });
      }
      if (stop_) break;
    }
    const int id = TierId(i);
    if (id >= 0) {
      absl::Status st = tier_->Pin(id);
      if (!st.ok()) {
        std::lock_guard<std::mutex> lock(mu_);
        error_ = st;
        stop_ = true;
        break;
      }
    }
    const auto start = std::chrono::steady_clock::now();
    {
      TraceRecorder::Span span(trace_, "upload " + ExpertName(host), TraceRecorder::kUpload);
      UploadExpertWeights(host, slot.get());
    }
    if (id >= 0 && !with_grads_) tier_->Unpin(id, false);  // forward only reads it
    std::lock_guard<std::mutex> lock(mu_);
    upload_seconds_ +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    uploaded_bytes_ += bytes;
    ready_.push_back(std::move(slot));
    ++uploaded_;
    changed_.notify_all();
  }
  changed_.notify_all();
}

absl::StatusOr<DeviceExpert*> ExpertUploader::Get(size_t i) {
  std::unique_lock<std::mutex> lock(mu_);
  changed_.wait(lock, [&] { return uploaded_ > i || !error_.ok() || stop_; });
  if (uploaded_ <= i) {
    return error_.ok() ? absl::InternalError("expert upload stopped") : error_;
  }
  return ready_[i - done_].get();
}

void ExpertUploader::Done(size_t i,
                          const std::function<void(const MlpParams&)>& after_download) {
  std::unique_ptr<DeviceExpert> slot;
  {
    std::lock_guard<std::mutex> lock(mu_);
    slot = std::move(ready_.front());
    ready_.pop_front();
  }
  const MlpParams& host = p_.experts[order_[i]];
  DownloadExpertGradients(slot.get(), host);
  if (after_download) after_download(host);
  if (TierId(i) >= 0 && with_grads_) tier_->Unpin(TierId(i), true);
  slot.reset();  // frees the slot's device bytes
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++done_;
  }
  changed_.notify_all();
}

double ExpertUploader::upload_seconds() const {
  std::lock_guard<std::mutex> lock(mu_);
  return upload_seconds_;
}

int64_t ExpertUploader::uploaded_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return uploaded_bytes_;
}

}  // namespace expertd::train
