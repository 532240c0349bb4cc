// HostExpertCompute: routed experts computed on the host (--expert_compute),
// from the host tier's copy of an expert, with the CPU backend's kernels
// (dense and quantized matmuls, SwiGLU) on a thread pool of its own
// (--host_compute_threads). Only activations enter and leave: the weights
// never move to the device.
//
// Thread safety: Run is called by one thread at a time (the store runs host
// jobs on a single worker; each job is parallel inside the kernels).
#ifndef EXPERTD_ENGINE_EXPERTS_HOST_EXPERT_COMPUTE_H_
#define EXPERTD_ENGINE_EXPERTS_HOST_EXPERT_COMPUTE_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "engine/backend/backend.h"
#include "engine/backend/cpu/cpu_backend.h"
#include "engine/model/expert_provider.h"

namespace expertd::engine {

// y [rows, hidden] = down(silu(gate x) * up x) for x [rows, hidden] with
// `backend`'s ops, in the order the engine's MLP uses (so the host and the
// CPU device compute the same numbers); with `extras`' biases and clamped
// SwiGLU when set. gate and up: scratch of [rows, intermediate] floats in
// the backend's memory.
void ExpertMlp(Backend* backend, const ExpertWeights& w, const float* x, int64_t rows, float* gate,
               float* up, float* y, const ExpertExtras& extras = {});

class HostExpertCompute {
 public:
  // threads: the pool's size, the calling thread included (0 = every
  // hardware thread). activations: the device backend's mode, so that an
  // expert computed here gives what it would give there.
  explicit HostExpertCompute(int threads, MatmulActivations activations = MatmulActivations::kF32);

  int threads() const { return cpu_->num_threads(); }
  // y = expert(x) with weights in host memory; blocks until done.
  void Run(const ExpertWeights& w, const ExpertExtras& extras, const float* x, int64_t rows,
           float* y);

 private:
  std::unique_ptr<CpuBackend> cpu_;
  std::vector<float> gate_, up_;  // grown to the largest job
};

}  // namespace expertd::engine

#endif  // EXPERTD_ENGINE_EXPERTS_HOST_EXPERT_COMPUTE_H_
