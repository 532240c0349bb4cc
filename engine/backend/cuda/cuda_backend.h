// CudaBackend: the Backend (engine/backend/backend.h) on one NVIDIA GPU.
//
// Memory: ONE cudaMalloc at creation -- the arena -- from which every device
// DeviceBuffer (weights, KV cache, expert cache, workspace, the backend's own
// GEMM buffers) is carved by a best-fit allocator (arena_allocator.h). So
// there is no cudaMalloc on the decode path, and device_memory_limit is a
// hard budget (ResourceExhausted past it, like the CPU backend's limit).
// A freed block returns to the arena only once the ops enqueued before the
// free have finished (an event per free), so memory is never reused under a
// running kernel. kHostPinned buffers are cudaHostAlloc'ed (page-locked).
//
// Streams: ops run in call order on one compute stream. Copies:
//   CopyToDevice (blocking, any thread) and CopyToDeviceAsync run on copy
//     streams of their own, after an event recorded on the compute stream
//     (the destination may have been read by queued ops: an expert cache
//     slot being refilled), so host->device paging overlaps compute --
//     except small (<= 256 KiB) copies from pageable memory (a step's token
//     layout and dispatch indices), which are enqueued in order on the
//     compute stream without a host wait (the driver stages pageable memory
//     before returning, so the source may be reused at once);
//   CopyToHost runs on the compute stream (after the ops that produced the
//     data) and waits for the copy only.
// Errors: ops return void, so a launch error is kept and returned by the
// next Synchronize / CopyToHost / TakeError.
//
// Matmul: m <= skinny_max_rows uses the row-invariant decode kernel
// (skinny_gemm.cu: fp32 activations, weights in their own dtype, fp32
// accumulation); larger m uses cuBLASLt (cublaslt_gemm.h: bf16/fp16
// activations, fp32 accumulation), or the decode kernel 16 rows at a time
// when cuBLASLt has no algorithm for the shape or row_invariant_gemm is set.
// Every other op is one kernel from kernels.h, the GPU twin of the CPU op of
// the same name.
//
// Thread safety: as Backend (ops and Synchronize from one thread; memory
// and copies from any thread).
#ifndef EXPERTD_ENGINE_BACKEND_CUDA_CUDA_BACKEND_H_
#define EXPERTD_ENGINE_BACKEND_CUDA_CUDA_BACKEND_H_

#include <cuda_runtime_api.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/backend/backend.h"
#include "engine/backend/cuda/arena_allocator.h"
#include "engine/backend/cuda/kernels.h"

namespace expertd::engine {
namespace cuda {
class LtGemm;
class EventPool;
}  // namespace cuda

struct CudaBackendOptions {
  int device = 0;
  // Arena size in bytes. 0: the device's free memory at creation minus
  // reserve_bytes (left to the CUDA context, cuBLASLt and other processes).
  uint64_t device_memory_limit = 0;
  uint64_t reserve_bytes = 1ull << 30;
  // Matmuls with m <= this use the row-invariant decode kernel (<= 16).
  int64_t skinny_max_rows = cuda::kSkinnyMaxRows;
  // Every Matmul through the decode kernel (16 rows per launch): bitwise
  // batch-invariant prefill too, at the cost of fp32 CUDA-core GEMMs.
  bool row_invariant_gemm = false;
  // cuBLASLt path: two bf16 terms per activation (see cublaslt_gemm.h).
  bool split_activations = false;
  uint64_t gemm_workspace_bytes = 32ull << 20;  // cuBLASLt workspace
  uint64_t gemm_scratch_bytes = 64ull << 20;    // 16-bit activations
  cuda::AttentionKernel attention = cuda::AttentionKernel::kAuto;
  int copy_streams = 2;
};

// OK when CUDA device `device` can be used; otherwise Unavailable with the
// reason (no driver, no device, ...). Tests skip on it.
absl::Status CudaDeviceAvailable(int device = 0);

// Counters of the host -> device copies (CopyToDevice + CopyToDeviceAsync).
struct CudaCopyStats {
  uint64_t h2d_bytes = 0;
  uint64_t h2d_copies = 0;
};

class CudaBackend final : public Backend {
 public:
  static absl::StatusOr<std::unique_ptr<CudaBackend>> Create(const CudaBackendOptions& options);
  ~CudaBackend() override;

