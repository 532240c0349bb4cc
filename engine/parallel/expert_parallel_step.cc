// Expert parallelism's per-layer step on one device (the baseline MoEShard is
// measured against): dispatch this device's tokens to the experts' owners,
// compute the owned experts, return the results, combine, all-gather.
#include <cmath>

#include "base/status_macros.h"
#include "engine/model/feed_forward.h"
#include "engine/parallel/rank_state.h"

namespace expertd::engine::parallel {
namespace {

// The assignments (t, j) with t in rows_of_source and owner(ids[t, j]) ==
// dest, in (t, j) order: what `source` sends to `dest`. Every rank derives
// the same lists from the replicated routing, so only activations move.
struct Route {
  std::vector<int32_t> token;   // t
  std::vector<int32_t> choice;  // t * top_k + j
};

Route Assignments(const RankState& r, const LayerStep& s, int source, int dest) {
  Route route;
  const ShardRange rows = EvenShard(s.rows, r.topology.world_size(), source);
  for (int64_t t = rows.begin; t < rows.end; ++t) {
    for (int64_t j = 0; j < s.top_k; ++j) {
      if (r.owner[r.host_ids[t * s.top_k + j]] != dest) continue;
      route.token.push_back(static_cast<int32_t>(t));
      route.choice.push_back(static_cast<int32_t>(t * s.top_k + j));
    }
  }
  return route;
}

// Computes the received rows [n, hidden] in r.recv into r.results, expert by
// expert, dropping rows past the capacity (their result stays zero).
absl::Status ComputeOwned(RankState& r, const LayerStep& s,
                          const std::vector<int32_t>& expert_of_row) {
  ComputeSection section(r);
  Backend* be = r.backend.get();
  Workspace* ws = r.ws.get();
  const int64_t n = expert_of_row.size();
  const int64_t capacity =
      s.capacity_factor > 0
          ? static_cast<int64_t>(std::ceil(s.capacity_factor * s.rows * s.top_k / s.num_experts))
          : n;
  std::vector<int32_t> expert, row, slot;
  std::vector<int64_t> taken(s.num_experts, 0);
  for (int64_t i = 0; i < n; ++i) {
    const int32_t e = expert_of_row[i];
    if (taken[e]++ >= capacity) continue;
    expert.push_back(e);
    row.push_back(static_cast<int32_t>(i));
    slot.push_back(static_cast<int32_t>(i));
  }
  r.dropped.fetch_add(n - static_cast<int64_t>(row.size()), std::memory_order_relaxed);
  RETURN_IF_ERROR(ZeroOnDevice(r, static_cast<float*>(r.results.data()), n * s.hidden));
  const ExpertGroups g = GroupEntries(expert, row, slot, s.num_experts);
  RETURN_IF_ERROR(be->CopyToDevice(ws->i32(Buf::kGatherIndex), g.row.data(), g.row.size() * 4));
  for (int64_t e = 0; e < s.num_experts; ++e) {
    const int64_t off = g.offset[e], m = g.offset[e + 1] - off;
    if (m == 0) continue;
    const ExpertWeights& w = r.experts[s.layer * s.num_experts + e].w;
    if (w.gate.empty())
      return absl::InternalError(
          "expert-parallel: rows reached a device that does not own the expert");
    be->GatherRows(GatherRowsParams{r.recv.as<float>(), s.hidden, ws->i32(Buf::kGatherIndex) + off,
                                    ws->f(Buf::kExpertIn), m, s.hidden});
    RunMlp(be, ws, MlpWeights{w.gate, w.up, w.down}, ws->f(Buf::kExpertIn), m,
           ws->f(Buf::kExpertOut), false);
    be->ScatterRows(ScatterRowsParams{ws->f(Buf::kExpertOut), ws->i32(Buf::kGatherIndex) + off,
                                      r.results.as<float>(), m, s.hidden});
    r.work.fetch_add(m * w.gate.rows, std::memory_order_relaxed);
  }
  return be->Synchronize();
}

}  // namespace

absl::Status ExpertParallelStep(RankState& r, const LayerStep& s) {
  Backend* be = r.backend.get();
  Workspace* ws = r.ws.get();
  const int world = r.topology.world_size(), me = r.topology.rank();
  const int64_t row_bytes = s.hidden * sizeof(float);
  // 1. Dispatch: my tokens' rows, grouped by destination.
  std::vector<int64_t> send_bytes(world), recv_bytes(world);
  std::vector<int32_t> send_token, send_choice, expert_of_recv;
  {
    ComputeSection section(r);
    for (int d = 0; d < world; ++d) {
      Route out = Assignments(r, s, me, d);
      send_bytes[d] = out.token.size() * row_bytes;
      send_token.insert(send_token.end(), out.token.begin(), out.token.end());
      send_choice.insert(send_choice.end(), out.choice.begin(), out.choice.end());
      Route in = Assignments(r, s, d, me);
      recv_bytes[d] = in.token.size() * row_bytes;
      for (int32_t c : in.choice) expert_of_recv.push_back(r.host_ids[c]);
    }
    const int64_t n_send = send_token.size(), n_recv = expert_of_recv.size();
    RETURN_IF_ERROR(EnsureBuffer(be, &r.send, n_send * row_bytes));
    RETURN_IF_ERROR(EnsureBuffer(be, &r.back, n_send * row_bytes));
    RETURN_IF_ERROR(EnsureBuffer(be, &r.recv, n_recv * row_bytes));
    RETURN_IF_ERROR(EnsureBuffer(be, &r.results, n_recv * row_bytes));
    RETURN_IF_ERROR(be->CopyToDevice(ws->i32(Buf::kGatherIndex), send_token.data(), n_send * 4));
    be->GatherRows(GatherRowsParams{ws->f(Buf::kNormed), s.hidden, ws->i32(Buf::kGatherIndex),
                                    r.send.as<float>(), n_send, s.hidden});
    RETURN_IF_ERROR(be->Synchronize());
  }
  RETURN_IF_ERROR(
      r.comm->AllToAllV(r.send.data(), send_bytes.data(), r.recv.data(), recv_bytes.data()));
  // 2. Compute the experts this device owns on what it received.
  RETURN_IF_ERROR(ComputeOwned(r, s, expert_of_recv));
  // 3. Return: results travel back the way the rows came.
  RETURN_IF_ERROR(
      r.comm->AllToAllV(r.results.data(), recv_bytes.data(), r.back.data(), send_bytes.data()));
  // 4. Combine my tokens in the single-device order.
  const ShardRange mine = EvenShard(s.rows, world, me);
  const int64_t block_rows = (s.rows + world - 1) / world;
  const int64_t n_send = send_token.size();
  float* my_block = nullptr;
  {
    ComputeSection section(r);
    RETURN_IF_ERROR(
        EnsureBuffer(be, &r.slots, std::max<int64_t>(mine.size() * s.top_k, 1) * row_bytes));
    RETURN_IF_ERROR(EnsureBuffer(be, &r.gathered, world * block_rows * row_bytes));
    my_block = r.gathered.as<float>() + me * block_rows * s.hidden;
    for (int32_t& c : send_choice) c -= static_cast<int32_t>(mine.begin * s.top_k);
    RETURN_IF_ERROR(be->CopyToDevice(ws->i32(Buf::kSlotIndex), send_choice.data(), n_send * 4));
    be->ScatterRows(ScatterRowsParams{r.back.as<float>(), ws->i32(Buf::kSlotIndex),
                                      r.slots.as<float>(), n_send, s.hidden});
    be->MoeCombine(MoeCombineParams{r.slots.as<float>(),
                                    ws->f(Buf::kTopkWeights) + mine.begin * s.top_k,
                                    ws->i32(Buf::kTopkIds) + mine.begin * s.top_k, my_block,
                                    s.hidden, mine.size(), s.top_k, s.hidden, false});
    RETURN_IF_ERROR(be->Synchronize());
  }
  // 5. Replicate the output: every device needs every row for the next layer.
  RETURN_IF_ERROR(r.comm->AllGather(my_block, r.gathered.data(), block_rows * row_bytes));
  ComputeSection section(r);
  std::vector<int32_t> unpack(s.rows);
  for (int src = 0; src < world; ++src) {
    const ShardRange rows = EvenShard(s.rows, world, src);
    for (int64_t t = rows.begin; t < rows.end; ++t) {
      unpack[t] = static_cast<int32_t>(src * block_rows + (t - rows.begin));
    }
  }
  RETURN_IF_ERROR(be->CopyToDevice(ws->i32(Buf::kGatherIndex), unpack.data(), unpack.size() * 4));
  be->GatherRows(GatherRowsParams{r.gathered.as<float>(), s.hidden, ws->i32(Buf::kGatherIndex),
                                  ws->f(Buf::kFfnOut), s.rows, s.hidden});
  return be->Synchronize();
}

}  // namespace expertd::engine::parallel
