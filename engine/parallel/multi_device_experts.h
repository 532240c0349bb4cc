// MultiDeviceExperts: an MoE layer's routed experts spread over D devices,
// plugged into the engine as an ExpertProvider that computes the routed
// experts itself (ExpertProvider::routed_experts(), engine/model/
// routed_experts.h). Everything else in the model (embedding, attention,
// routers, shared experts, lm_head) stays with the engine; its routing and
// normalised input are broadcast from rank 0 to every device each layer, so
// the devices see exactly the replicated inputs the non-expert part of an SPMD
// run would compute.
//
// Two strategies, chosen by MoeParallelism:
//
//  kShard (MoEShard): every expert's gate/up are split by rows of the HF
//    [intermediate, hidden] tensors (columns of W in x W) and down by the
//    matching columns of [hidden, intermediate] into D contiguous shards
//    (ExpertColumns, expert_shard.h: cut on the scale-block boundaries of
//    FP8 / quantized experts, uneven splits handled). Each device runs ITS shard of every
//    routed expert over ALL tokens routed to that expert, combines with the
//    routing weights into a partial [rows, hidden], and the partials are
//    summed by AllReduceSum (rank order, so reproducible). Every device does
//    1/D of every expert's work: perfect balance whatever the routing skew,
//    no token dropped. Differs from one device only by fp32 summation order.
//
//  kExpert (expert parallelism, the baseline): device r owns the whole
//    experts EvenShard(E, D, r) and the token rows EvenShard(rows, D, r).
//    Each device sends its tokens' rows to the experts' owners (AllToAllV),
//    owners compute, results come back (AllToAllV), each device combines its
//    tokens, and AllGather replicates the output. With capacity_factor > 0 an
//    expert takes at most ceil(capacity_factor * rows * top_k / E) rows per
//    step, in (source rank, token, rank) order; the rest are dropped (their
//    output is zero) and counted. Without a capacity factor nothing is dropped
//    and the result is bitwise the single-device one on the CPU backend.
//
// Devices: with the CPU backend each device is a virtual device: its own
// CpuBackend (threads_per_device workers) and budget, one thread per rank
// (RankThreads), InProcessCollectives between them. With
// MultiDeviceOptions::offload (MoEShard only) each device's experts are not
// resident: each device gets its own ExpertStore over a ShardWeightSource,
// so it packs, caches and pages only its slice (1/D of every expert's bytes),
// with the store's budget, tiers, policy and storage format applied per
// device. Resident experts are stored as MultiDeviceOptions::storage says
// (the checkpoint's dtype, FP8 included, or int8 / int4 / mxfp4 quantized at
// load like the expert pack would).
//
// Thread safety: the ExpertProvider / RoutedExperts methods are called by the
// engine thread only; MultiDeviceCounters from any thread.
#ifndef EXPERTD_ENGINE_PARALLEL_MULTI_DEVICE_EXPERTS_H_
#define EXPERTD_ENGINE_PARALLEL_MULTI_DEVICE_EXPERTS_H_

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "engine/backend/backend.h"
#include "engine/experts/expert_store_options.h"
#include "engine/experts/expert_store_stats.h"
#include "engine/model/expert_gemm.h"
#include "engine/model/expert_provider.h"
#include "engine/parallel/expert_shard.h"
#include "engine/parallel/in_process_collectives.h"
#include "engine/parallel/rendezvous.h"

namespace expertd::engine::parallel {

enum class MoeParallelism { kShard, kExpert };

// "shard" | "expert"; InvalidArgument otherwise.
absl::StatusOr<MoeParallelism> ParseMoeParallelism(const std::string& name);
const char* MoeParallelismName(MoeParallelism mode);

// What a provider has done since creation; updated after every MoE layer.
// Thread-safe.
class MultiDeviceCounters {
 public:
  struct Snapshot {
    int64_t dropped_assignments = 0;   // kExpert: (token, expert) pairs over capacity
    std::vector<int64_t> device_work;  // per device: rows x intermediate columns computed
    std::vector<uint64_t> device_expert_bytes;  // per device: expert bytes it holds or pages
                                                // (one slot per expert when offloading)
  };
  Snapshot Get() const {
    absl::MutexLock lock(&mu_);
    return s_;
  }
  void SetExpertBytes(std::vector<uint64_t> bytes) {
    absl::MutexLock lock(&mu_);
    s_.device_expert_bytes = std::move(bytes);
  }
  void Add(int64_t dropped, const std::vector<int64_t>& work) {
    absl::MutexLock lock(&mu_);
    s_.dropped_assignments += dropped;
    s_.device_work.resize(work.size());
    for (size_t d = 0; d < work.size(); ++d) s_.device_work[d] += work[d];
  }