  std::string name() const override { return "cuda"; }
  int num_threads() const override { return 1; }

  absl::StatusOr<DeviceBuffer> Allocate(uint64_t bytes, MemoryKind kind) override;
  MemoryStats memory_stats() const override;
  bool host_memory_is_device_memory() const override { return false; }
  // Quantized weights run quant_matmul.cu (checked against the CPU twin only
  // where a GPU is present).
  bool SupportsWeightFormat(WeightFormat) const override { return true; }
  absl::Status CopyToDevice(void* device_dst, const void* host_src, uint64_t bytes) override;
  absl::Status CopyToHost(void* host_dst, const void* device_src, uint64_t bytes) override;
  absl::Status Synchronize() override;
  absl::StatusOr<std::unique_ptr<BackendEvent>> CopyToDeviceAsync(void* device_dst,
                                                                  const void* host_src,
                                                                  uint64_t bytes) override;
  absl::Status WaitOnDevice(BackendEvent* event) override;

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

  // ---- Beyond the Backend interface -----------------------------------------
  // out[r] = argmax of logits[r, :] (first on ties): greedy sampling on the
  // device. logits [rows, cols] contiguous, out [rows] (device memory).
  void ArgmaxRows(const float* logits, int64_t rows, int64_t cols, int32_t* out);
  // The first error an op hit since the last call (OK if none); clears it.
  absl::Status TakeError();
  cudaStream_t compute_stream() const { return compute_; }
  const std::string& device_name() const { return device_name_; }
  CudaCopyStats copy_stats() const { return {h2d_bytes_.load(), h2d_copies_.load()}; }
  const CudaBackendOptions& options() const { return options_; }

 protected:
  void Free(void* data, uint64_t size, MemoryKind kind) override;

 private:
  explicit CudaBackend(const CudaBackendOptions& options);
  absl::Status Init();
  void Record(cudaError_t error, const char* op);
  void RecordStatus(const absl::Status& status);
  // Returns freed blocks whose ops have finished to the arena (all of them,
  // waiting, when `wait`).
  void ReclaimLocked(bool wait) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mem_mu_);
  // Enqueues a host -> device copy on a copy stream after the compute stream's
  // queued work; returns the event marking its end (from the pool).
  absl::StatusOr<cudaEvent_t> EnqueueH2D(void* device_dst, const void* host_src, uint64_t bytes);
  static constexpr uint64_t kSmallUploadBytes = 256 << 10;
  static bool IsPageable(const void* host);
  // Any m: the decode kernel over row chunks of kSkinnyMaxRows.
  cudaError_t SkinnyInChunks(const MatmulParams& p);

  const CudaBackendOptions options_;
  std::string device_name_;
  cudaStream_t compute_ = nullptr;
  std::vector<cudaStream_t> copy_streams_;
  std::atomic<uint64_t> next_copy_stream_{0};
  std::unique_ptr<cuda::EventPool> events_;

  void* arena_base_ = nullptr;
  mutable std::mutex mem_mu_;
  std::unique_ptr<cuda::ArenaAllocator> arena_ ABSL_GUARDED_BY(mem_mu_);
  std::vector<std::pair<uintptr_t, cudaEvent_t>> pending_frees_ ABSL_GUARDED_BY(mem_mu_);
  std::atomic<uint64_t> pinned_in_use_{0};
  std::atomic<uint64_t> h2d_bytes_{0}, h2d_copies_{0};

  // The GEMM path's buffers (from the arena) and cuBLASLt state.
  DeviceBuffer gemm_workspace_, gemm_scratch_;
  std::unique_ptr<cuda::LtGemm> lt_;

  std::mutex error_mu_;
  absl::Status error_;  // guarded by error_mu_
};

}  // namespace expertd::engine

#endif  // EXPERTD_ENGINE_BACKEND_CUDA_CUDA_BACKEND_H_
