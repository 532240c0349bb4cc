// SwiGLU MLPs: the dense layer and the helper every expert FFN uses.
#include <algorithm>
#include <cassert>

#include "base/status_macros.h"
#include "engine/model/feed_forward.h"
#include "models/checkpoint/tensor_names.h"

namespace expertd::engine {

namespace {

// RunMlp, or RunRoutedMlp when `routed` is set.
void Mlp(Backend* be, Workspace* ws, const MlpWeights& w, const float* x, const RoutedRows* routed,
         int64_t rows, float* y, bool accumulate) {
  const int64_t hidden = w.gate.cols, inter = w.gate.rows;
  float* gate = ws->f(Buf::kGate);
  float* up = ws->f(Buf::kUp);
  MatmulParams p;
  p.x = x;
  p.x_stride = hidden;
  p.m = rows;
  p.y_stride = inter;
  if (routed != nullptr) p.x_rows = routed->in_rows;
  p.w = w.gate;
  p.bias = w.gate_bias;
  p.y = gate;
  be->Matmul(p);
  p.w = w.up;
  p.bias = w.up_bias;
  p.y = up;
  be->Matmul(p);
  be->SwiGlu(SwiGluParams{gate, inter, up, inter, gate, inter, rows, inter, w.swiglu_limit,
                          w.swiglu_alpha});
  MatmulParams d;
  d.x = gate;
  d.x_stride = inter;
  d.w = w.down;
  d.y = y;
  d.y_stride = hidden;
  d.m = rows;
  d.bias = w.down_bias;
  d.accumulate = accumulate;
  // A weighted scatter would scale the bias too; the callers with biases
  // (MoeBlock) scatter unweighted.
  assert(routed == nullptr || routed->weights == nullptr || w.down_bias.empty());
  if (routed != nullptr) {
    d.y_rows = routed->out_rows;
    d.row_weights = routed->weights;
    d.row_weight_index = routed->weight_index;
  }
  be->Matmul(d);
}

}  // namespace

void RunMlp(Backend* be, Workspace* ws, const MlpWeights& w, const float* x, int64_t rows, float* y,
            bool accumulate) {
  Mlp(be, ws, w, x, nullptr, rows, y, accumulate);
}

void RunRoutedMlp(Backend* be, Workspace* ws, const MlpWeights& w, const float* x,
                  const RoutedRows& routed, int64_t rows, float* y) {
  assert(be->HasMatmulRowMaps());
  Mlp(be, ws, w, x, &routed, rows, y, /*accumulate=*/routed.weights != nullptr);
}

void RunGroupedMlp(Backend* be, const GroupedMlp& experts, const float* x, float* gate, float* up,
                   float* y, bool accumulate, const int32_t* x_rows, const int32_t* y_rows) {
  const int64_t rows = experts.rows();
  if (rows == 0) return;
  assert((x_rows == nullptr && y_rows == nullptr) || be->HasMatmulRowMaps());
  const int64_t hidden = experts.gate[0].cols, inter = experts.gate[0].rows;
  GroupedMatmulParams p;
  p.x = x;
  p.x_stride = hidden;
  p.x_rows = x_rows;
  p.row_offset = experts.row_offset.data();
  p.groups = static_cast<int64_t>(experts.gate.size());
  p.y_stride = inter;
  p.n = inter;
  p.k = hidden;
  p.w = experts.gate.data();
  p.y = gate;
  be->GroupedMatmul(p);
  p.w = experts.up.data();
  p.y = up;
  be->GroupedMatmul(p);
  be->SwiGlu(SwiGluParams{gate, inter, up, inter, gate, inter, rows, inter});
  GroupedMatmulParams d = p;
  d.x = gate;
  d.x_stride = inter;
  d.x_rows = nullptr;
  d.y_rows = y_rows;
  d.w = experts.down.data();
  d.y = y;
  d.y_stride = hidden;
  d.n = hidden;
  d.k = inter;
  d.accumulate = accumulate;
  be->GroupedMatmul(d);
}

namespace {

// One batch: entries [begin, begin + batch.rows()) of the index arrays.
// Where the backend's matmuls take row maps the GEMMs read x's rows and
// write the slots in place; else the rows are gathered and scattered.
void RunGroupedBatch(Backend* be, Workspace* ws, const float* x, int64_t hidden,
                     const int32_t* gather_index, const int32_t* slot_index, float* slots,
                     int64_t begin, const GroupedMlp& batch) {
  float* gate = ws->f(Buf::kGroupedGate);
  float* up = ws->f(Buf::kGroupedUp);
  if (be->HasMatmulRowMaps()) {
    RunGroupedMlp(be, batch, x, gate, up, slots, false, gather_index + begin, slot_index + begin);
    return;
  }
  const int64_t n = batch.rows();
  float* in = ws->f(Buf::kGroupedIn);
  float* out = ws->f(Buf::kGroupedOut);
  be->GatherRows(GatherRowsParams{x, hidden, gather_index + begin, in, n, hidden});
  RunGroupedMlp(be, batch, in, gate, up, out, false);
  be->ScatterRows(ScatterRowsParams{out, slot_index + begin, slots, n, hidden});
}

}  // namespace

absl::Status RunGroupedExperts(Backend* be, Workspace* ws, const float* x,
                               const int32_t* gather_index, const int32_t* slot_index, float* slots,
                               const std::vector<MlpWeights>& experts,
                               const std::vector<int64_t>& rows) {
  int64_t total = 0;
  for (int64_t n : rows) total += n;
  if (total == 0) return absl::OkStatus();
  const int64_t capacity = std::min(total, kGroupedBatchRows);
  RETURN_IF_ERROR(ws->PrepareGroupedExperts(capacity, /*row_copies=*/!be->HasMatmulRowMaps()));
  const int64_t hidden = experts[0].gate.cols;
  GroupedMlp batch;
  int64_t begin = 0;
  for (size_t i = 0; i < experts.size(); ++i) {
    for (int64_t left = rows[i]; left > 0;) {
      const int64_t take = std::min(left, capacity - batch.rows());
      batch.Add(experts[i], take);
      left -= take;
      if (batch.rows() == capacity) {
        RunGroupedBatch(be, ws, x, hidden, gather_index, slot_index, slots, begin, batch);
        begin += capacity;
        batch = GroupedMlp{};
      }
    }
  }
  if (batch.rows() > 0)
    RunGroupedBatch(be, ws, x, hidden, gather_index, slot_index, slots, begin, batch);
  return absl::OkStatus();
}

namespace {

class DenseMlp final : public FeedForward {
 public:
  explicit DenseMlp(MlpWeights w) : w_(w) {}
  absl::Status Forward(const LayerContext& ctx, const float* x, float* residual,
                       RowRouting* routing) override {
    if (routing != nullptr) *routing = RowRouting{};
    RunMlp(ctx.backend, ctx.ws, w_, x, ctx.batch->rows, residual, /*accumulate=*/true);
    return absl::OkStatus();
  }

 private:
  const MlpWeights w_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<FeedForward>> CreateDenseMlp(ResidentWeights* store,
                                                            const models::ModelConfig& c,
                                                            int layer) {
  using models::ExpertProj;
  const int64_t h = c.hidden_size, d = c.intermediate_size;
  MlpWeights w;
  ASSIGN_OR_RETURN(w.gate, store->Load(models::DenseMlpWeightName(layer, ExpertProj::kGate), d, h));
  ASSIGN_OR_RETURN(w.up, store->Load(models::DenseMlpWeightName(layer, ExpertProj::kUp), d, h));
  ASSIGN_OR_RETURN(w.down, store->Load(models::DenseMlpWeightName(layer, ExpertProj::kDown), h, d));
  return std::unique_ptr<FeedForward>(new DenseMlp(w));
}

}  // namespace expertd::engine
