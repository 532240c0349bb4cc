// The ceilings the GPU decode benchmark compares against, measured in the
// same run (docs/cuda.md): device-to-device copy bandwidth (bytes read +
// bytes written per second) and pinned host -> device copy bandwidth. Medians
// of repeated copies timed with CUDA events after a warm-up copy. They use
// cudaMalloc/cudaHostAlloc directly: run them before an engine takes the
// device memory.
#ifndef EXPERTD_ENGINE_BACKEND_CUDA_BENCH_DEVICE_PROBES_H_
#define EXPERTD_ENGINE_BACKEND_CUDA_BENCH_DEVICE_PROBES_H_

#include <cstdint>

#include "absl/status/statusor.h"

namespace expertd::engine::cuda_bench {

struct Ceilings {
  double d2d_gbps = 0;         // (read + written bytes) / s, device memory
  double h2d_pinned_gbps = 0;  // bytes / s, pinned host -> device
};

absl::StatusOr<Ceilings> MeasureCeilings(uint64_t d2d_bytes = 2ull << 30,
                                         uint64_t h2d_bytes = 1ull << 30, int repeats = 10);

}  // namespace expertd::engine::cuda_bench

#endif  // EXPERTD_ENGINE_BACKEND_CUDA_BENCH_DEVICE_PROBES_H_
