// Internal to MultiDeviceExperts: one device's state and the per-layer step
// of each strategy (shard_step.cc, expert_parallel_step.cc).
#ifndef EXPERTD_ENGINE_PARALLEL_RANK_STATE_H_
#define EXPERTD_ENGINE_PARALLEL_RANK_STATE_H_

#include <time.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "engine/backend/backend.h"
#include "engine/model/expert_gemm.h"
#include "engine/model/expert_provider.h"
#include "engine/model/workspace.h"
#include "engine/parallel/collectives.h"
#include "engine/parallel/expert_shard.h"

namespace expertd::engine::parallel {

// The step's rows grouped by expert (counting sort by expert id).
struct ExpertGroups {
  std::vector<int64_t> offset;  // [num_experts + 1] into the arrays below
  std::vector<int32_t> row;     // the source row of each entry
  std::vector<int32_t> slot;    // the entry's slot (destination row)
};
// Groups entries i (expert[i], row[i], slot[i]) by expert, stable in i.
ExpertGroups GroupEntries(const std::vector<int32_t>& expert, const std::vector<int32_t>& row,
                          const std::vector<int32_t>& slot, int64_t num_experts);

// Per-layer constants of one step.
struct LayerStep {
  int layer = 0;
  int64_t rows = 0, top_k = 0, hidden = 0, num_experts = 0;
  double capacity_factor = 0;
};

struct RankState {
  ParallelTopology topology;
  std::unique_ptr<Backend> backend;
  // With expert offloading: this device's slice of every expert and the
  // store that packs and pages it (null when offloading is off, or when the
  // device holds no shard). The store reads the source: declared after it.
  std::unique_ptr<WeightSource> shard_source;
  std::unique_ptr<ExpertProvider> store;
  std::unique_ptr<Workspace> ws;
  std::unique_ptr<Collectives> comm;
  std::vector<HeldExpert> experts;  // [layer * num_experts + expert]
  std::vector<int32_t> owner;       // kExpert: owning rank of each expert
  std::vector<int32_t> host_ids;    // this step's routing, host copy
  std::vector<float> zeros;         // a host block of zeros, grown as needed
  ExpertGemm expert_gemm = ExpertGemm::kAuto;  // MoEShard's expert GEMMs
  // Scratch of the expert-parallel exchange (device memory).
  DeviceBuffer send, recv, results, back, slots, gathered;
  std::atomic<int64_t> work{0};     // rows x intermediate columns computed
  std::atomic<int64_t> dropped{0};  // kExpert: assignments over capacity
  // Benchmarks only: when set, every compute section (everything between
  // collectives) runs under this mutex, so each device's share runs alone
  // even when D virtual devices share fewer cores; compute_ns sums the
  // sections' CPU time on this thread (a one-thread CPU backend runs its ops
  // on the calling thread), which other processes' load does not inflate.
  absl::Mutex* serialize_compute = nullptr;
  int64_t compute_ns = 0;
};

// Marks a compute section of a rank's step (see RankState::serialize_compute).
class ComputeSection {
 public:
  explicit ComputeSection(RankState& r) : r_(r) {
    if (r_.serialize_compute != nullptr) r_.serialize_compute->Lock();
    start_ = ThreadCpuNanos();
  }
  ~ComputeSection() {
    r_.compute_ns += ThreadCpuNanos() - start_;
    if (r_.serialize_compute != nullptr) r_.serialize_compute->Unlock();
  }
  ComputeSection(const ComputeSection&) = delete;
  ComputeSection& operator=(const ComputeSection&) = delete;

 private:
  static int64_t ThreadCpuNanos() {
    timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
  }

  RankState& r_;
  int64_t start_ = 0;
};

// Grows *buf to at least `bytes` of rank device memory.
absl::Status EnsureBuffer(Backend* backend, DeviceBuffer* buf, uint64_t bytes);
// Zeroes n floats at dst (device memory of r.backend), copying from r.zeros.
absl::Status ZeroOnDevice(RankState& r, float* dst, int64_t n);

// Inputs are in r.ws: Buf::kNormed [rows, hidden], kTopkIds, kTopkWeights
// [rows, top_k], and r.host_ids. Each leaves the layer's combined routed
// output in r.ws Buf::kFfnOut [rows, hidden] on every rank.
absl::Status ShardStep(RankState& r, const LayerStep& s);
absl::Status ExpertParallelStep(RankState& r, const LayerStep& s);

}  // namespace expertd::engine::parallel

#endif  // EXPERTD_ENGINE_PARALLEL_RANK_STATE_H_
