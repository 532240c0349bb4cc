// A sparse MoE block, dropless: only the experts a token selected run, on
// exactly the rows that selected them.
//
//   route:    ids, w = router(x)                 [rows, top_k]
//   group:    rows of each chosen expert (host; counting sort by expert id)
//   compute:  experts the provider computes on the host: gather their rows,
//               hand them over (asynchronous); then for each other expert,
//               in the provider's order:
//               Acquire -> gather its rows -> SwiGLU FFN -> scatter to the
//               rows' (token, rank) slots -> Release; then the host results
//               are scattered to their slots the same way. Or, when
//               UseGroupedExpertGemm says so (expert_gemm.h; all resident,
//               none on the host): acquire all, gather every row once, the
//               grouped GEMMs, scatter once, release all (bitwise the same)
//   combine:  out[t] = sum_j w[t, j] * slot[t, j]  (ascending expert id)
//   shared:   out += sigmoid(x Wsg^T) * shared_mlp(x)   (Qwen2-MoE)
//   gpt-oss: every expert projection has a bias (resident here, beside
//             whatever provides the matrices) and the SwiGLU is clamped; such
//             experts run one by one (never grouped), and on the host only
//             where the backend's memory is the host's (the biases are read
//             there)
//   residual += out
// The slots make the result independent of the compute order (and thus of
// the expert cache), and the combine order matches Hugging Face's loop.
#include <algorithm>
#include <iterator>
#include <numeric>
#include <vector>

#include "base/status_macros.h"
#include "engine/model/feed_forward.h"
#include "models/checkpoint/tensor_names.h"

namespace expertd::engine {
namespace {

// The step's rows grouped by expert.
struct Dispatch {
  std::vector<int32_t> experts;       // distinct, ascending
  std::vector<int64_t> offset;        // [num_experts + 1] into the index arrays
  std::vector<int32_t> gather_index;  // [rows * top_k] token row
  std::vector<int32_t> slot_index;    // [rows * top_k] token * top_k + rank
};

Dispatch GroupByExpert(const std::vector<int32_t>& ids, int64_t rows, int64_t top_k,
                       int64_t num_experts) {
  Dispatch d;
  d.offset.assign(num_experts + 1, 0);
  for (int32_t e : ids) d.offset[e + 1]++;
  for (int64_t e = 0; e < num_experts; ++e) {
    if (d.offset[e + 1] > 0) d.experts.push_back(static_cast<int32_t>(e));
    d.offset[e + 1] += d.offset[e];
  }
  d.gather_index.resize(ids.size());
  d.slot_index.resize(ids.size());
  std::vector<int64_t> fill(d.offset.begin(), d.offset.end() - 1);
  for (int64_t t = 0; t < rows; ++t) {
    for (int64_t j = 0; j < top_k; ++j) {
      const int32_t e = ids[t * top_k + j];
      d.gather_index[fill[e]] = static_cast<int32_t>(t);
      d.slot_index[fill[e]] = static_cast<int32_t>(t * top_k + j);
      ++fill[e];
    }
  }
  return d;
}

class MoeBlock final : public FeedForward {
 public:
  MoeBlock(std::unique_ptr<Router> router, int64_t num_experts, int64_t hidden)
      : router_(std::move(router)), num_experts_(num_experts), hidden_(hidden) {}

  // gpt-oss: the routed experts' biases and clamped SwiGLU.
  absl::Status LoadExpertExtras(ResidentWeights* store, const models::ModelConfig& c, int layer) {
    using models::ExpertProj;
    extras_.assign(num_experts_, ExpertExtras{});
    for (ExpertExtras& x : extras_) {
      x.swiglu_limit = static_cast<float>(c.swiglu_limit);
      x.swiglu_alpha = static_cast<float>(c.swiglu_alpha);
    }
    plain_ = !c.expert_bias && c.swiglu_limit == 0.0;
    if (!c.expert_bias) return absl::OkStatus();
    const int64_t inter = c.moe_intermediate_size;
    for (int64_t e = 0; e < num_experts_; ++e) {
      ExpertExtras& b = extras_[e];
      ASSIGN_OR_RETURN(b.gate_bias,
                       store->Load(models::ExpertBiasName(layer, e, ExpertProj::kGate), 1, inter));
      ASSIGN_OR_RETURN(b.up_bias,
                       store->Load(models::ExpertBiasName(layer, e, ExpertProj::kUp), 1, inter));
      ASSIGN_OR_RETURN(b.down_bias, store->Load(models::ExpertBiasName(layer, e, ExpertProj::kDown),
                                                1, hidden_));
    }
    return absl::OkStatus();
  }

