// ExpertStore: the tiered expert provider. Routed experts live in
//
//   device cache (backend memory, `device_slots` experts)
//     <- host tier (pinned host memory, `host_slots` experts, optional)
//       <- expert pack on disk (pack_builder.h; read with O_DIRECT)
//
// and reach the forward pass through the ExpertProvider contract
// (engine/model/expert_provider.h):
//
//   OnRouterInput(L):  the prefetcher guesses the next MoE layer's experts
//                      and loads start (prefetch priority); guessed experts
//                      already resident are protected from eviction until
//                      that layer's routing.
//   OnRouting(L, ids): every chosen expert is pinned for the step; misses
//                      start loading at demand priority, as many as the cache
//                      has room for; the rest wait their turn (waves).
//   OrderForCompute:   ready experts first, then in-flight, then waiting ones,
//                      so compute of expert k overlaps the load of k+1
//                      (ES-MoE's expert-wise pipeline).
//   Acquire(L, e):     device weights, waiting for the load if needed (that
//                      wait is the stall); Release(L, e) unpins and lets the
//                      next waiting load take the slot.
//   PlanHostCompute:   (--expert_compute=host|auto) before OnRouting, the
//                      missed experts to compute on the host from the host
//                      tier instead of paging (ComputeCostModel); their jobs
//                      run on a host worker while the device experts run.
//
// The cache never runs out: with >= 2 slots, a demand load can always get a
// slot (from the policy's victim, else from unused prefetches, static pins,
// or experts of this layer not yet computed, which go back to waiting).
// Nothing here changes numbers: an expert's bytes are the checkpoint's bytes
// (verified by CRC32C; a corrupt pack slot is repaired from the checkpoint),
// so results are bitwise those of the resident engine.
//
// Thread safety: the ExpertProvider methods are called by the engine thread;
// stats() may be called from any thread. Transfer workers share the state
// under mu_.
#ifndef EXPERTD_ENGINE_EXPERTS_EXPERT_STORE_H_
#define EXPERTD_ENGINE_EXPERTS_EXPERT_STORE_H_

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "engine/experts/compute_cost_model.h"
#include "engine/experts/expert_store_options.h"
#include "engine/experts/expert_store_stats.h"
#include "engine/experts/host_expert_compute.h"
#include "engine/experts/pack/aligned_buffer.h"
#include "engine/experts/pack/expert_pack_reader.h"
#include "engine/experts/policy/decayed_counter.h"
#include "engine/experts/policy/eviction_policy.h"
#include "engine/experts/prefetcher.h"
#include "engine/experts/trace/routing_trace.h"
#include "engine/experts/transfer_pool.h"
#include "engine/model/expert_provider.h"

namespace expertd::engine {

class ExpertStore final : public ExpertProvider {
 public:
  // Opens (or builds) the pack, allocates the device cache and host tier.
  // Errors: InvalidArgument for a budget below 2 experts (naming the budget
  // and the expert size) or a model without routed experts; the pack
  // builder's errors; ResourceExhausted when the backend cannot allocate.
  static absl::StatusOr<std::unique_ptr<ExpertStore>> Create(const ExpertProviderContext& context,
                                                             const ExpertStoreOptions& options);
  ~ExpertStore() override;

  void BeginStep(int64_t num_tokens) override;
  void OnRouterInput(const RouterInput& input) override;
  void OnTokenRouting(int layer, absl::Span<const int32_t> ids, int top_k) override;
  void OnRouting(int layer, absl::Span<const int32_t> experts) override;
  void OrderForCompute(int layer, std::vector<int32_t>* experts) override;
  absl::StatusOr<ExpertWeights> Acquire(int layer, int expert) override;
  void Release(int layer, int expert) override;
  void EndStep() override;
  // Missed experts computed on the host (--expert_compute; expert_store_compute.cc).
  std::vector<int32_t> PlanHostCompute(int layer, absl::Span<const int32_t> experts,
                                       absl::Span<const int64_t> tokens) override;
  void StartHostCompute(int layer, int expert, const float* x, int64_t rows, float* y,
                        const ExpertExtras& extras) override;
  absl::Status FinishHostCompute(int layer) override;

  // A consistent snapshot of every counter. Thread-safe.
  ExpertStoreStats stats() const;
  // Every routed expert of every MoE layer (layer-major): its tier now and
  // its token count. Thread-safe.
  std::vector<ExpertPlacementEntry> Placement() const;
  const PackLayout& layout() const { return reader_->layout(); }

  // Checks the state machine above against the bookkeeping: every slot owned
  // by exactly one entry or free, the policies holding exactly the resident
  // keys, pins matching the pin rule, the protection count. Internal naming
  // the first violation. Thread-safe; meant for tests after every step.
  absl::Status CheckInvariants() const;

