// ComputeCostModel: where a missed expert runs (--expert_compute). For one
// MoE layer of one step it splits the missed experts between
//
//   device: page the expert (expert_bytes / page rate), then compute it on the
//           device after the resident experts (device MLP time at n tokens);
//   host:   compute it on the host from the host tier (host MLP time at n
//           tokens) and move only its activations (2 n hidden fp32 values at
//           the page rate);
//
// so that the layer's predicted time is small: max(device, host timeline)
// when the two sides run on separate hardware and overlap (a GPU and the
// CPU), their sum when they share it (the CPU backend: the "device" is the
// same cores and memory). Missed experts are placed greedily, fewest tokens
// first, each on the side that ends the layer earlier (ties to the device). A
// few tokens per expert (decode) cost the host little and a whole page on the
// device, so they go to the host; many tokens (prefill) make the host's
// compute dominate, so they are paged.
//
// The rates are measured: a start-up calibration (ExpertStore) gives the
// first ones, then every observed page, host job and device expert refines
// them: each side's line is refitted through two moving-average points, one
// of small jobs (<= kSmallJobTokens rows) and one of larger ones.
//
// Thread safety: every method is thread-safe.
#ifndef EXPERTD_ENGINE_EXPERTS_COMPUTE_COST_MODEL_H_
#define EXPERTD_ENGINE_EXPERTS_COMPUTE_COST_MODEL_H_

#include <cstdint>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"

namespace expertd::engine {

enum class ExpertComputeMode {
  kDevice,  // page every missed expert (the default)
  kHost,    // compute every missed expert on the host (llama.cpp --n-cpu-moe)
  kAuto,    // per expert, by the cost model
};
const char* ExpertComputeModeName(ExpertComputeMode mode);  // "device", "host", "auto"
bool ParseExpertComputeMode(absl::string_view name, ExpertComputeMode* mode);

// Seconds to compute one expert's SwiGLU MLP on n tokens: fixed + n * per_token
// (the fixed part is reading the weights, the per-token part the FLOPs).
struct LinearCost {
  double fixed_s = 0;
  double per_token_s = 0;
  double At(int64_t tokens) const { return fixed_s + per_token_s * static_cast<double>(tokens); }
  // The line through (n1, t1) and (n2, t2), n1 < n2; never negative.
  static LinearCost Fit(int64_t n1, double t1, int64_t n2, double t2);
};

struct ComputeRates {
  double page_bytes_per_s = 0;  // an expert's bytes into the device cache
  LinearCost host;              // one expert on the host
  LinearCost device;            // one expert on the device
};

// One expert a layer's router chose this step.
struct ExpertDemand {
  int32_t expert = 0;
  int64_t tokens = 0;     // rows routed to it
  bool resident = false;  // on the device or already being loaded
};

// Jobs of at most this many rows refine a side's fixed cost, larger ones its
// per-token cost.
inline constexpr int64_t kSmallJobTokens = 8;

struct ComputePlan {
  std::vector<int32_t> host;  // experts to compute on the host, ascending
  double device_s = 0;        // predicted device timeline (resident + paged)
  double host_s = 0;          // predicted host timeline
  bool overlap = true;        // the sides run in parallel on separate hardware
  double predicted_s() const {
    return overlap ? (device_s > host_s ? device_s : host_s) : device_s + host_s;
  }
};

class ComputeCostModel {
 public:
  // expert_bytes: bytes paged per expert; hidden: the model's hidden size;
  // overlap: whether host and device compute run on separate hardware.
  ComputeCostModel(ExpertComputeMode mode, ComputeRates rates, uint64_t expert_bytes,
                   int64_t hidden, bool overlap = true);

  ExpertComputeMode mode() const { return mode_; }
  // The split of one layer's demands (any order) by the mode: kDevice puts
  // nothing on the host, kHost every missed expert, kAuto the cheaper side.
  ComputePlan Plan(absl::Span<const ExpertDemand> demands) const;

  // Measurements that refine the rates.
  void ObservePage(uint64_t bytes, double seconds);
  void ObserveHost(int64_t tokens, double seconds);
  void ObserveDevice(int64_t tokens, double seconds);

  // The rates in use now (refitted from the measurements).
  ComputeRates rates() const;

 private:
  // A side's cost line through a small-job and a large-job point, each a
  // moving average of (rows, seconds).
  struct Points {
    double small_n = 1, small_s = 0, large_n = 64, large_s = 0;
    LinearCost Line() const;
    void Observe(int64_t tokens, double seconds);
  };
  static Points PointsOf(const LinearCost& line);
  double PageSeconds() const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  double HostSeconds(int64_t tokens) const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  double DeviceSeconds(int64_t tokens) const ABSL_SHARED_LOCKS_REQUIRED(mu_);

  const ExpertComputeMode mode_;
  const uint64_t expert_bytes_;
  const int64_t hidden_;
  const bool overlap_;
  mutable absl::Mutex mu_;
  double page_bytes_per_s_ ABSL_GUARDED_BY(mu_);
  Points host_ ABSL_GUARDED_BY(mu_), device_ ABSL_GUARDED_BY(mu_);
};

}  // namespace expertd::engine

#endif  // EXPERTD_ENGINE_EXPERTS_COMPUTE_COST_MODEL_H_