  // With expert offloading, each device's store counters now (one entry per
  // device, in rank order; a device whose slice is empty has no store and
  // reports default counters). Empty without offloading, and once the
  // provider is gone.
  std::vector<ExpertStoreStats> DeviceStoreStats() const {
    absl::MutexLock lock(&mu_);
    return store_stats_ ? store_stats_() : std::vector<ExpertStoreStats>();
  }
  // The provider's reader of its stores (cleared with nullptr when it goes).
  void SetDeviceStoreStats(std::function<std::vector<ExpertStoreStats>()> read) {
    absl::MutexLock lock(&mu_);
    store_stats_ = std::move(read);
  }

 private:
  mutable absl::Mutex mu_;
  Snapshot s_ ABSL_GUARDED_BY(mu_);
  std::function<std::vector<ExpertStoreStats>()> store_stats_ ABSL_GUARDED_BY(mu_);
};

struct MultiDeviceOptions {
  int devices = 2;  // D >= 1
  MoeParallelism mode = MoeParallelism::kShard;
  double capacity_factor = 0;                     // kExpert only; 0 = dropless
  BackendOptions device_backend;                  // each virtual device's backend ("cpu")
  InProcessOptions collectives;                   // rendezvous deadline
  std::shared_ptr<MultiDeviceCounters> counters;  // optional
  ExpertShardStorage storage;                     // kDense: as the checkpoint stores them
  // Each device's expert GEMMs (MoEShard, resident shards): one per expert
  // or grouped; kAuto = the measured rule (engine/model/expert_gemm.h) on
  // the device's backend and shard width. Results are bitwise the same.
  ExpertGemm expert_gemm = ExpertGemm::kAuto;
  // Set: expert offloading, one store per device over its shard (kShard only;
  // storage comes from offload->storage, `storage` above must stay dense).
  // A pack_dir gets one subdirectory per device; empty, each device's pack
  // goes to the store's cache directory under its own content fingerprint.
  std::optional<ExpertStoreOptions> offload;
  // Set: this process is one node (pod) of several, driving `devices` =
  // nodes->devices_per_node local ranks of a world of nodes x devices ranks
  // that meet by nodes->address (JoinInProcess here; NCCL's bootstrap once
  // CUDA devices are driven). Node 0 runs the engine with this provider;
  // every other node runs RunMultiDeviceFollower. Not with `offload`.
  std::optional<RendezvousSpec> nodes;
};

// InvalidArgument naming the bad field.
absl::Status ValidateMultiDeviceOptions(const MultiDeviceOptions& options);

// The factory to put in EngineOptions::expert_provider_factory.
ExpertProviderFactory MultiDeviceExpertsFactory(const MultiDeviceOptions& options);

// A node other than 0 of a multi-node group (options.nodes set, node_rank >
// 0): loads its ranks' shards from ctx.weights (ctx.config must be the
// engine's), then follows node 0 layer by layer (every step's layer, shape,
// inputs and routing come by Broadcast from global rank 0) until node 0's
// provider is destroyed, which ends the loop with OK. Any collective error
// (a peer that failed or never came: the collectives' deadline) is returned;
// a broken group is not rebuilt (the orchestrator restarts the pod group).
absl::Status RunMultiDeviceFollower(const ExpertProviderContext& ctx,
                                    const MultiDeviceOptions& options);

}  // namespace expertd::engine::parallel

#endif  // EXPERTD_ENGINE_PARALLEL_MULTI_DEVICE_EXPERTS_H_