 private:
  // A device cache entry exists only while it holds a slot. Its lifecycle:
  //
  //   from       event                                          to
  //   (none)     StartLoad (routing miss, pending wave, prefetch) kLoading
  //   kLoading   FinishLoad, ok                                   kReady
  //   kLoading   FinishLoad, error (waiters get the error)        (none)
  //   kReady     Evict: the policy's victim (never pinned), or a  (none)
  //              demand breaking a weaker pin (never kAcquired)
  //
  // Its use within a step, orthogonal to the above:
  //
  //   kIdle      OnRouting / StartPendingLoads chose it           kNeeded
  //   kIdle      Acquire without routing first                    kAcquired
  //   kNeeded    Acquire                                          kAcquired
  //   kAcquired  Release                                          kIdle
  //   any        EndStep (a failed step may leave uses behind)    kIdle
  //
  // An entry is pinned in the device policy exactly while it is kLoading,
  // in use, or protected for an upcoming layer (SyncPin); CheckInvariants
  // verifies this and the slot accounting.
  enum class DeviceSlotState { kLoading, kReady };
  enum class SlotUse { kIdle, kNeeded, kAcquired };
  struct DeviceEntry {
    int32_t slot = -1;
    DeviceSlotState state = DeviceSlotState::kLoading;
    SlotUse use = SlotUse::kIdle;
    std::shared_ptr<TransferCompletion> load;  // the load (kept after it ends)
    int32_t protect_layer = -1;                // predicted for that upcoming layer
    bool prefetched = false;                   // loaded by a prefetch, not yet demanded
    bool pinned = false;                       // mirrors the policy pin
    bool ready() const { return state == DeviceSlotState::kReady; }
    bool in_use() const { return use != SlotUse::kIdle; }
  };
  // A host tier entry: kFilling while a pack read writes its slot, then
  // kReady; pinned in the host policy while kFilling or copied from (users).
  enum class HostSlotState { kFilling, kReady };
  struct HostEntry {
    int32_t slot = -1;
    HostSlotState state = HostSlotState::kFilling;
    int users = 0;  // loads copying from it
    bool pinned = false;
    bool ready() const { return state == HostSlotState::kReady; }
  };
  // Where a load's bytes come from / go through.
  struct Staging {
    uint8_t* ptr = nullptr;
    bool host_hit = false;   // ptr is a ready host-tier entry
    int32_t host_slot = -1;  // ptr is a host-tier slot being filled
    int32_t staging = -1;    // ptr is staging buffer #staging
    bool direct = false;     // ptr is the device slot itself (CPU backend)
  };

  ExpertStore(const ExpertProviderContext& context, const ExpertStoreOptions& options);
  absl::Status Init(const ExpertProviderContext& context);
  absl::Status AllocateTiers();

  // ---- Device cache (REQUIRES: mu_ held) -----------------------------------
  void SyncPin(ExpertKey key, DeviceEntry* e) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Evict(ExpertKey key) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A free slot, evicting the policy's victim if needed; -1 when none.
  int32_t TakeFreeSlot() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // For a demand load: also breaks prefetch protections, static pins and this
  // layer's not-yet-computed experts. -1 when only in-flight loads remain
  // (wait for one); ResourceExhausted when nothing can ever free a slot.
  absl::StatusOr<int32_t> TakeSlotForDemand(ExpertKey key) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void StartLoad(ExpertKey key, int32_t slot, TransferPool::Priority priority)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void StartPendingLoads() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void IssuePrefetches(int layer, const std::vector<int32_t>& experts)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ExpireProtections(int layer) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  ExpertWeights WeightsAt(int32_t slot) const { return WeightsIn(DeviceSlot(slot)); }
  ExpertWeights WeightsIn(const uint8_t* slot) const;
  uint8_t* DeviceSlot(int32_t slot) const {
    return device_base_ + static_cast<uint64_t>(slot) * slot_bytes_;
  }
  uint8_t* HostSlot(int32_t slot) const {
    return host_base_ + static_cast<uint64_t>(slot) * slot_bytes_;
  }
  ExpertLayerCounters& Counters(int layer) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return counters_[layer];
  }

  // ---- Loads (expert_store_loads.cc; run on transfer workers) ---------------
  absl::Status LoadJob(ExpertKey key, int32_t device_slot);
  Staging BeginLoad(ExpertKey key, int32_t device_slot) ABSL_LOCKS_EXCLUDED(mu_);
  void FinishLoad(ExpertKey key, const Staging& staging, const absl::Status& status)
      ABSL_LOCKS_EXCLUDED(mu_);
  int32_t TakeHostSlot() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status RepairFromSource(ExpertKey key, uint8_t* slot, const absl::Status& error)
      ABSL_LOCKS_EXCLUDED(mu_);
  void SyncHostPin(ExpertKey key, HostEntry* e) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  void RefreshStaticPins() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // ---- Host compute (expert_store_compute.cc) --------------------------------
  // Creates the host pool and the cost model and calibrates its rates, when
  // the mode (or calibrate_compute) asks for them.
  absl::Status InitCompute();
  absl::StatusOr<ComputeRates> Calibrate();
  // One host job (on the host worker): the expert's host copy (host tier, or
  // read from the pack), then its MLP on the host.
  absl::Status HostComputeJob(ExpertKey key, const float* x, int64_t rows, float* y,
                              const ExpertExtras& extras);
  // The expert's bytes in host memory: a ready host-tier slot (a user is
  // added), else read from the pack into a new host-tier slot or the host
  // worker's scratch. `filled` / `host_slot` say what to release.
  struct HostCopy {
    const uint8_t* ptr = nullptr;
    bool in_tier = false;  // a host-tier entry holds it (release: drop the user)
    bool filled = false;   // this job read it into the tier
  };
  absl::StatusOr<HostCopy> AcquireHostCopy(ExpertKey key) ABSL_LOCKS_EXCLUDED(mu_);
  void ReleaseHostCopy(ExpertKey key, const HostCopy& copy, const absl::Status& status)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Device-expert timings for the cost model (engine thread).
  void NoteAcquired(int layer, int expert);
  void NoteReleased(int layer, int expert);

