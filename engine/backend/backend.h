// Backend: the one interface between the model code and a compute device.
//
// Implementations: CpuBackend (engine/backend/cpu, the reference), and the
// CUDA backend (engine/backend/cuda). Everything above this interface (the forward pass,
// the KV cache, expert offloading) is backend-agnostic.
//
// Memory. Device memory is allocated through the backend as DeviceBuffers
// (RAII, move-only). On the CPU backend "device memory" is host memory; an
// optional byte limit (CpuBackendOptions::device_memory_limit) makes it behave
// like a fixed-size device so the expert cache can be tested under a budget:
// an allocation past the limit is ResourceExhausted, never an abort.
//
// Ops. One virtual method per op, taking the op's params struct
// (engine/backend/op_params.h documents every shape). Ops are enqueued in call
// order on the backend's compute stream; on CPU they run synchronously. Data
// produced by ops is visible to the host only after CopyToHost (which waits
// for preceding ops) or Synchronize().
//
// Thread safety:
// - Ops, Synchronize: called from ONE thread at a time (the engine thread).
// - Allocate, DeviceBuffer destruction, CopyToDevice/CopyToHost and the
//   memory queries are thread-safe: the expert-offload transfer threads call
//   them concurrently with ops running on the engine thread.
#ifndef EXPERTD_ENGINE_BACKEND_BACKEND_H_
#define EXPERTD_ENGINE_BACKEND_BACKEND_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/backend/op_params.h"

namespace expertd::engine {

class Backend;

// Where a buffer lives. kDevice is what ops read and write; kHostPinned is
// host memory the device can copy from asynchronously (on CPU: plain host
// memory, not counted against the device limit).
enum class MemoryKind { kDevice, kHostPinned };

// A block of backend memory. Frees itself (through its backend) when
// destroyed; the backend must outlive it. Move-only. Alignment: 64 bytes.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(DeviceBuffer&& other) noexcept { *this = std::move(other); }
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() { Reset(); }

  void* data() const { return data_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(data_);
  }
  uint64_t size() const { return size_; }
  MemoryKind kind() const { return kind_; }
  bool empty() const { return data_ == nullptr; }
  // Frees the memory now (no-op when empty).
  void Reset();

 private:
  friend class Backend;
  DeviceBuffer(Backend* owner, void* data, uint64_t size, MemoryKind kind)
      : owner_(owner), data_(data), size_(size), kind_(kind) {}

  Backend* owner_ = nullptr;
  void* data_ = nullptr;
  uint64_t size_ = 0;
  MemoryKind kind_ = MemoryKind::kDevice;
};

// A point in a backend's asynchronous work, e.g. the end of an asynchronous
// copy (Backend::CopyToDeviceAsync). Must not outlive its backend.
class BackendEvent {
 public:
  virtual ~BackendEvent() = default;
  // True once the work before the event has completed. Never blocks.
  virtual bool Done() = 0;
  // Blocks the calling thread until Done(); the work's error, if it failed.
  virtual absl::Status Wait() = 0;
};

struct MemoryStats {
  uint64_t device_bytes_in_use = 0;
  uint64_t device_bytes_limit = 0;  // 0 = no limit
  uint64_t device_bytes_peak = 0;
  uint64_t host_pinned_bytes_in_use = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;

  // "cpu", "cuda".
  virtual std::string name() const = 0;
  // Worker threads the backend's ops use (1 on GPU backends: host side).
  virtual int num_threads() const = 0;

  // ---- Memory -------------------------------------------------------------
  // ResourceExhausted when past the device limit (or out of memory).
  // The contents are unspecified.
  virtual absl::StatusOr<DeviceBuffer> Allocate(uint64_t bytes,
                                                MemoryKind kind = MemoryKind::kDevice) = 0;
  virtual MemoryStats memory_stats() const = 0;
  // True when ops can read host memory directly (CPU): then the model may use
  // memory-mapped checkpoint weights in place instead of copying them.
  virtual bool host_memory_is_device_memory() const = 0;
  // True when Matmul accepts weights stored in `format` (weight_format.h).
  // Every backend runs kDense; the expert store refuses a quantized expert
  // format the backend cannot run, naming both.
  virtual bool SupportsWeightFormat(WeightFormat format) const {
    return format == WeightFormat::kDense;
  }
  // Blocking copies. dst/src are device pointers where the name says so.
  virtual absl::Status CopyToDevice(void* device_dst, const void* host_src, uint64_t bytes) = 0;
  virtual absl::Status CopyToHost(void* host_dst, const void* device_src, uint64_t bytes) = 0;
  // Waits for every op enqueued so far.
  virtual absl::Status Synchronize() = 0;

