// ExpertUploader: ES-MoE's expert-wise pipeline for one layer's forward or
// backward. The order in which the experts will be used is known before the
// layer runs, so a thread copies ("uploads") expert k+1's weights from the
// host tier (the model's Parameters) into a device slot while expert k
// computes. Each slot reserves its bytes on the DeviceMemoryTracker: two
// slots when they fit, one (no overlap) when only one does, and
// ResourceExhausted naming the expert when none does. In backward a slot also
// holds the expert's gradient, which Done() adds into the host tier. With an
// ExpertTier (the SSD tier behind the host) the upload pins the expert on the
// host first (waiting while the tier reads it back); forward unpins it once
// copied, backward once Done() added the gradient.
#ifndef EXPERTD_ENGINE_TRAIN_EXPERT_UPLOADER_H_
#define EXPERTD_ENGINE_TRAIN_EXPERT_UPLOADER_H_

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/train/device_memory.h"
#include "engine/train/expert_tier.h"
#include "engine/train/moe_block.h"
#include "engine/train/trace_recorder.h"

namespace expertd::train {

// An expert's weights on the device: copies of the host parameters' values
// (adapters stay shared with the host: they are small and resident).
struct DeviceExpert {
  Parameter gate, up, down;
  DeviceReservation memory;
  MlpParams params() { return MlpParams{&gate, &up, &down}; }
};

// The bytes of an expert's weights (and gradients, when `with_grads`).
int64_t ExpertSlotBytes(const MlpParams& expert, bool with_grads);

// The upload: `host`'s weight values (and names, shapes, adapters) into
// `device`'s parameters; any device gradient is dropped.
void UploadExpertWeights(const MlpParams& host, DeviceExpert* device);
// The download: `device`'s gradients join `host`'s (moved when the host has
// none yet - bitwise what accumulating in place would give - added
// otherwise); the device is left without gradients.
void DownloadExpertGradients(DeviceExpert* device, const MlpParams& host);

// "model.layers.L.mlp.experts.E" from an expert's weight names.
std::string ExpertName(const MlpParams& expert);

class ExpertUploader {
 public:
  // Starts uploading p.experts[order[0]], [1], ... at most `depth` ahead.
  // `tier` (may be null) must outlive the uploader.
  ExpertUploader(const FeedForwardParams& p, std::vector<int> order, bool with_grads, int depth,
                 DeviceMemoryTracker* device, TraceRecorder* trace, ExpertTier* tier = nullptr);
  ~ExpertUploader();

  // Blocks until order[i] is on the device (i ascending, each once).
  absl::StatusOr<DeviceExpert*> Get(size_t i);
  // The consumer is done with order[i] (the last Get): its gradient (if any)
  // accumulates into the host parameter, `after_download` (if set) sees the
  // host expert (still pinned in the tier), and the slot is freed.
  void Done(size_t i, const std::function<void(const MlpParams&)>& after_download = {});
  int64_t uploaded_bytes() const;
  double upload_seconds() const;

 private:
  void Run();
  // The tier id of order_[i], or -1 without a tier.
  int TierId(size_t i) const;

  const FeedForwardParams& p_;
  const std::vector<int> order_;
  const bool with_grads_;
  const int depth_;
  DeviceMemoryTracker* const device_;
  TraceRecorder* const trace_;
  ExpertTier* const tier_;
  mutable std::mutex mu_;
  std::condition_variable changed_;
  std::deque<std::unique_ptr<DeviceExpert>> ready_;  // uploaded, from index done_
  size_t done_ = 0;                                  // experts the consumer finished
  size_t uploaded_ = 0;                              // experts uploaded
  int64_t uploaded_bytes_ = 0;
  double upload_seconds_ = 0;
  bool stop_ = false;
  absl::Status error_;
  std::thread thread_;
};

}  // namespace expertd::train

#endif  // EXPERTD_ENGINE_TRAIN_EXPERT_UPLOADER_H_
