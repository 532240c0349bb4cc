#include "engine/experts/expert_store.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "base/log.h"
#include "base/status_macros.h"
#include "engine/experts/pack/pack_builder.h"
#include "engine/experts/policy/hot_pins.h"

namespace expertd::engine {
namespace {

uint8_t* AlignPtr(void* p) {
  const uintptr_t v = reinterpret_cast<uintptr_t>(p);
  return reinterpret_cast<uint8_t*>(AlignUp(v, kPackAlignment));
}

// Experts the device cache holds under the options' budget.
absl::StatusOr<int32_t> DeviceSlotsFor(const ExpertStoreOptions& o, Backend* backend,
                                       uint64_t slot_bytes, int64_t total) {
  int64_t n = total;
  std::string budget = "all experts";
  if (o.device_cache_experts > 0) {
    n = o.device_cache_experts;
    budget = absl::StrCat(n, " experts");
  } else if (o.device_cache_bytes > 0) {
    n = static_cast<int64_t>(o.device_cache_bytes / slot_bytes);
    budget = absl::StrCat(o.device_cache_bytes, " bytes");
  } else if (o.device_cache_fraction > 0) {
    const MemoryStats m = backend->memory_stats();
    if (m.device_bytes_limit == 0) {
      return absl::InvalidArgumentError(
          "--expert_cache_percent needs a device memory limit; use --expert_cache_bytes");
    }
    const uint64_t free =
        m.device_bytes_limit - std::min(m.device_bytes_limit, m.device_bytes_in_use);
    n = static_cast<int64_t>(o.device_cache_fraction * static_cast<double>(free) /
                             static_cast<double>(slot_bytes));
    budget = absl::StrCat(o.device_cache_fraction * 100, "% of ", free, " free device bytes");
  }
  n = std::min(n, total);
  const int64_t minimum = std::min<int64_t>(2, total);
  if (n < minimum) {
    return absl::InvalidArgumentError(absl::StrCat(
        "expert cache budget (", budget, ") holds ", n, " experts of ", slot_bytes,
        " bytes; at least ", minimum, " are needed (", minimum * slot_bytes, " bytes)"));
  }
  return static_cast<int32_t>(n);
}

}  // namespace

ExpertStore::ExpertStore(const ExpertProviderContext& ctx, const ExpertStoreOptions& options)
    : backend_(ctx.backend),
      config_(ctx.config),
      weights_(ctx.weights),
      options_(options),
      clock_(options.clock != nullptr ? options.clock : RealClock::Get()),
      hotness_(1) {}

ExpertStore::~ExpertStore() {
  transfers_.reset();  // runs every queued load while the state is alive
}

absl::StatusOr<std::unique_ptr<ExpertStore>> ExpertStore::Create(
    const ExpertProviderContext& context, const ExpertStoreOptions& options) {
  if (context.backend == nullptr || context.weights == nullptr) {
    return absl::InvalidArgumentError("ExpertStore needs a backend and a weight source");
  }
  std::unique_ptr<ExpertStore> store(new ExpertStore(context, options));
  if (store->config_ == nullptr) store->config_ = &context.weights->config();
  RETURN_IF_ERROR(store->Init(context));
  return store;
}

absl::Status ExpertStore::Init(const ExpertProviderContext& ctx) {
  PackLocationOptions where{options_.pack_dir, "", options_.cache_dir};
  if (auto* cp = dynamic_cast<const CheckpointWeightSource*>(ctx.weights))
    where.model_dir = cp->checkpoint().dir();
  ASSIGN_OR_RETURN(
      OpenedPack pack,
      OpenOrBuildExpertPack(*ctx.weights, where, {options_.direct_io, options_.verify_checksums},
                            options_.storage));
  reader_ = std::move(pack.reader);
  pack_built_ = pack.built;
  const PackLayout& l = reader_->layout();
  if (!backend_->SupportsWeightFormat(l.gate.format)) {
    return absl::InvalidArgumentError(
        absl::StrCat("the ", backend_->name(), " backend cannot compute ",
                     WeightFormatName(l.gate.format), " experts yet (--expert_dtype)"));
  }
  slot_bytes_ = l.slot_bytes;
  const int64_t total = static_cast<int64_t>(l.num_entries());
  ASSIGN_OR_RETURN(device_slots_, DeviceSlotsFor(options_, backend_, slot_bytes_, total));
  host_slots_ =
      static_cast<int32_t>(std::min<uint64_t>(options_.host_cache_bytes / slot_bytes_, total));
  max_prefetch_slots_ = std::max(1, device_slots_ / 2);
  RETURN_IF_ERROR(AllocateTiers());
  ASSIGN_OR_RETURN(const bool declared, ConfigDeclaresPregate(where.model_dir));
  ASSIGN_OR_RETURN(prefetcher_,
                   CreatePrefetcher(options_.prefetch, backend_, *ctx.weights, declared));
  if (!options_.routing_trace_path.empty()) {
    RoutingTraceHeader h{static_cast<int32_t>(config_->num_hidden_layers),
                         static_cast<int32_t>(config_->num_experts),
                         static_cast<int32_t>(config_->num_experts_per_tok), l.expert_bytes,
                         config_->model_type};
    ASSIGN_OR_RETURN(trace_, RoutingTraceWriter::Create(options_.routing_trace_path, h));
  }
  RETURN_IF_ERROR(InitCompute());
  absl::MutexLock lock(&mu_);
  device_policy_ = MakeEvictionPolicy({options_.policy, options_.lfu_half_life, device_slots_});
  host_policy_ =
      MakeEvictionPolicy({options_.policy, options_.lfu_half_life, std::max(host_slots_, 1)});
  hotness_ = DecayedCounter(std::max(64.0, kDefaultLfuHalfLifePerSlot * device_slots_));
  for (int32_t s = device_slots_ - 1; s >= 0; --s) free_device_slots_.push_back(s);
  for (int32_t s = host_slots_ - 1; s >= 0; --s) free_host_slots_.push_back(s);
  const int io_threads = std::max(1, options_.io_threads);
  staging_buffers_.resize(io_threads);
  staging_ptrs_.assign(io_threads, nullptr);
  for (int i = io_threads - 1; i >= 0; --i) free_staging_.push_back(i);
  counters_.resize(config_->num_hidden_layers);
  for (size_t i = 0; i < counters_.size(); ++i) counters_[i].layer = static_cast<int32_t>(i);
  transfers_ = std::make_unique<TransferPool>(io_threads);
  EXPERTD_LOG(Info, "expert store ready")
      .With("device_slots", device_slots_)
      .With("host_slots", host_slots_)
      .With("slot_bytes", slot_bytes_)
      .With("storage", options_.storage.Name())
      .With("experts", total)
      .With("policy", PolicyKindName(options_.policy))
      .With("prefetch", PrefetchKindName(options_.prefetch))
      .With("compute", ExpertComputeModeName(options_.compute))
      .With("pack", reader_->path())
      .With("direct_io", reader_->direct_io());
  return absl::OkStatus();
}

absl::Status ExpertStore::AllocateTiers() {
  ASSIGN_OR_RETURN(
      device_arena_,
      backend_->Allocate(static_cast<uint64_t>(device_slots_) * slot_bytes_ + kPackAlignment));
  device_base_ = AlignPtr(device_arena_.data());
  if (host_slots_ > 0) {
    ASSIGN_OR_RETURN(
        host_arena_,
        backend_->Allocate(static_cast<uint64_t>(host_slots_) * slot_bytes_ + kPackAlignment,
                           MemoryKind::kHostPinned));
    host_base_ = AlignPtr(host_arena_.data());
  }
  return absl::OkStatus();
}

ExpertWeights ExpertStore::WeightsIn(const uint8_t* base) const {
  const PackLayout& l = reader_->layout();
  auto ref = [base](const PackTensorLayout& t) {
    return WeightRef{base + t.offset, t.dtype, t.rows, t.cols, t.QuantAt(base)};
  };
  return ExpertWeights{ref(l.gate), ref(l.up), ref(l.down)};
}

// ---- Device cache bookkeeping ----------------------------------------------

void ExpertStore::SyncPin(ExpertKey key, DeviceEntry* e) {
  const bool want = !e->ready() || e->in_use() || e->protect_layer >= 0;
  if (want == e->pinned) return;
  if (want) {
    device_policy_->Pin(key);
  } else {
    device_policy_->Unpin(key);
  }
  e->pinned = want;
}

void ExpertStore::Evict(ExpertKey key) {
  auto it = device_.find(key);
  DeviceEntry& e = it->second;
  if (e.pinned) {
    device_policy_->Unpin(key);
    e.pinned = false;
  }
  if (e.protect_layer >= 0) --protected_count_;
  if (e.prefetched) ++Counters(key.layer).prefetch_wasted;
  ++Counters(key.layer).evictions;
  device_policy_->Erase(key);
  free_device_slots_.push_back(e.slot);
  device_.erase(it);
}

int32_t ExpertStore::TakeFreeSlot() {
  if (free_device_slots_.empty()) {
    std::optional<ExpertKey> victim = device_policy_->Victim();
    if (!victim.has_value()) return -1;
    Evict(*victim);
  }
  const int32_t slot = free_device_slots_.back();
  free_device_slots_.pop_back();
  return slot;
}

absl::StatusOr<int32_t> ExpertStore::TakeSlotForDemand(ExpertKey key) {
  const int32_t slot = TakeFreeSlot();
  if (slot >= 0) return slot;
  // Every resident expert is pinned. Break the weakest pin: an unused
  // prefetch, then a static hot pin, then an expert of this layer that has
  // not been computed yet (it goes back to waiting).
  const DeviceEntry* best = nullptr;
  ExpertKey best_key;
  int best_class = 3;
  bool any_loading = false;
  for (auto& [k, e] : device_) {
    if (!e.ready()) any_loading = true;
    if (!e.ready() || e.use == SlotUse::kAcquired || k == key) continue;
    int cls = 3;
    if (!e.in_use() && e.protect_layer >= 0)
      cls = 0;
    else if (!e.in_use())
      cls = 1;  // unpinned yet not a victim: statically pinned
    else if (k.layer == plan_layer_)
      cls = 2;
    if (cls < best_class) {
      best = &e;
      best_key = k;
      best_class = cls;
    }
  }
  if (best == nullptr) {
    if (any_loading) return -1;
    return absl::ResourceExhaustedError(absl::StrCat("expert cache of ", device_slots_,
                                                     " slots has no room for expert ",
                                                     key.DebugString(), ": every slot is in use"));
  }
  if (best_class == 2) pending_.push_back(best_key.expert);
  Evict(best_key);
  const int32_t s = free_device_slots_.back();
  free_device_slots_.pop_back();
  return s;
}

void ExpertStore::StartLoad(ExpertKey key, int32_t slot, TransferPool::Priority priority) {
  DeviceEntry& e = device_[key];
  e.slot = slot;
  e.state = DeviceSlotState::kLoading;
  device_policy_->Insert(key);
  SyncPin(key, &e);
  // The job takes mu_ first thing, so it cannot see the entry before we are done.
  e.load = transfers_->Submit(priority, [this, key, slot] { return LoadJob(key, slot); });
}

void ExpertStore::StartPendingLoads() {
  while (!pending_.empty() && plan_layer_ >= 0) {
    const ExpertKey key{plan_layer_, pending_.front()};
    if (device_.count(key)) {
      pending_.pop_front();
      continue;
    }
    const int32_t slot = TakeFreeSlot();
    if (slot < 0) return;
    pending_.pop_front();
    StartLoad(key, slot, TransferPool::kDemand);
    DeviceEntry& e = device_[key];
    e.use = SlotUse::kNeeded;
    device_policy_->Touch(key);
    SyncPin(key, &e);
  }
}

void ExpertStore::RefreshStaticPins() {
  static_pins_ =
      HottestPerLayer(hotness_, reader_->layout().moe_layers, reader_->layout().num_experts,
                      options_.pin_hot_fraction, static_cast<size_t>(device_slots_ / 2));
  device_policy_->SetStaticPins(static_pins_);
}

// ---- ExpertProvider ----------------------------------------------------------

void ExpertStore::BeginStep(int64_t num_tokens) {
  (void)num_tokens;
  absl::MutexLock lock(&mu_);
  ++steps_;
}

void ExpertStore::OnTokenRouting(int layer, absl::Span<const int32_t> ids, int top_k) {
  {
    absl::MutexLock lock(&mu_);
    const int64_t experts = config_->num_experts;
    if (token_uses_.empty()) token_uses_.assign(config_->num_hidden_layers * experts, 0);
    if (layer >= 0 && layer < config_->num_hidden_layers) {
      for (int32_t id : ids) {
        if (id >= 0 && id < experts) ++token_uses_[layer * experts + id];
      }
    }
  }
  if (trace_ == nullptr || top_k != trace_->header().top_k) return;
  int64_t step;
  {
    absl::MutexLock lock(&mu_);
    step = std::max<int64_t>(0, steps_ - 1);
  }
  absl::Status s =
      trace_->Append(RoutingRecord{step, layer, std::vector<int32_t>(ids.begin(), ids.end())});
  if (!s.ok()) EXPERTD_LOG(Warn, "routing trace record dropped").With("error", s);
}

void ExpertStore::OnRouting(int layer, absl::Span<const int32_t> experts) {
  absl::MutexLock lock(&mu_);
  if (layer < 0 || layer >= static_cast<int>(counters_.size())) return;
  ExpertLayerCounters& c = Counters(layer);
  c.requests += static_cast<int64_t>(experts.size());
  if (auto p = predictions_.find(layer); p != predictions_.end()) {
    c.predicted += static_cast<int64_t>(p->second.size());
    for (int32_t e : p->second)
      c.predicted_correct += std::count(experts.begin(), experts.end(), e);
    c.predicted_requests += static_cast<int64_t>(experts.size());
    predictions_.erase(p);
  }
  plan_layer_ = layer;
  pending_.clear();
  std::vector<int32_t> ready, loading;
  for (int32_t expert : experts) {
    const ExpertKey key{layer, expert};
    hotness_.Add(key, demand_ticks_++);
    auto it = device_.find(key);
    if (it == device_.end()) {
      ++c.misses;
      pending_.push_back(expert);
      continue;
    }
    DeviceEntry& e = it->second;
    if (e.prefetched) {
      ++c.prefetch_hits;
      ++c.prefetch_used;
      e.prefetched = false;
    } else if (e.ready()) {
      ++c.hits;
    } else {
      ++c.misses;
    }
    if (e.use == SlotUse::kIdle) e.use = SlotUse::kNeeded;
    device_policy_->Touch(key);
    SyncPin(key, &e);
    if (e.ready()) {
      ready.push_back(expert);
    } else {
      loading.push_back(expert);
      transfers_->Promote(e.load);
    }
  }
  ExpireProtections(layer);
  plan_order_ = ready;
  plan_order_.insert(plan_order_.end(), loading.begin(), loading.end());
  plan_order_.insert(plan_order_.end(), pending_.begin(), pending_.end());
  StartPendingLoads();
}

void ExpertStore::OrderForCompute(int layer, std::vector<int32_t>* experts) {
  absl::MutexLock lock(&mu_);
  if (layer != plan_layer_ || plan_order_.size() != experts->size()) return;
  std::vector<int32_t> a = *experts, b = plan_order_;
  std::sort(a.begin(), a.end());
  std::sort(b.begin(), b.end());
  if (a == b) *experts = plan_order_;
}

absl::StatusOr<ExpertWeights> ExpertStore::Acquire(int layer, int expert) {
  const ExpertKey key{layer, expert};
  if (reader_->layout().EntryIndex(key) < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("no routed expert ", expert, " in layer ", layer));
  }
  const int64_t start = clock_->NowNanos();
  bool waited = false;
  absl::MutexLock lock(&mu_);
  for (;;) {
    auto it = device_.find(key);
    if (it == device_.end()) {
      pending_.erase(std::remove(pending_.begin(), pending_.end(), expert), pending_.end());
      ASSIGN_OR_RETURN(int32_t slot, TakeSlotForDemand(key));
      if (slot < 0) {  // only in-flight loads hold slots: wait for one
        waited = true;
        const uint64_t seen = loads_finished_;
        auto changed = [this, seen]()
                           ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return loads_finished_ != seen; };
        mu_.Await(absl::Condition(&changed));
        continue;
      }
      StartLoad(key, slot, TransferPool::kDemand);
      device_policy_->Touch(key);
      it = device_.find(key);
    }
    DeviceEntry& e = it->second;
    e.use = SlotUse::kAcquired;
    SyncPin(key, &e);
    if (e.ready()) break;
    waited = true;
    std::shared_ptr<TransferCompletion> load = e.load;
    transfers_->Promote(load);
    mu_.Unlock();
    absl::Status s = load->Wait();
    mu_.Lock();
    if (!s.ok()) {
      Counters(layer).stall_ns += clock_->NowNanos() - start;
      return s;
    }
  }
  if (waited) Counters(layer).stall_ns += clock_->NowNanos() - start;
  NoteAcquired(layer, expert);
  return WeightsAt(device_.at(key).slot);
}