  // Asynchronous host -> device copy (expert paging). It is ordered after
  // every op enqueued so far (a reused destination is never overwritten under
  // a running op) and overlaps the ops enqueued after it (on CUDA: a copy
  // stream of its own). `host_src` should be kHostPinned memory (pageable
  // memory makes a CUDA copy synchronous) and must stay valid and unchanged
  // until the returned event is done. Thread-safe.
  // Default (CPU): a blocking CopyToDevice and an already-completed event.
  virtual absl::StatusOr<std::unique_ptr<BackendEvent>> CopyToDeviceAsync(void* device_dst,
                                                                          const void* host_src,
                                                                          uint64_t bytes);
  // Ops enqueued after this call wait for `event` on the device, without
  // blocking the host (on CUDA: cudaStreamWaitEvent). Engine thread only.
  // Default: event->Wait() on the host.
  virtual absl::Status WaitOnDevice(BackendEvent* event);

  // ---- Ops (see op_params.h) ----------------------------------------------
  // Preconditions in each params struct are programmer errors if violated
  // (checked by assertions in debug builds).
  virtual void Embedding(const EmbeddingParams& p) = 0;
  virtual void RmsNorm(const RmsNormParams& p) = 0;
  virtual void Matmul(const MatmulParams& p) = 0;
  // Default: one Matmul per group with rows (the per-expert path), which is
  // what a backend without a grouped kernel (CUDA) runs.
  virtual void GroupedMatmul(const GroupedMatmulParams& p);
  // True when GroupedMatmul is a kernel of its own (the CPU backend: work
  // items over (group, row tile, column chunk) on one thread pool) rather
  // than the per-group default; the MoE block only groups where it is.
  virtual bool HasGroupedMatmulKernel() const { return false; }
  // True when Matmul takes MatmulParams' row maps (x_rows, y_slots): the CPU
  // backend. Elsewhere they must stay null; callers gather and scatter.
  virtual bool HasMatmulRowMaps() const { return false; }
  // The activations mode this backend's matmuls run (BackendOptions).
  virtual MatmulActivations matmul_activations() const { return MatmulActivations::kF32; }
  // Whether Attention honours AttentionParams::window and ::sinks.
  virtual bool HasWindowedAttention() const { return true; }
  virtual void Rope(const RopeParams& p) = 0;
  virtual void KvAppend(const KvAppendParams& p) = 0;
  virtual void Attention(const AttentionParams& p) = 0;
  virtual void SoftmaxTopK(const SoftmaxTopKParams& p) = 0;
  virtual void SwiGlu(const SwiGluParams& p) = 0;
  virtual void AddRows(const AddRowsParams& p) = 0;
  virtual void Clamp(const ClampParams& p) = 0;
  virtual void GatherRows(const GatherRowsParams& p) = 0;
  virtual void ScatterRows(const ScatterRowsParams& p) = 0;
  virtual void MoeCombine(const MoeCombineParams& p) = 0;
  virtual void MoeScatterAdd(const MoeScatterAddParams& p) = 0;

 protected:
  // Wraps memory this backend allocated into a DeviceBuffer that will call
  // Free(data, size, kind) when destroyed.
  DeviceBuffer MakeBuffer(void* data, uint64_t size, MemoryKind kind) {
    return DeviceBuffer(this, data, size, kind);
  }
  // Called by DeviceBuffer::Reset. Thread-safe.
  virtual void Free(void* data, uint64_t size, MemoryKind kind) = 0;
  friend class DeviceBuffer;
};

struct BackendOptions {
  std::string name = "cpu";          // "cpu" | "cuda" | "auto" (backend_factory.h)
  int threads = 0;                   // CPU worker threads; 0 = hardware concurrency
  uint64_t device_memory_limit = 0;  // bytes; 0 = unlimited (CPU) / all (GPU)
  // What every Matmul / GroupedMatmul does with its activations (op_params.h).
  // kBF16 and kInt8 are the CPU backend's only; kBF16 needs AVX-512-BF16,
  // kInt8 AVX2 (CreateBackend fails with FailedPrecondition otherwise).
  MatmulActivations matmul_activations = MatmulActivations::kF32;
  // CPU: Matmul takes row maps (HasMatmulRowMaps). False makes the MoE paths
  // gather and scatter their rows as they do on a GPU (tests, A/B benches).
  bool matmul_row_maps = true;
};

// "fp32" / "bf16" / "int8", the --matmul_activations flag's values.
const char* MatmulActivationsName(MatmulActivations activations);
// False (and *out untouched) for any other text.
bool ParseMatmulActivations(const std::string& text, MatmulActivations* out);
// The flag's help line, shared by every binary that registers it.
inline constexpr char kMatmulActivationsHelp[] =
    "fp32 | bf16 | int8: bf16 rounds the activations of matmuls with bf16, int8, int4, mxfp4 or "
    "fp8 weights to bf16 and runs the CPU's bf16 dot-product instructions (about 2x faster "
    "prefill); int8 quantizes the activations of int8 / int4 / mxfp4 experts to int8 per 32 "
    "values for the CPU's integer dot products (VNNI, or AVX2's), the rest as bf16 where the CPU "
    "has it, else fp32. CPU backend only: bf16 needs AVX-512-BF16, int8 AVX2";

// CreateBackend(options): engine/backend/backend_factory.h.

}  // namespace expertd::engine

#endif  // EXPERTD_ENGINE_BACKEND_BACKEND_H_
