#include "engine/train/expert_feed.h"

#include <chrono>

#include "base/status_macros.h"

namespace expertd::train {

ExpertFeed::ExpertFeed(const FeedForwardParams& p, const std::vector<int>& order, bool offload,
                       bool with_grads, const ExpertFeedSource& source,
                       std::function<void(const MlpParams&)> on_done)
    : p_(p),
      offload_(offload),
      with_grads_(with_grads),
      source_(source),
      on_done_(std::move(on_done)) {
  if (!offload) return;
  std::vector<int> uploads;
  for (int e : order) {
    if (source.cache == nullptr || source.cache->Find(source.layer, e) == nullptr) {
      uploads.push_back(e);
    }
  }
  if (uploads.empty()) return;
  uploader_ = std::make_unique<ExpertUploader>(p, std::move(uploads), with_grads, 2, source.device,
                                               source.trace, source.tier);
}

absl::StatusOr<MlpParams> ExpertFeed::Get(int expert) {
  if (!offload_) return p_.experts[expert];
  if (current_ == expert) return slot_->params();
  Finish();  // frees the slot before asking for the next (see ExpertUploader)
  DeviceExpert* cached =
      source_.cache != nullptr ? source_.cache->Find(source_.layer, expert) : nullptr;
  if (cached != nullptr) {
    slot_ = cached;
    slot_cached_ = true;
  } else {
    if (uploader_ == nullptr) return absl::InternalError("expert feed: no upload planned");
    ASSIGN_OR_RETURN(slot_, uploader_->Get(next_));
    slot_cached_ = false;
  }
  current_ = expert;
  return slot_->params();
}

void ExpertFeed::Finish(bool complete) {
  if (!offload_ || current_ < 0) return;
  const MlpParams& host = p_.experts[current_];
  if (!slot_cached_) {
    uploader_->Done(next_++, complete ? on_done_ : nullptr);
  } else if (with_grads_) {  // the cached copy stays; its gradient goes to the host
    const auto start = std::chrono::steady_clock::now();
    DownloadExpertGradients(slot_, host);
    cache_seconds_ +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    cache_bytes_ += ExpertSlotBytes(host, true) - ExpertSlotBytes(host, false);
    if (complete && on_done_) on_done_(host);
  }
  slot_ = nullptr;
  current_ = -1;
}

int64_t ExpertFeed::uploaded_bytes() const {
  return cache_bytes_ + (uploader_ ? uploader_->uploaded_bytes() : 0);
}

double ExpertFeed::upload_seconds() const {
  return cache_seconds_ + (uploader_ ? uploader_->upload_seconds() : 0);
}

}  // namespace expertd::train
