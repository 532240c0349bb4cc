#include "engine/parallel/multi_device_experts.h"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "engine/backend/backend_factory.h"
#include "engine/model/layer_context.h"
#include "engine/parallel/rank_state.h"
#include "engine/experts/expert_store.h"
#include "engine/parallel/rank_threads.h"
#include "engine/parallel/shard_weight_source.h"

namespace expertd::engine::parallel {
namespace {

// Loads what `rank` holds of one expert: its column shard (kShard) or the
// whole expert when it owns it (kExpert).
absl::Status LoadExpert(const ExpertProviderContext& ctx, const MultiDeviceOptions& options,
                        int64_t unit, RankState& r, int layer, int e) {
  const models::ModelConfig& c = *ctx.config;
  ShardRange cols{0, c.moe_intermediate_size};
  if (options.mode == MoeParallelism::kShard) {
    cols = ExpertColumns(c.moe_intermediate_size, unit, r.topology.world_size(),
                         r.topology.rank());
  }
  if (options.mode == MoeParallelism::kExpert && r.owner[e] != r.topology.rank())
    return absl::OkStatus();
  HeldExpert& held = r.experts[static_cast<int64_t>(layer) * c.num_experts + e];
  return LoadExpertShard(r.backend.get(), *ctx.weights, c, layer, e, cols, options.storage,
                         &held);
}

// The format each device's experts are computed in (the store's, offloaded).
ExpertShardStorage StorageOf(const MultiDeviceOptions& o) {
  if (!o.offload.has_value()) return o.storage;
  ExpertShardStorage q;
  q.format = o.offload->storage.format;
  q.group_size = o.offload->storage.group_size;
  q.block_rows = o.offload->storage.block_rows;
  q.scale_dtype = o.offload->storage.scale_dtype;
  return q;
}

// What global rank 0 broadcasts before every layer: the step's shape, or
// stop (node 0's provider is going away). Followers on other nodes learn each
// step from it.
struct StepHeader {
  int64_t stop = 0, layer = 0, rows = 0, top_k = 0, hidden = 0;
};

class MultiDeviceExperts final : public ExpertProvider, public RoutedExperts {
 public:
  static absl::StatusOr<std::unique_ptr<MultiDeviceExperts>> Create(
      const ExpertProviderContext& ctx, const MultiDeviceOptions& options) {
    RETURN_IF_ERROR(ValidateMultiDeviceOptions(options));
    std::unique_ptr<MultiDeviceExperts> p(new MultiDeviceExperts(*ctx.config, options));
    RETURN_IF_ERROR(p->CreateRanks(ctx));
    return p;
  }

  ~MultiDeviceExperts() override {
    if (options_.counters != nullptr) options_.counters->SetDeviceStoreStats(nullptr);
    if (!options_.nodes.has_value() || options_.nodes->node_rank != 0) return;
    if (static_cast<int>(ranks_.size()) != options_.devices) return;  // creation failed
    // Release the followers on the other nodes. A broken group fails at once
    // (or at its deadline); there is nothing left to tell them then.
    // One header per rank: a Broadcast's receivers write into their buffer
    // while the other nodes still read the root's, so a shared one races.
    std::vector<StepHeader> stop(ranks_.size());
    for (StepHeader& h : stop) h.stop = 1;
    threads_.Run(
        [&](int i) { return ranks_[i]->comm->Broadcast(&stop[i], sizeof(StepHeader), 0); });
  }

  // Follower nodes: runs layers as global rank 0 announces them, until stop.
  absl::Status Follow() {
    for (;;) {
      std::vector<char> stopped(ranks_.size(), 0);
      std::vector<absl::Status> status = threads_.Run([&](int i) {
        bool stop = false;
        absl::Status st = RankLayer(*ranks_[i], LayerStep{}, &stop);
        stopped[i] = stop;
        return st;
      });
      for (const absl::Status& st : status) RETURN_IF_ERROR(st);
      if (stopped[0]) return absl::OkStatus();
      Count();
    }
  }