  absl::Status LoadShared(ResidentWeights* store, const models::ModelConfig& c, int layer) {
    using models::ExpertProj;
    const int64_t s = c.shared_expert_intermediate_size;
    if (s == 0) return absl::OkStatus();
    ASSIGN_OR_RETURN(
        shared_.gate,
        store->Load(models::SharedExpertWeightName(c, layer, ExpertProj::kGate), s, hidden_));
    ASSIGN_OR_RETURN(
        shared_.up,
        store->Load(models::SharedExpertWeightName(c, layer, ExpertProj::kUp), s, hidden_));
    ASSIGN_OR_RETURN(
        shared_.down,
        store->Load(models::SharedExpertWeightName(c, layer, ExpertProj::kDown), hidden_, s));
    if (c.shared_expert_gated) {
      ASSIGN_OR_RETURN(shared_gate_, store->Load(models::SharedExpertGateName(layer), 1, hidden_));
    }
    return absl::OkStatus();
  }

  Router* router() override { return router_.get(); }

  absl::Status Forward(const LayerContext& ctx, const float* x, float* residual,
                       RowRouting* routing) override {
    Backend* be = ctx.backend;
    Workspace* ws = ctx.ws;
    const int64_t rows = ctx.batch->rows, k = router_->top_k();
    int32_t* ids = ws->i32(Buf::kTopkIds);
    float* weights = ws->f(Buf::kTopkWeights);
    RETURN_IF_ERROR(router_->Route(ctx, x, ids, weights));
    std::vector<int32_t> host_ids(rows * k);
    RETURN_IF_ERROR(be->CopyToHost(host_ids.data(), ids, host_ids.size() * sizeof(int32_t)));
    if (routing != nullptr) {
      routing->top_k = k;
      routing->ids = host_ids;
      routing->weights.resize(rows * k);
      RETURN_IF_ERROR(be->CopyToHost(routing->weights.data(), weights,
                                     routing->weights.size() * sizeof(float)));
    }
    float* out = ws->f(Buf::kFfnOut);
    ctx.experts->OnTokenRouting(ctx.layer, host_ids, static_cast<int>(k));
    if (RoutedExperts* routed = ctx.experts->routed_experts()) {
      if (!plain_experts()) {
        return absl::UnimplementedError(
            "experts with biases and a clamped SwiGLU (gpt-oss) do not run over several devices "
            "yet; serve this model on one device");
      }
      RETURN_IF_ERROR(routed->Run(
          ctx, RoutedExpertsInput{ctx.layer, rows, k, hidden_, x, weights, host_ids}, out));
    } else {
      RETURN_IF_ERROR(RunAndCombine(ctx, x, host_ids, ids, weights, out));
    }
    if (!shared_.gate.empty()) AddShared(ctx, x, out);
    be->AddRows(AddRowsParams{residual, hidden_, out, hidden_, nullptr, 1, RowScale::kIdentity,
                              rows, hidden_});
    return absl::OkStatus();
  }

 private:
  absl::Status RunAndCombine(const LayerContext& ctx, const float* x,
                             const std::vector<int32_t>& host_ids, const int32_t* ids,
                             const float* weights, float* out) {
    Backend* be = ctx.backend;
    Workspace* ws = ctx.ws;
    const int64_t rows = ctx.batch->rows, k = router_->top_k();
    Dispatch d = GroupByExpert(host_ids, rows, k, num_experts_);
    RETURN_IF_ERROR(be->CopyToDevice(ws->i32(Buf::kGatherIndex), d.gather_index.data(),
                                     d.gather_index.size() * 4));
    RETURN_IF_ERROR(
        be->CopyToDevice(ws->i32(Buf::kSlotIndex), d.slot_index.data(), d.slot_index.size() * 4));
    RETURN_IF_ERROR(RunExperts(ctx, x, d));
    be->MoeCombine(
        MoeCombineParams{ws->f(Buf::kSlots), weights, ids, out, hidden_, rows, k, hidden_, false});
    return absl::OkStatus();
  }

