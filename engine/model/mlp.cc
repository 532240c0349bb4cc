// SwiGLU MLPs: the dense layer and the helper every expert FFN uses.
#include "base/status_macros.h"
#include "engine/model/feed_forward.h"
#include "models/checkpoint/tensor_names.h"

namespace expertd::engine {

void RunMlp(Backend* be, Workspace* ws, const MlpWeights& w, const float* x, int64_t rows, float* y,
            bool accumulate) {
  const int64_t hidden = w.gate.cols, inter = w.gate.rows;
  float* gate = ws->f(Buf::kGate);
  float* up = ws->f(Buf::kUp);
  MatmulParams p;
  p.x = x;
  p.x_stride = hidden;
  p.m = rows;
  p.y_stride = inter;
  p.w = w.gate;
  p.y = gate;
  be->Matmul(p);
  p.w = w.up;
  p.y = up;
  be->Matmul(p);
  be->SwiGlu(SwiGluParams{gate, inter, up, inter, gate, inter, rows, inter});
  MatmulParams d;
  d.x = gate;
  d.x_stride = inter;
  d.w = w.down;
  d.y = y;
  d.y_stride = hidden;
  d.m = rows;
  d.accumulate = accumulate;
  be->Matmul(d);
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