  void BeginStep(int64_t num_tokens) override {
    for (auto& r : ranks_)
      if (r->store != nullptr) r->store->BeginStep(num_tokens);
  }
  void EndStep() override {
    for (auto& r : ranks_)
      if (r->store != nullptr) r->store->EndStep();
  }
  // The per-device stores see what a single store would (speculative and
  // pre-gate prefetch, routing traces); on CPU virtual devices the engine's
  // memory is every device's memory.
  void OnRouterInput(const RouterInput& input) override {
    for (auto& r : ranks_)
      if (r->store != nullptr) r->store->OnRouterInput(input);
  }
  void OnTokenRouting(int layer, absl::Span<const int32_t> ids, int top_k) override {
    for (auto& r : ranks_)
      if (r->store != nullptr) r->store->OnTokenRouting(layer, ids, top_k);
  }
  void OnRouting(int, absl::Span<const int32_t>) override {}
  absl::StatusOr<ExpertWeights> Acquire(int layer, int expert) override {
    return absl::FailedPreconditionError(absl::StrCat(
        "expert ", expert, " of layer ", layer, " lives on several devices; use routed_experts()"));
  }
  void Release(int, int) override {}
  RoutedExperts* routed_experts() override { return this; }

  absl::Status Run(const LayerContext& ctx, const RoutedExpertsInput& in, float* out) override {
    LayerStep step{
        in.layer, in.rows, in.top_k, in.hidden, config_.num_experts, options_.capacity_factor};
    RETURN_IF_ERROR(StageInputs(ctx, in));
    std::vector<absl::Status> status = threads_.Run([&](int rank) {
      bool stop = false;
      return RankLayer(*ranks_[rank], step, &stop);
    });
    for (const absl::Status& s : status) {
      if (s.ok()) continue;
      // A broken group would fail every later step; one spanning several
      // nodes cannot be rebuilt from here.
      if (!options_.nodes.has_value()) RETURN_IF_ERROR(ResetGroup());
      return s;
    }
    Count();
    std::vector<float> host(in.rows * in.hidden);
    RETURN_IF_ERROR(ranks_[0]->backend->CopyToHost(host.data(), ranks_[0]->ws->f(Buf::kFfnOut),
                                                   host.size() * 4));
    return ctx.backend->CopyToDevice(out, host.data(), host.size() * sizeof(float));
  }

 private:
  MultiDeviceExperts(const models::ModelConfig& config, const MultiDeviceOptions& options)
      : config_(config), options_(options), threads_(options.devices) {}

  // This process's endpoints: all D ranks of a private group, or its node's
  // ranks of the group named by options_.nodes.
  absl::StatusOr<std::vector<std::unique_ptr<Collectives>>> JoinGroup() {
    if (options_.nodes.has_value()) return JoinInProcess(*options_.nodes, options_.collectives);
    group_ = InProcessGroup::Create(options_.devices, options_.collectives);
    std::vector<std::unique_ptr<Collectives>> comms;
    for (int d = 0; d < options_.devices; ++d) comms.push_back(group_->Join(d));
    return comms;
  }

