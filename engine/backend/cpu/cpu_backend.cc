#include "engine/backend/cpu/cpu_backend.h"

#include <cstring>
#include <thread>

#include "absl/strings/str_cat.h"
#include "engine/backend/cpu/host_buffer.h"
#include "engine/backend/cpu/kernels.h"

namespace expertd::engine {
namespace {

int ResolveThreads(int threads) {
  if (threads > 0) return threads;
  unsigned hw = std::thread::hardware_concurrency();
  return hw == 0 ? 1 : static_cast<int>(hw);
}

constexpr uint64_t kAlign = 64;

uint64_t RoundUp(uint64_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

}  // namespace

CpuBackend::CpuBackend(const CpuBackendOptions& options)
    : limit_(options.device_memory_limit),
      activations_(options.matmul_activations),
      row_maps_(options.matmul_row_maps),
      pool_(std::make_unique<ThreadPool>(ResolveThreads(options.threads))) {}

CpuBackend::~CpuBackend() = default;

absl::StatusOr<DeviceBuffer> CpuBackend::Allocate(uint64_t bytes, MemoryKind kind) {
  const uint64_t size = RoundUp(bytes == 0 ? 1 : bytes);
  if (kind == MemoryKind::kDevice) {
    uint64_t used = device_in_use_.load();
    do {
      if (limit_ != 0 && used + size > limit_) {
        return absl::ResourceExhaustedError(absl::StrCat("cpu device memory: cannot allocate ",
                                                         bytes, " bytes: ", used, " of ", limit_,
                                                         " in use"));
      }
    } while (!device_in_use_.compare_exchange_weak(used, used + size));
    uint64_t peak = device_peak_.load();
    while (used + size > peak && !device_peak_.compare_exchange_weak(peak, used + size)) {
    }
  } else {
    pinned_in_use_ += size;
  }
  void* data = cpu::AllocateHostBuffer(size);
  if (data == nullptr) {
    (kind == MemoryKind::kDevice ? device_in_use_ : pinned_in_use_) -= size;
    return absl::ResourceExhaustedError(
        absl::StrCat("cpu backend: out of host memory allocating ", bytes, " bytes"));
  }
  return MakeBuffer(data, size, kind);
}

void CpuBackend::Free(void* data, uint64_t size, MemoryKind kind) {
  cpu::FreeHostBuffer(data);
  (kind == MemoryKind::kDevice ? device_in_use_ : pinned_in_use_) -= size;
}

MemoryStats CpuBackend::memory_stats() const {
  MemoryStats s;
  s.device_bytes_in_use = device_in_use_.load();
  s.device_bytes_limit = limit_;
  s.device_bytes_peak = device_peak_.load();
  s.host_pinned_bytes_in_use = pinned_in_use_.load();
  return s;
}

absl::Status CpuBackend::CopyToDevice(void* device_dst, const void* host_src, uint64_t bytes) {
  if (bytes > 0) std::memcpy(device_dst, host_src, bytes);
  return absl::OkStatus();
}

absl::Status CpuBackend::CopyToHost(void* host_dst, const void* device_src, uint64_t bytes) {
  if (bytes > 0) std::memcpy(host_dst, device_src, bytes);
  return absl::OkStatus();
}

void CpuBackend::Embedding(const EmbeddingParams& p) { cpu::Embedding(p, pool_.get()); }
void CpuBackend::RmsNorm(const RmsNormParams& p) { cpu::RmsNorm(p, pool_.get()); }
void CpuBackend::Matmul(const MatmulParams& p) {
  if (activations_ == MatmulActivations::kF32) return cpu::Matmul(p, pool_.get());
  MatmulParams q = p;
  q.activations = activations_;
  cpu::Matmul(q, pool_.get());
}
void CpuBackend::GroupedMatmul(const GroupedMatmulParams& p) {
  if (activations_ == MatmulActivations::kF32) return cpu::GroupedMatmul(p, pool_.get());
  GroupedMatmulParams q = p;
  q.activations = activations_;
  cpu::GroupedMatmul(q, pool_.get());
}
void CpuBackend::Rope(const RopeParams& p) { cpu::Rope(p, pool_.get()); }
void CpuBackend::KvAppend(const KvAppendParams& p) { cpu::KvAppend(p, pool_.get()); }
void CpuBackend::Attention(const AttentionParams& p) { cpu::Attention(p, pool_.get()); }
void CpuBackend::SoftmaxTopK(const SoftmaxTopKParams& p) { cpu::SoftmaxTopK(p, pool_.get()); }
void CpuBackend::SwiGlu(const SwiGluParams& p) { cpu::SwiGlu(p, pool_.get()); }
void CpuBackend::AddRows(const AddRowsParams& p) { cpu::AddRows(p, pool_.get()); }
void CpuBackend::Clamp(const ClampParams& p) { cpu::Clamp(p, pool_.get()); }
void CpuBackend::GatherRows(const GatherRowsParams& p) { cpu::GatherRows(p, pool_.get()); }
void CpuBackend::ScatterRows(const ScatterRowsParams& p) { cpu::ScatterRows(p, pool_.get()); }
void CpuBackend::MoeCombine(const MoeCombineParams& p) { cpu::MoeCombine(p, pool_.get()); }
void CpuBackend::MoeScatterAdd(const MoeScatterAddParams& p) {
  cpu::MoeScatterAdd(p, pool_.get());
}

}  // namespace expertd::engine
