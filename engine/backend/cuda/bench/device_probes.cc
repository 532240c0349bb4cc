#include "engine/backend/cuda/bench/device_probes.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"

namespace expertd::engine::cuda_bench {
namespace {

absl::Status Check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, ": ", cudaGetErrorString(e)));
}

#define PROBE_CHECK(expr, what)            \
  do {                                     \
    absl::Status s_ = Check((expr), what); \
    if (!s_.ok()) return s_;               \
  } while (0)

// Median milliseconds of `repeats` copies (after one warm-up copy).
absl::StatusOr<double> TimeCopies(void* dst, const void* src, uint64_t bytes, cudaMemcpyKind kind,
                                  int repeats) {
  cudaStream_t stream;
  PROBE_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "stream");
  cudaEvent_t start, stop;
  PROBE_CHECK(cudaEventCreate(&start), "event");
  PROBE_CHECK(cudaEventCreate(&stop), "event");
  std::vector<float> ms;
  for (int i = 0; i <= repeats; ++i) {
    PROBE_CHECK(cudaEventRecord(start, stream), "record");
    PROBE_CHECK(cudaMemcpyAsync(dst, src, bytes, kind, stream), "copy");
    PROBE_CHECK(cudaEventRecord(stop, stream), "record");
    PROBE_CHECK(cudaEventSynchronize(stop), "sync");
    float t = 0;
    PROBE_CHECK(cudaEventElapsedTime(&t, start, stop), "elapsed");
    if (i > 0) ms.push_back(t);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  cudaStreamDestroy(stream);
  std::sort(ms.begin(), ms.end());
  return static_cast<double>(ms[ms.size() / 2]);
}

}  // namespace

absl::StatusOr<Ceilings> MeasureCeilings(uint64_t d2d_bytes, uint64_t h2d_bytes, int repeats) {
  Ceilings c;
  void *a = nullptr, *b = nullptr, *host = nullptr;
  PROBE_CHECK(cudaMalloc(&a, d2d_bytes), "cudaMalloc");
  PROBE_CHECK(cudaMalloc(&b, d2d_bytes), "cudaMalloc");
  PROBE_CHECK(cudaMemset(a, 1, d2d_bytes), "memset");  // never time untouched or zero pages
  auto d2d = TimeCopies(b, a, d2d_bytes, cudaMemcpyDeviceToDevice, repeats);
  if (!d2d.ok()) return d2d.status();
  c.d2d_gbps = 2.0 * d2d_bytes / (*d2d * 1e-3) / 1e9;
  PROBE_CHECK(cudaHostAlloc(&host, h2d_bytes, cudaHostAllocDefault), "cudaHostAlloc");
  std::memset(host, 0x5a, h2d_bytes);
  auto h2d = TimeCopies(a, host, std::min(h2d_bytes, d2d_bytes), cudaMemcpyHostToDevice, repeats);
  if (!h2d.ok()) return h2d.status();
  c.h2d_pinned_gbps = std::min(h2d_bytes, d2d_bytes) / (*h2d * 1e-3) / 1e9;
  cudaFreeHost(host);
  cudaFree(a);
  cudaFree(b);
  return c;
}

}  // namespace expertd::engine::cuda_bench
