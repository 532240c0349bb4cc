#include "engine/experts/host_expert_compute.h"

namespace expertd::engine {

void ExpertMlp(Backend* be, const ExpertWeights& w, const float* x, int64_t rows, float* gate,
               float* up, float* y, const ExpertExtras& extras) {
  const int64_t hidden = w.gate.cols, inter = w.gate.rows;
  MatmulParams p;
  p.x = x;
  p.x_stride = hidden;
  p.m = rows;
  p.y_stride = inter;
  p.w = w.gate;
  p.bias = extras.gate_bias;
  p.y = gate;
  be->Matmul(p);
  p.w = w.up;
  p.bias = extras.up_bias;
  p.y = up;
  be->Matmul(p);
  be->SwiGlu(SwiGluParams{gate, inter, up, inter, gate, inter, rows, inter, extras.swiglu_limit,
                          extras.swiglu_alpha});
  MatmulParams d;
  d.x = gate;
  d.x_stride = inter;
  d.w = w.down;
  d.y = y;
  d.y_stride = hidden;
  d.m = rows;
  d.bias = extras.down_bias;
  be->Matmul(d);
}

HostExpertCompute::HostExpertCompute(int threads, MatmulActivations activations)
    : cpu_(std::make_unique<CpuBackend>(CpuBackendOptions{threads, 0, activations})) {}

void HostExpertCompute::Run(const ExpertWeights& w, const ExpertExtras& extras, const float* x,
                            int64_t rows, float* y) {
  const size_t scratch = static_cast<size_t>(rows * w.gate.rows);
  if (gate_.size() < scratch) {
    gate_.resize(scratch);
    up_.resize(scratch);
  }
  ExpertMlp(cpu_.get(), w, x, rows, gate_.data(), up_.data(), y, extras);
}

}  // namespace expertd::engine
