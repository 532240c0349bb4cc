// CpuBackend: the reference Backend. "Device memory" is host memory (64-byte
// aligned), optionally capped at device_memory_limit bytes so that the expert
// cache and the KV cache can be exercised under a device budget. Ops run
// synchronously on the calling thread plus a ThreadPool; they are the CPU
// twins in kernels.h.
//
// Thread safety: as Backend (ops from one thread; memory calls from any).
#ifndef EXPERTD_ENGINE_BACKEND_CPU_CPU_BACKEND_H_
#define EXPERTD_ENGINE_BACKEND_CPU_CPU_BACKEND_H_

#include <atomic>
#include <memory>
#include <string>

#include "engine/backend/backend.h"
#include "engine/backend/cpu/thread_pool.h"

namespace expertd::engine {

struct CpuBackendOptions {
  int threads = 0;                   // 0 = std::thread::hardware_concurrency()
  uint64_t device_memory_limit = 0;  // 0 = unlimited
  // kBF16 REQUIRES cpu::CpuSupportsBf16Dot(), kInt8 cpu::CpuSupportsInt8Activations()
  // (CreateBackend checks them).
  MatmulActivations matmul_activations = MatmulActivations::kF32;
  bool matmul_row_maps = true;  // BackendOptions::matmul_row_maps
};

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(const CpuBackendOptions& options);
  ~CpuBackend() override;

  std::string name() const override { return "cpu"; }
  int num_threads() const override { return pool_->num_threads(); }
  ThreadPool* pool() { return pool_.get(); }

  absl::StatusOr<DeviceBuffer> Allocate(uint64_t bytes, MemoryKind kind) override;
  MemoryStats memory_stats() const override;
  bool host_memory_is_device_memory() const override { return true; }
  // Every format: quantized weights run quant_matmul.h.
  bool SupportsWeightFormat(WeightFormat) const override { return true; }
  absl::Status CopyToDevice(void* device_dst, const void* host_src, uint64_t bytes) override;
  absl::Status CopyToHost(void* host_dst, const void* device_src, uint64_t bytes) override;
  absl::Status Synchronize() override { return absl::OkStatus(); }

  void Embedding(const EmbeddingParams& p) override;
  void RmsNorm(const RmsNormParams& p) override;
  void Matmul(const MatmulParams& p) override;
  void GroupedMatmul(const GroupedMatmulParams& p) override;
  bool HasGroupedMatmulKernel() const override { return true; }
  bool HasMatmulRowMaps() const override { return row_maps_; }
  MatmulActivations matmul_activations() const override { return activations_; }
  void Rope(const RopeParams& p) override;
  void KvAppend(const KvAppendParams& p) override;
  void Attention(const AttentionParams& p) override;
  void SoftmaxTopK(const SoftmaxTopKParams& p) override;
  void SwiGlu(const SwiGluParams& p) override;
  void AddRows(const AddRowsParams& p) override;
  void Clamp(const ClampParams& p) override;
  void GatherRows(const GatherRowsParams& p) override;
  void ScatterRows(const ScatterRowsParams& p) override;
  void MoeCombine(const MoeCombineParams& p) override;
  void MoeScatterAdd(const MoeScatterAddParams& p) override;

 protected:
  void Free(void* data, uint64_t size, MemoryKind kind) override;

 private:
  // Constant after construction.
  const uint64_t limit_;
  const MatmulActivations activations_;
  const bool row_maps_;
  std::unique_ptr<ThreadPool> pool_;
  // Memory accounting (lock-free; Allocate reserves with a CAS loop).
  std::atomic<uint64_t> device_in_use_{0};
  std::atomic<uint64_t> device_peak_{0};
  std::atomic<uint64_t> pinned_in_use_{0};
};

}  // namespace expertd::engine

#endif  // EXPERTD_ENGINE_BACKEND_CPU_CPU_BACKEND_H_
