// ExpertFeed: walks one layer's experts in use order for a forward or a
// backward on one device. Get(expert) returns the expert's weights: in place
// when the experts are resident; offloaded, from the device's cache of pinned
// experts when it holds the expert, else through an ExpertUploader (two
// slots on the device's tracker: expert k+1 uploads while expert k computes).
// In backward, once the caller moves past an expert (or calls Finish), the
// expert's device gradient joins the host's and `on_done` sees the host
// expert.
//
// Thread safety: one thread uses a feed (its uploader has its own thread).
#ifndef EXPERTD_ENGINE_TRAIN_EXPERT_FEED_H_
#define EXPERTD_ENGINE_TRAIN_EXPERT_FEED_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/train/device_expert_cache.h"
#include "engine/train/device_memory.h"
#include "engine/train/expert_tier.h"
#include "engine/train/expert_uploader.h"
#include "engine/train/moe_block.h"
#include "engine/train/trace_recorder.h"

namespace expertd::train {

// Where a feed's experts come from when offloaded.
struct ExpertFeedSource {
  DeviceMemoryTracker* device = nullptr;  // the slots' memory
  TraceRecorder* trace = nullptr;         // may be null
  ExpertTier* tier = nullptr;             // the SSD tier behind the host; may be null
  DeviceExpertCache* cache = nullptr;     // pinned experts; may be null
  int layer = -1;                         // the cache's key for this layer
};

class ExpertFeed {
 public:
  // p.experts[order[0]], [1], ... in turn; `offload` false: in place. What
  // `source` points to must outlive the feed.
  ExpertFeed(const FeedForwardParams& p, const std::vector<int>& order, bool offload,
             bool with_grads, const ExpertFeedSource& source,
             std::function<void(const MlpParams&)> on_done = {});
  ~ExpertFeed() { Finish(/*complete=*/false); }  // an error path: no gradient is final

  // REQUIRES: experts in `order`'s order; an expert may be asked for again
  // while it is the current one.
  absl::StatusOr<MlpParams> Get(int expert);
  // Done with the current expert (its gradient is final when `complete`).
  void Finish(bool complete = true);
  // What moved between host and device: uploads through the slots, and the
  // cached experts' gradients coming back.
  int64_t uploaded_bytes() const;
  double upload_seconds() const;

 private:
  const FeedForwardParams& p_;
  const bool offload_, with_grads_;
  const ExpertFeedSource source_;
  const std::function<void(const MlpParams&)> on_done_;
  std::unique_ptr<ExpertUploader> uploader_;  // the experts the cache does not hold
  DeviceExpert* slot_ = nullptr;              // the current expert's weights
  bool slot_cached_ = false;
  int current_ = -1;
  size_t next_ = 0;  // the uploader's next index
  int64_t cache_bytes_ = 0;
  double cache_seconds_ = 0;
};

}  // namespace expertd::train

#endif  // EXPERTD_ENGINE_TRAIN_EXPERT_FEED_H_