void ExpertStore::Release(int layer, int expert) {
  NoteReleased(layer, expert);
  absl::MutexLock lock(&mu_);
  auto it = device_.find(ExpertKey{layer, expert});
  if (it == device_.end()) return;  // its load failed: nothing to release
  it->second.use = SlotUse::kIdle;
  SyncPin(it->first, &it->second);
  StartPendingLoads();
}

void ExpertStore::EndStep() {
  absl::MutexLock lock(&mu_);
  for (auto& [key, e] : device_) {
    if (e.in_use()) {
      e.use = SlotUse::kIdle;  // a failed step may leave uses behind
      SyncPin(key, &e);
    }
  }
  ExpireProtections(-1);
  pending_.clear();
  plan_order_.clear();
  plan_layer_ = -1;
  predictions_.clear();
  if (options_.pin_hot_fraction > 0 &&
      steps_ % std::max<int64_t>(1, options_.pin_refresh_steps) == 0) {
    RefreshStaticPins();
  }
  if (trace_ != nullptr) trace_->Flush().IgnoreError();
}

ExpertStoreStats ExpertStore::stats() const {
  absl::MutexLock lock(&mu_);
  ExpertStoreStats s;
  for (int32_t layer : reader_->layout().moe_layers) {
    s.layers.push_back(counters_[layer]);
    s.total.Add(counters_[layer]);
  }
  s.steps = steps_;
  s.device_slots = device_slots_;
  s.host_slots = host_slots_;
  for (const auto& kv : device_) s.device_resident += kv.second.ready();
  for (const auto& kv : host_) s.host_resident += kv.second.ready();
  s.slot_bytes = slot_bytes_;
  s.expert_bytes = reader_->layout().expert_bytes;
  s.storage = options_.storage.Name();
  s.stored_format = StoredFormatName(reader_->layout());
  s.static_pins = static_cast<int64_t>(static_pins_.size());
  s.policy = PolicyKindName(options_.policy);
  s.prefetch = PrefetchKindName(options_.prefetch);
  s.pack_path = reader_->path();
  s.direct_io = reader_->direct_io();
  s.pack_built = pack_built_;
  s.pack_repairs = pack_repairs_;
  s.compute = ExpertComputeModeName(options_.compute);
  if (host_compute_ != nullptr) s.host_compute_threads = host_compute_->threads();
  if (cost_model_ != nullptr) {
    const ComputeRates r = cost_model_->rates();
    s.page_bytes_per_s = r.page_bytes_per_s;
    s.host_fixed_s = r.host.fixed_s;
    s.host_per_token_s = r.host.per_token_s;
    s.device_fixed_s = r.device.fixed_s;
    s.device_per_token_s = r.device.per_token_s;
  }
  return s;
}