  // Constant after Create.
  Backend* backend_ = nullptr;
  const models::ModelConfig* config_ = nullptr;
  const WeightSource* weights_ = nullptr;  // outlives the store (contract)
  ExpertStoreOptions options_;
  Clock* clock_ = nullptr;
  std::unique_ptr<ExpertPackReader> reader_;
  bool pack_built_ = false;
  std::unique_ptr<Prefetcher> prefetcher_;  // null for --prefetch=none; engine thread only
  std::unique_ptr<RoutingTraceWriter> trace_;
  uint64_t slot_bytes_ = 0;
  int32_t device_slots_ = 0, host_slots_ = 0, max_prefetch_slots_ = 0;
  DeviceBuffer device_arena_, host_arena_;
  uint8_t* device_base_ = nullptr;  // 4 KiB aligned inside device_arena_
  uint8_t* host_base_ = nullptr;    // 4 KiB aligned inside host_arena_
  std::vector<DeviceBuffer> staging_buffers_;
  std::vector<uint8_t*> staging_ptrs_;

  mutable absl::Mutex mu_;
  // Device cache.
  std::unordered_map<ExpertKey, DeviceEntry, ExpertKeyHash> device_ ABSL_GUARDED_BY(mu_);
  std::vector<int32_t> free_device_slots_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<EvictionPolicy> device_policy_ ABSL_GUARDED_BY(mu_);
  std::vector<ExpertKey> static_pins_ ABSL_GUARDED_BY(mu_);
  DecayedCounter hotness_ ABSL_GUARDED_BY(mu_);
  uint64_t demand_ticks_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t protected_count_ ABSL_GUARDED_BY(mu_) = 0;  // entries with protect_layer >= 0
  uint64_t loads_finished_ ABSL_GUARDED_BY(mu_) = 0;  // wakes Acquire waiting for a slot
  // Host tier and staging buffers.
  std::unordered_map<ExpertKey, HostEntry, ExpertKeyHash> host_ ABSL_GUARDED_BY(mu_);
  std::vector<int32_t> free_host_slots_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<EvictionPolicy> host_policy_ ABSL_GUARDED_BY(mu_);
  std::vector<int32_t> free_staging_ ABSL_GUARDED_BY(mu_);
  // The current MoE layer's plan.
  int32_t plan_layer_ ABSL_GUARDED_BY(mu_) = -1;
  std::vector<int32_t> plan_order_ ABSL_GUARDED_BY(mu_);
  std::deque<int32_t> pending_ ABSL_GUARDED_BY(mu_);  // chosen, not yet loading
  std::map<int32_t, std::vector<int32_t>> predictions_ ABSL_GUARDED_BY(mu_);  // layer -> guess
  // Counters, indexed by decoder layer.
  std::vector<ExpertLayerCounters> counters_ ABSL_GUARDED_BY(mu_);
  // Tokens routed to each expert, [num_hidden_layers * num_experts].
  std::vector<uint64_t> token_uses_ ABSL_GUARDED_BY(mu_);
  int64_t steps_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t pack_repairs_ ABSL_GUARDED_BY(mu_) = 0;

  // Host compute (null unless --expert_compute asks for it). The cost model
  // is thread-safe; the rest below is engine-thread state.
  std::unique_ptr<ComputeCostModel> cost_model_;
  std::unique_ptr<HostExpertCompute> host_compute_;
  AlignedBuffer host_scratch_;  // host worker only: an expert read for one job
  std::vector<std::shared_ptr<TransferCompletion>> host_jobs_pending_;
  std::unordered_map<int32_t, int64_t> layer_tokens_;  // this layer's expert -> rows
  int64_t layer_start_ns_ = 0, acquired_ns_ = 0;
  double layer_predicted_s_ = 0;

  // Workers last: destroyed first, so no job outlives the state.
  std::unique_ptr<TransferPool> host_jobs_;  // one worker: host compute jobs
  std::unique_ptr<TransferPool> transfers_;
};

// An ExpertProviderFactory for EngineOptions::expert_provider_factory.
ExpertProviderFactory ExpertStoreFactory(ExpertStoreOptions options);

}  // namespace expertd::engine

#endif  // EXPERTD_ENGINE_EXPERTS_EXPERT_STORE_H_