  // The provider may take some experts to compute on the host (their rows
  // cross as activations); the rest run here. Both sides overlap: the host
  // jobs start before the first device expert.
  absl::Status RunExperts(const LayerContext& ctx, const float* x, const Dispatch& d) {
    ExpertProvider* provider = ctx.experts;
    std::vector<int64_t> tokens;
    tokens.reserve(d.experts.size());
    for (int32_t e : d.experts) tokens.push_back(d.offset[e + 1] - d.offset[e]);
    const bool host_reads_extras = plain_experts() || ctx.backend->host_memory_is_device_memory();
    const std::vector<int32_t> host = host_reads_extras
                                          ? provider->PlanHostCompute(ctx.layer, d.experts, tokens)
                                          : std::vector<int32_t>{};
    std::vector<int32_t> device;
    std::set_difference(d.experts.begin(), d.experts.end(), host.begin(), host.end(),
                        std::back_inserter(device));
    HostRows rows;
    absl::Status s = host.empty() ? absl::OkStatus() : StartHostExperts(ctx, x, d, host, &rows);
    // Grouped needs every expert's rows contiguous (no host experts) and
    // every expert acquired at once.
    const bool grouped =
        host.empty() && plain_experts() && provider->HoldsAllExperts() &&
        UseGroupedExpertGemm(ctx.expert_gemm, *ctx.backend, static_cast<int64_t>(device.size()),
                             static_cast<int64_t>(d.gather_index.size()));
    if (s.ok()) {
      s = grouped ? RunGroupedDeviceExperts(ctx, x, d, std::move(device))
                  : RunDeviceExperts(ctx, x, d, std::move(device));
    }
    const absl::Status finished = provider->FinishHostCompute(ctx.layer);
    RETURN_IF_ERROR(s);
    RETURN_IF_ERROR(finished);
    return host.empty() ? absl::OkStatus() : ScatterHostExperts(ctx, d, host, rows);
  }

  absl::Status RunDeviceExperts(const LayerContext& ctx, const float* x, const Dispatch& d,
                                std::vector<int32_t> order) {
    Backend* be = ctx.backend;
    Workspace* ws = ctx.ws;
    ExpertProvider* provider = ctx.experts;
    provider->OnRouting(ctx.layer, order);
    provider->OrderForCompute(ctx.layer, &order);
    for (int32_t e : order) {
      ASSIGN_OR_RETURN(ExpertWeights w, provider->Acquire(ctx.layer, e));
      const int64_t off = d.offset[e], n = d.offset[e + 1] - d.offset[e];
      const MlpWeights mlp = Expert(e, w);
      const int32_t* rows = ws->i32(Buf::kGatherIndex) + off;
      const int32_t* slots = ws->i32(Buf::kSlotIndex) + off;
      if (be->HasMatmulRowMaps()) {  // straight from the token rows into the slots
        RunRoutedMlp(be, ws, mlp, x, RoutedRows{rows, slots}, n, ws->f(Buf::kSlots));
      } else {
        float* in = ws->f(Buf::kExpertIn);
        float* out = ws->f(Buf::kExpertOut);
        be->GatherRows(GatherRowsParams{x, hidden_, rows, in, n, hidden_});
        RunMlp(be, ws, mlp, in, n, out, /*accumulate=*/false);
        be->ScatterRows(ScatterRowsParams{out, slots, ws->f(Buf::kSlots), n, hidden_});
      }
      provider->Release(ctx.layer, e);
    }
    return absl::OkStatus();
  }

  // Every expert at once (RunGroupedExperts), the experts acquired in the
  // provider's order and released together after the GEMMs are enqueued.
  absl::Status RunGroupedDeviceExperts(const LayerContext& ctx, const float* x, const Dispatch& d,
                                       std::vector<int32_t> order) {
    Workspace* ws = ctx.ws;
    ExpertProvider* provider = ctx.experts;
    provider->OnRouting(ctx.layer, order);
    provider->OrderForCompute(ctx.layer, &order);
    std::vector<MlpWeights> weights(num_experts_);
    std::vector<int32_t> held;
    absl::Status s;
    for (int32_t e : order) {
      absl::StatusOr<ExpertWeights> w = provider->Acquire(ctx.layer, e);
      if (!w.ok()) {
        s = w.status();
        break;
      }
      held.push_back(e);
      weights[e] = MlpWeights{w->gate, w->up, w->down};
    }
    if (s.ok()) {
      // d.experts ascending: their entries are consecutive from 0.
      std::vector<MlpWeights> experts;
      std::vector<int64_t> rows;
      for (int32_t e : d.experts) {
        experts.push_back(weights[e]);
        rows.push_back(d.offset[e + 1] - d.offset[e]);
      }
      s = RunGroupedExperts(ctx.backend, ws, x, ws->i32(Buf::kGatherIndex),
                            ws->i32(Buf::kSlotIndex), ws->f(Buf::kSlots), experts, rows);
    }
    for (int32_t e : held) provider->Release(ctx.layer, e);
    return s;
  }