  absl::Status CreateRanks(const ExpertProviderContext& ctx) {
    ASSIGN_OR_RETURN(std::vector<std::unique_ptr<Collectives>> comms, JoinGroup());
    const int world = comms[0]->topology().world_size();
    std::vector<int32_t> owner(config_.num_experts);
    for (int d = 0; d < world; ++d) {
      const ShardRange mine = EvenShard(config_.num_experts, world, d);
      for (int64_t e = mine.begin; e < mine.end; ++e) owner[e] = d;
    }
    ASSIGN_OR_RETURN(int64_t unit, ExpertShardUnit(config_, StorageOf(options_)));
    // A store packs FP8 slices with scale grids of their own: cut on whole blocks.
    if (options_.offload.has_value() && config_.fp8.enabled) {
      unit = std::lcm(unit, std::lcm(config_.fp8.block_rows, config_.fp8.block_cols));
    }
    for (int d = 0; d < options_.devices; ++d) {
      auto r = std::make_unique<RankState>();
      r->comm = std::move(comms[d]);
      r->topology = r->comm->topology();
      ASSIGN_OR_RETURN(r->backend, CreateBackend(options_.device_backend));
      r->ws = std::make_unique<Workspace>(r->backend.get(), ModelDims::From(config_));
      r->expert_gemm = options_.expert_gemm;
      r->owner = owner;
      r->experts.resize(static_cast<int64_t>(config_.num_hidden_layers) * config_.num_experts);
      if (options_.offload.has_value()) {
        RETURN_IF_ERROR(CreateStore(ctx, unit, *r));
      } else {
        for (int layer = 0; layer < config_.num_hidden_layers; ++layer) {
          if (!config_.is_moe_layer[layer]) continue;
          for (int e = 0; e < config_.num_experts; ++e)
            RETURN_IF_ERROR(LoadExpert(ctx, options_, unit, *r, layer, e));
        }
      }
      ranks_.push_back(std::move(r));
    }
    if (options_.counters != nullptr) {
      options_.counters->SetExpertBytes(ExpertBytes());
      if (options_.offload.has_value())
        options_.counters->SetDeviceStoreStats([this] { return DeviceStoreStats(); });
    }
    return absl::OkStatus();
  }

  std::vector<ExpertStoreStats> DeviceStoreStats() const {
    std::vector<ExpertStoreStats> stats;
    for (const auto& r : ranks_) {
      const auto* store = dynamic_cast<const ExpertStore*>(r->store.get());
      stats.push_back(store != nullptr ? store->stats() : ExpertStoreStats());
    }
    return stats;
  }

  // Device r's store over its slice of every expert (none for an empty slice).
  absl::Status CreateStore(const ExpertProviderContext& ctx, int64_t unit, RankState& r) {
    const int world = r.topology.world_size(), rank = r.topology.rank();
    const ShardRange cols = ExpertColumns(config_.moe_intermediate_size, unit, world, rank);
    if (cols.size() == 0) return absl::OkStatus();
    ASSIGN_OR_RETURN(std::unique_ptr<ShardWeightSource> source,
                     ShardWeightSource::Create(ctx.weights, cols));
    ExpertStoreOptions so = *options_.offload;
    const std::string suffix = absl::StrCat("shard-", rank, "-of-", world);
    if (!so.pack_dir.empty()) so.pack_dir = absl::StrCat(so.pack_dir, "/", suffix);
    if (!so.routing_trace_path.empty()) {
      so.routing_trace_path = absl::StrCat(so.routing_trace_path, ".", suffix);
    }
    ExpertProviderContext shard_ctx{r.backend.get(), &source->config(), source.get()};
    r.shard_source = std::move(source);
    ASSIGN_OR_RETURN(r.store, ExpertStoreFactory(so)(shard_ctx));
    return absl::OkStatus();
  }

  // Per device: the expert bytes it holds (resident) or packs and pages.
  std::vector<uint64_t> ExpertBytes() const {
    std::vector<uint64_t> bytes;
    for (const auto& r : ranks_) {
      uint64_t b = 0;
      for (const HeldExpert& h : r->experts) b += h.bytes;
      if (auto* store = dynamic_cast<const ExpertStore*>(r->store.get())) {
        b += store->layout().expert_bytes * store->layout().num_entries();
      }
      bytes.push_back(b);
    }
    return bytes;
  }

