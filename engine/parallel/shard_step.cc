// MoEShard's per-layer step on one device: its column shard of every routed
// expert over all the expert's rows (one GEMM per expert, or grouped:
// engine/model/expert_gemm.h), combined, then summed over devices.
//
// Every device reads, combines and all-reduces ALL the layer's routed rows
// whatever D is, so those passes are what keeps the split from being perfect
// (docs/benchmarks.md). The per-expert path therefore adds each expert's
// weighted rows straight into the [tokens, hidden] output (in ascending
// expert id: MoeCombine's bits) instead of writing the [tokens * top_k,
// hidden] slots and combining them after; where the backend's matmul takes
// row maps (the CPU), its GEMMs also read the tokens' rows in place and add
// into the output themselves, with no gathered copy and no output buffer.
#include "base/status_macros.h"
#include "engine/model/feed_forward.h"
#include "engine/parallel/rank_state.h"

namespace expertd::engine::parallel {

ExpertGroups GroupEntries(const std::vector<int32_t>& expert, const std::vector<int32_t>& row,
                          const std::vector<int32_t>& slot, int64_t num_experts) {
  ExpertGroups g;
  g.offset.assign(num_experts + 1, 0);
  for (int32_t e : expert) g.offset[e + 1]++;
  for (int64_t e = 0; e < num_experts; ++e) g.offset[e + 1] += g.offset[e];
  g.row.resize(expert.size());
  g.slot.resize(expert.size());
  std::vector<int64_t> fill(g.offset.begin(), g.offset.end() - 1);
  for (size_t i = 0; i < expert.size(); ++i) {
    const int64_t at = fill[expert[i]]++;
    g.row[at] = row[i];
    g.slot[at] = slot[i];
  }
  return g;
}

absl::Status ShardCompute(RankState& r, const LayerStep& s);

absl::Status EnsureBuffer(Backend* backend, DeviceBuffer* buf, uint64_t bytes) {
  if (buf->size() >= bytes && !buf->empty()) return absl::OkStatus();
  buf->Reset();
  ASSIGN_OR_RETURN(*buf, backend->Allocate(std::max<uint64_t>(bytes, 64)));
  return absl::OkStatus();
}

absl::Status ZeroOnDevice(RankState& r, float* dst, int64_t n) {
  if (static_cast<int64_t>(r.zeros.size()) < n) r.zeros.assign(n, 0.0f);
  return r.backend->CopyToDevice(dst, r.zeros.data(), n * sizeof(float));
}

absl::Status ShardStep(RankState& r, const LayerStep& s) {
  RETURN_IF_ERROR(ShardCompute(r, s));
  return r.comm->AllReduceSum(r.ws->f(Buf::kFfnOut), s.rows * s.hidden);
}

namespace {

// This device's shard of one expert over its n grouped rows starting at
// `off`, weighted and added into the tokens' output rows: in place where the
// backend's matmul takes row maps (no gathered copy of the rows, no output
// buffer to scatter from), else gathered, computed and scatter-added.
void RunShardRows(RankState& r, const LayerStep& s, const ExpertWeights& w, int64_t off,
                  int64_t n) {
  Backend* be = r.backend.get();
  Workspace* ws = r.ws.get();
  const MlpWeights mlp{w.gate, w.up, w.down};
  const int32_t* rows = ws->i32(Buf::kGatherIndex) + off;
  const int32_t* slots = ws->i32(Buf::kSlotIndex) + off;
  if (be->HasMatmulRowMaps()) {
    RunRoutedMlp(be, ws, mlp, ws->f(Buf::kNormed),
                 RoutedRows{rows, rows, ws->f(Buf::kTopkWeights), slots}, n,
                 ws->f(Buf::kFfnOut));
  } else {
    be->GatherRows(
        GatherRowsParams{ws->f(Buf::kNormed), s.hidden, rows, ws->f(Buf::kExpertIn), n, s.hidden});
    RunMlp(be, ws, mlp, ws->f(Buf::kExpertIn), n, ws->f(Buf::kExpertOut), /*accumulate=*/false);
    be->MoeScatterAdd(MoeScatterAddParams{ws->f(Buf::kExpertOut), slots, ws->f(Buf::kTopkWeights),
                                          ws->f(Buf::kFfnOut), n, s.top_k, s.hidden});
  }
  r.work.fetch_add(n * w.gate.rows, std::memory_order_relaxed);
}

// Every routed expert's resident shard at once (RunGroupedExperts): the
// groups' entries are consecutive in ascending expert order. False when the
// device holds no shard (nothing to compute).
absl::StatusOr<bool> RunShardGrouped(RankState& r, const LayerStep& s, const ExpertGroups& g) {
  Workspace* ws = r.ws.get();
  std::vector<MlpWeights> experts;
  std::vector<int64_t> rows;
  for (int64_t e = 0; e < s.num_experts; ++e) {
    const int64_t n = g.offset[e + 1] - g.offset[e];
    if (n == 0) continue;
    const ExpertWeights& w = r.experts[s.layer * s.num_experts + e].w;
    if (w.gate.empty()) return false;  // every expert's shard is empty on this device
    experts.push_back(MlpWeights{w.gate, w.up, w.down});
    rows.push_back(n);
    r.work.fetch_add(n * w.gate.rows, std::memory_order_relaxed);
  }
  RETURN_IF_ERROR(RunGroupedExperts(r.backend.get(), ws, ws->f(Buf::kNormed),
                                    ws->i32(Buf::kGatherIndex), ws->i32(Buf::kSlotIndex),
                                    ws->f(Buf::kSlots), experts, rows));
  return !experts.empty();
}

int64_t ActiveExperts(const ExpertGroups& g) {
  int64_t active = 0;
  for (size_t e = 0; e + 1 < g.offset.size(); ++e) active += g.offset[e + 1] > g.offset[e];
  return active;
}

}  // namespace

absl::Status ShardCompute(RankState& r, const LayerStep& s) {
  ComputeSection section(r);
  Backend* be = r.backend.get();
  Workspace* ws = r.ws.get();
  const int64_t assignments = s.rows * s.top_k;
  std::vector<int32_t> row(assignments), slot(assignments);
  for (int64_t i = 0; i < assignments; ++i) {
    row[i] = static_cast<int32_t>(i / s.top_k);
    slot[i] = static_cast<int32_t>(i);
  }
  const ExpertGroups g = GroupEntries(r.host_ids, row, slot, s.num_experts);
  RETURN_IF_ERROR(be->CopyToDevice(ws->i32(Buf::kGatherIndex), g.row.data(), g.row.size() * 4));
  RETURN_IF_ERROR(be->CopyToDevice(ws->i32(Buf::kSlotIndex), g.slot.data(), g.slot.size() * 4));
  float* out = ws->f(Buf::kFfnOut);
  if (r.store != nullptr) {
    std::vector<int32_t> routed;
    for (int64_t e = 0; e < s.num_experts; ++e)
      if (g.offset[e + 1] > g.offset[e]) routed.push_back(static_cast<int32_t>(e));
    r.store->OnRouting(s.layer, routed);
  }
  // Resident shards may run grouped (offloaded ones are held one at a time).
  // The rule sees this device's backend (its share of the threads).
  const bool grouped =
      r.store == nullptr && UseGroupedExpertGemm(r.expert_gemm, *be, ActiveExperts(g),
                                                 static_cast<int64_t>(g.row.size()));
  if (grouped) {
    ASSIGN_OR_RETURN(const bool any, RunShardGrouped(r, s, g));
    if (any) {
      be->MoeCombine(MoeCombineParams{ws->f(Buf::kSlots), ws->f(Buf::kTopkWeights),
                                      ws->i32(Buf::kTopkIds), out, s.hidden, s.rows, s.top_k,
                                      s.hidden, false});
    } else {
      RETURN_IF_ERROR(ZeroOnDevice(r, out, s.rows * s.hidden));
    }
    return be->Synchronize();
  }
  // Per expert, ascending id: each adds its rows into `out`.
  RETURN_IF_ERROR(ZeroOnDevice(r, out, s.rows * s.hidden));
  for (int64_t e = 0; e < s.num_experts; ++e) {
    const int64_t off = g.offset[e], n = g.offset[e + 1] - off;
    if (n == 0) continue;
    if (r.store == nullptr) {
      const ExpertWeights& w = r.experts[s.layer * s.num_experts + e].w;
      if (w.gate.empty()) continue;  // an empty shard (fewer units than devices)
      RunShardRows(r, s, w, off, n);
      continue;
    }
    ASSIGN_OR_RETURN(ExpertWeights w, r.store->Acquire(s.layer, static_cast<int>(e)));
    RunShardRows(r, s, w, off, n);
    const absl::Status done = be->Synchronize();  // the weights stay pinned until then
    r.store->Release(s.layer, static_cast<int>(e));
    RETURN_IF_ERROR(done);
  }
  return be->Synchronize();
}

}  // namespace expertd::engine::parallel