std::vector<ExpertPlacementEntry> ExpertStore::Placement() const {
  absl::MutexLock lock(&mu_);
  std::vector<ExpertPlacementEntry> out;
  const int32_t experts = static_cast<int32_t>(config_->num_experts);
  for (int32_t layer : reader_->layout().moe_layers) {
    for (int32_t e = 0; e < experts; ++e) {
      ExpertPlacementEntry p;
      p.layer = layer;
      p.expert = e;
      const ExpertKey key{layer, e};
      auto d = device_.find(key);
      auto h = host_.find(key);
      if (d != device_.end() && d->second.ready()) {
        p.tier = ExpertPlacementEntry::Tier::kDevice;
      } else if (h != host_.end() && h->second.ready()) {
        p.tier = ExpertPlacementEntry::Tier::kHost;
      }
      const size_t index = static_cast<size_t>(layer) * experts + e;
      if (index < token_uses_.size()) p.token_uses = token_uses_[index];
      out.push_back(p);
    }
  }
  return out;
}

ExpertProviderFactory ExpertStoreFactory(ExpertStoreOptions options) {
  return [options](
             const ExpertProviderContext& ctx) -> absl::StatusOr<std::unique_ptr<ExpertProvider>> {
    ASSIGN_OR_RETURN(std::unique_ptr<ExpertStore> store, ExpertStore::Create(ctx, options));
    return std::unique_ptr<ExpertProvider>(std::move(store));
  };
}

}  // namespace expertd::engine