  // Rank 0 receives the layer's input and routing from the engine; the
  // other ranks get them by Broadcast inside RankLayer.
  absl::Status StageInputs(const LayerContext& ctx, const RoutedExpertsInput& in) {
    for (auto& r : ranks_) RETURN_IF_ERROR(r->ws->Prepare(WorkspaceDims{in.rows, 1, 1}));
    RankState& r0 = *ranks_[0];
    std::vector<float> host(in.rows * std::max(in.hidden, in.top_k));
    RETURN_IF_ERROR(ctx.backend->CopyToHost(host.data(), in.x, in.rows * in.hidden * 4));
    RETURN_IF_ERROR(
        r0.backend->CopyToDevice(r0.ws->f(Buf::kNormed), host.data(), in.rows * in.hidden * 4));
    RETURN_IF_ERROR(ctx.backend->CopyToHost(host.data(), in.weights, in.rows * in.top_k * 4));
    RETURN_IF_ERROR(
        r0.backend->CopyToDevice(r0.ws->f(Buf::kTopkWeights), host.data(), in.rows * in.top_k * 4));
    return r0.backend->CopyToDevice(r0.ws->i32(Buf::kTopkIds), in.host_ids.data(),
                                    in.host_ids.size() * 4);
  }

  absl::Status RankLayer(RankState& r, LayerStep s, bool* stop) {
    absl::Status st = BroadcastAndStep(r, s, stop);
    if (!st.ok()) r.comm->Abort(st);  // release the peers now instead of at their deadline
    return st;
  }

  // `s` is global rank 0's step; every other rank takes it from the header.
  absl::Status BroadcastAndStep(RankState& r, LayerStep s, bool* stop) {
    StepHeader h{0, s.layer, s.rows, s.top_k, s.hidden};
    RETURN_IF_ERROR(r.comm->Broadcast(&h, sizeof(h), 0));
    if (h.stop != 0) {
      *stop = true;
      return absl::OkStatus();
    }
    s = LayerStep{static_cast<int>(h.layer), h.rows, h.top_k, h.hidden, config_.num_experts,
                  options_.capacity_factor};
    Workspace* ws = r.ws.get();
    RETURN_IF_ERROR(ws->Prepare(WorkspaceDims{s.rows, 1, 1}));
    RETURN_IF_ERROR(r.comm->Broadcast(ws->f(Buf::kNormed), s.rows * s.hidden * 4, 0));
    RETURN_IF_ERROR(r.comm->Broadcast(ws->f(Buf::kTopkWeights), s.rows * s.top_k * 4, 0));
    RETURN_IF_ERROR(r.comm->Broadcast(ws->i32(Buf::kTopkIds), s.rows * s.top_k * 4, 0));
    r.host_ids.resize(s.rows * s.top_k);
    RETURN_IF_ERROR(
        r.backend->CopyToHost(r.host_ids.data(), ws->i32(Buf::kTopkIds), r.host_ids.size() * 4));
    switch (options_.mode) {
      case MoeParallelism::kShard:
        return ShardStep(r, s);
      case MoeParallelism::kExpert:
        return ExpertParallelStep(r, s);
    }
    return absl::InternalError("unknown MoE parallelism");
  }

  void Count() {
    if (options_.counters == nullptr) return;
    int64_t dropped = 0;
    std::vector<int64_t> work;
    for (auto& r : ranks_) {
      dropped += r->dropped.exchange(0);
      work.push_back(r->work.exchange(0));
    }
    options_.counters->Add(dropped, work);
  }

  // A fresh group after a failed step (every rank has returned by now).
  absl::Status ResetGroup() {
    group_ = InProcessGroup::Create(options_.devices, options_.collectives);
    for (int d = 0; d < options_.devices; ++d) ranks_[d]->comm = group_->Join(d);
    return absl::OkStatus();
  }

