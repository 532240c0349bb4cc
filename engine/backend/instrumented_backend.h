// InstrumentedBackend: a Backend that forwards every call to another backend,
// counts the calls by kind, and can make chosen ones fail. Tests inject it
// through EngineOptions::backend_factory to check how the engine and the
// scheduler above it react to device faults, or to count what a step runs;
// a test may derive from it to change what the backend says it supports.
//
// Faults follow the device model of backend.h: ops return nothing and run
// asynchronously, so a failed op is skipped and its error surfaces at the
// next CopyToHost or Synchronize (once; then it is cleared), the way a CUDA
// kernel fault does. Allocations and host->device copies fail at once.
//
// Thread safety: as Backend's. Counters and fault rules may be read and set
// from any thread.
#ifndef EXPERTD_ENGINE_BACKEND_INSTRUMENTED_BACKEND_H_
#define EXPERTD_ENGINE_BACKEND_INSTRUMENTED_BACKEND_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/synchronization/mutex.h"
#include "engine/backend/backend.h"

namespace expertd::engine {

enum class BackendCall {
  // Compute ops.
  kEmbedding,
  kRmsNorm,
  kMatmul,
  kRope,
  kKvAppend,
  kAttention,
  kSoftmaxTopK,
  kSwiGlu,
  kAddRows,
  kClamp,
  kGatherRows,
  kScatterRows,
  kMoeCombine,
  kMoeScatterAdd,
  kGroupedMatmul,
  // Memory and synchronisation.
  kAllocate,
  kCopyToDevice,
  kCopyToDeviceAsync,
  kCopyToHost,
  kSynchronize,
};
inline constexpr int kNumBackendCalls = static_cast<int>(BackendCall::kSynchronize) + 1;

class InstrumentedBackend : public Backend {
 public:
  explicit InstrumentedBackend(std::unique_ptr<Backend> target);

  // Calls of one kind so far (failed ones included).
  int64_t count(BackendCall call) const { return counts_[static_cast<int>(call)].load(); }
  // Compute ops so far, all kinds.
  int64_t ops() const;

  // The n-th compute op (1-based, any kind, counted from now) is skipped and
  // `status` is returned by the next CopyToHost or Synchronize.
  void FailNthOp(int64_t n, absl::Status status);
  // The n-th Allocate (1-based, from now) returns `status`.
  void FailNthAllocation(int64_t n, absl::Status status);

  std::string name() const override { return target_->name(); }
  int num_threads() const override { return target_->num_threads(); }
  absl::StatusOr<DeviceBuffer> Allocate(uint64_t bytes, MemoryKind kind) override;
  MemoryStats memory_stats() const override { return target_->memory_stats(); }
  bool SupportsWeightFormat(WeightFormat format) const override {
    return target_->SupportsWeightFormat(format);
  }
  bool host_memory_is_device_memory() const override {
    return target_->host_memory_is_device_memory();
  }
  absl::Status CopyToDevice(void* device_dst, const void* host_src, uint64_t bytes) override;
  absl::Status CopyToHost(void* host_dst, const void* device_src, uint64_t bytes) override;
  absl::Status Synchronize() override;
  absl::StatusOr<std::unique_ptr<BackendEvent>> CopyToDeviceAsync(void* device_dst,
                                                                  const void* host_src,
                                                                  uint64_t bytes) override;
  absl::Status WaitOnDevice(BackendEvent* event) override { return target_->WaitOnDevice(event); }

  void Embedding(const EmbeddingParams& p) override;
  void RmsNorm(const RmsNormParams& p) override;
  void Matmul(const MatmulParams& p) override;
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
  void GroupedMatmul(const GroupedMatmulParams& p) override;
  bool HasGroupedMatmulKernel() const override { return target_->HasGroupedMatmulKernel(); }
  bool HasMatmulRowMaps() const override { return target_->HasMatmulRowMaps(); }
  MatmulActivations matmul_activations() const override { return target_->matmul_activations(); }
  bool HasWindowedAttention() const override { return target_->HasWindowedAttention(); }

 protected:
  // Never called: every buffer handed out belongs to (and is freed by) the
  // target backend.
  void Free(void* data, uint64_t size, MemoryKind kind) override {}

 private:
  // Counts `call`; false when this op must be skipped (an injected fault).
  bool Admit(BackendCall call);
  // The pending op fault, cleared.
  absl::Status TakePending();

  const std::unique_ptr<Backend> target_;
  std::array<std::atomic<int64_t>, kNumBackendCalls> counts_{};

  mutable absl::Mutex mu_;
  int64_t op_countdown_ ABSL_GUARDED_BY(mu_) = 0;  // 0: no op fault armed
  absl::Status op_status_ ABSL_GUARDED_BY(mu_);
  absl::Status pending_ ABSL_GUARDED_BY(mu_);  // a skipped op's error, not yet reported
  int64_t alloc_countdown_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status alloc_status_ ABSL_GUARDED_BY(mu_);
};

}  // namespace expertd::engine

#endif  // EXPERTD_ENGINE_BACKEND_INSTRUMENTED_BACKEND_H_