  // Host copies of the host-computed experts' rows, expert after expert in
  // the order of `host`.
  struct HostRows {
    std::vector<float> in, out;
  };

  absl::Status StartHostExperts(const LayerContext& ctx, const float* x, const Dispatch& d,
                                const std::vector<int32_t>& host, HostRows* rows) {
    Backend* be = ctx.backend;
    Workspace* ws = ctx.ws;
    int64_t total = 0;
    for (int32_t e : host) total += d.offset[e + 1] - d.offset[e];
    rows->in.resize(total * hidden_);
    rows->out.resize(total * hidden_);
    int64_t at = 0;
    for (int32_t e : host) {
      const int64_t off = d.offset[e], n = d.offset[e + 1] - d.offset[e];
      float* in = ws->f(Buf::kExpertIn);
      be->GatherRows(
          GatherRowsParams{x, hidden_, ws->i32(Buf::kGatherIndex) + off, in, n, hidden_});
      RETURN_IF_ERROR(be->CopyToHost(rows->in.data() + at * hidden_, in, n * hidden_ * 4));
      ctx.experts->StartHostCompute(ctx.layer, e, rows->in.data() + at * hidden_, n,
                                    rows->out.data() + at * hidden_, Extras(e));
      at += n;
    }
    return absl::OkStatus();
  }

  absl::Status ScatterHostExperts(const LayerContext& ctx, const Dispatch& d,
                                  const std::vector<int32_t>& host, const HostRows& rows) {
    Backend* be = ctx.backend;
    Workspace* ws = ctx.ws;
    int64_t at = 0;
    for (int32_t e : host) {
      const int64_t off = d.offset[e], n = d.offset[e + 1] - d.offset[e];
      float* out = ws->f(Buf::kExpertOut);
      RETURN_IF_ERROR(be->CopyToDevice(out, rows.out.data() + at * hidden_, n * hidden_ * 4));
      be->ScatterRows(
          ScatterRowsParams{out, ws->i32(Buf::kSlotIndex) + off, ws->f(Buf::kSlots), n, hidden_});
      at += n;
    }
    return be->Synchronize();  // the copies read `rows`, freed on return
  }

  void AddShared(const LayerContext& ctx, const float* x, float* out) {
    Backend* be = ctx.backend;
    Workspace* ws = ctx.ws;
    const int64_t rows = ctx.batch->rows;
    float* shared = ws->f(Buf::kExpertOut);
    RunMlp(be, ws, shared_, x, rows, shared, /*accumulate=*/false);
    float* gate = nullptr;
    if (!shared_gate_.empty()) {
      gate = ws->f(Buf::kSharedGate);
      MatmulParams g;
      g.x = x;
      g.x_stride = hidden_;
      g.w = shared_gate_;
      g.y = gate;
      g.y_stride = 1;
      g.m = rows;
      be->Matmul(g);
    }
    be->AddRows(
        AddRowsParams{out, hidden_, shared, hidden_, gate, 1, RowScale::kSigmoid, rows, hidden_});
  }

  // Whether the routed experts are plain SwiGLU MLPs without biases.
  bool plain_experts() const { return plain_; }

  const ExpertExtras& Extras(int e) const { return extras_[e]; }

  // Expert e's MLP: the provider's matrices, this block's extras.
  MlpWeights Expert(int e, const ExpertWeights& w) const {
    const ExpertExtras& x = extras_[e];
    return MlpWeights{w.gate,    w.up,        w.down,         x.gate_bias,
                      x.up_bias, x.down_bias, x.swiglu_limit, x.swiglu_alpha};
  }

  const std::unique_ptr<Router> router_;
  const int64_t num_experts_, hidden_;
  std::vector<ExpertExtras> extras_;  // [num_experts]; biases empty but for gpt-oss
  bool plain_ = true;
  MlpWeights shared_;
  WeightRef shared_gate_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<FeedForward>> CreateMoeBlock(ResidentWeights* store,
                                                            const models::ModelConfig& config,
                                                            int layer,
                                                            std::unique_ptr<Router> router) {
  auto block =
      std::make_unique<MoeBlock>(std::move(router), config.num_experts, config.hidden_size);
  RETURN_IF_ERROR(block->LoadShared(store, config, layer));
  RETURN_IF_ERROR(block->LoadExpertExtras(store, config, layer));
  return std::unique_ptr<FeedForward>(std::move(block));
}

}  // namespace expertd::engine