  const models::ModelConfig config_;
  const MultiDeviceOptions options_;
  std::shared_ptr<InProcessGroup> group_;
  std::vector<std::unique_ptr<RankState>> ranks_;
  RankThreads threads_;  // declared last: joined before the ranks go away
};

}  // namespace

absl::StatusOr<MoeParallelism> ParseMoeParallelism(const std::string& name) {
  if (name == "shard") return MoeParallelism::kShard;
  if (name == "expert") return MoeParallelism::kExpert;
  return absl::InvalidArgumentError(
      absl::StrCat("MoE parallelism '", name, "': expected shard or expert"));
}

const char* MoeParallelismName(MoeParallelism mode) {
  switch (mode) {
    case MoeParallelism::kShard:
      return "shard";
    case MoeParallelism::kExpert:
      return "expert";
  }
  return "?";
}

absl::Status ValidateMultiDeviceOptions(const MultiDeviceOptions& o) {
  if (o.devices < 1 || o.devices > 64) {
    return absl::InvalidArgumentError(absl::StrCat("devices must be in [1, 64], got ", o.devices));
  }
  if (o.capacity_factor < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("capacity factor must be >= 0, got ", o.capacity_factor));
  }
  if (o.offload.has_value() && o.mode != MoeParallelism::kShard) {
    return absl::UnimplementedError(
        "expert offloading over several devices is built for MoEShard (--moe_parallel=shard) only");
  }
  if (o.offload.has_value() && o.storage.quantized()) {
    return absl::InvalidArgumentError(
        "with expert offloading the storage format is the store's (ExpertStoreOptions::storage)");
  }
  if (o.nodes.has_value() && o.nodes->devices_per_node != o.devices) {
    return absl::InvalidArgumentError(absl::StrCat("devices (", o.devices,
                                                   ") must equal the nodes' devices_per_node (",
                                                   o.nodes->devices_per_node, ")"));
  }
  if (o.nodes.has_value() && o.offload.has_value()) {
    return absl::UnimplementedError("expert offloading over several nodes is not built yet");
  }
  if (o.capacity_factor > 0 && o.mode != MoeParallelism::kExpert) {
    return absl::InvalidArgumentError(
        "a capacity factor applies to expert parallelism only (MoEShard drops nothing)");
  }
  if (o.device_backend.name != "cpu") {
    return absl::UnimplementedError(
        absl::StrCat("multi-device MoE runs on CPU virtual devices here; backend '",
                     o.device_backend.name, "' is not wired to NCCL yet"));
  }
  return absl::OkStatus();
}

ExpertProviderFactory MultiDeviceExpertsFactory(const MultiDeviceOptions& options) {
  return [options](const ExpertProviderContext& ctx)
             -> absl::StatusOr<std::unique_ptr<ExpertProvider>> {
    if (options.nodes.has_value() && options.nodes->node_rank != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("node ", options.nodes->node_rank,
                       " follows node 0 (RunMultiDeviceFollower); only node 0 runs the engine"));
    }
    if (ctx.config->expert_bias || ctx.config->swiglu_limit > 0.0) {
      // The MoE block's biases and clamped SwiGLU are not in the sharded or
      // expert-parallel expert paths.
      return absl::UnimplementedError(absl::StrCat(
          models::ArchitectureName(ctx.config->architecture),
          ": experts with biases and a clamped SwiGLU do not run over several devices yet; "
          "serve this model on one device"));
    }
    ASSIGN_OR_RETURN(std::unique_ptr<MultiDeviceExperts> p, MultiDeviceExperts::Create(ctx, options));
    return std::unique_ptr<ExpertProvider>(std::move(p));
  };
}

absl::Status RunMultiDeviceFollower(const ExpertProviderContext& ctx,
                                    const MultiDeviceOptions& options) {
  if (!options.nodes.has_value() || options.nodes->node_rank == 0) {
    return absl::InvalidArgumentError("a follower is a node other than 0 of a multi-node group");
  }
  ASSIGN_OR_RETURN(std::unique_ptr<MultiDeviceExperts> p, MultiDeviceExperts::Create(ctx, options));
  return p->Follow();
}

}  // namespace expertd::engine::parallel
