#include "engine/backend/cuda/cuda_backend.h"

#include <algorithm>
#include <cassert>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "engine/backend/cuda/cublaslt_gemm.h"

namespace expertd::engine {
namespace cuda {
namespace {

absl::Status CudaStatus(cudaError_t e, absl::string_view what) {
  if (e == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(
      absl::StrCat("CUDA ", what, ": ", cudaGetErrorName(e), " (", cudaGetErrorString(e), ")"));
}

}  // namespace

// Reusable CUDA events (no timing): creating one per copy is avoidable work
// on the paging path. Thread-safe.
class EventPool {
 public:
  ~EventPool() {
    for (cudaEvent_t e : free_) cudaEventDestroy(e);
  }
  absl::StatusOr<cudaEvent_t> Get() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!free_.empty()) {
        cudaEvent_t e = free_.back();
        free_.pop_back();
        return e;
      }
    }
    cudaEvent_t e = nullptr;
    RETURN_IF_ERROR(
        CudaStatus(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "event create"));
    return e;
  }
  void Put(cudaEvent_t e) {
    std::lock_guard<std::mutex> lock(mu_);
    free_.push_back(e);
  }

 private:
  std::mutex mu_;
  std::vector<cudaEvent_t> free_;
};

namespace {

// The end of an asynchronous copy; returns its CUDA event to the pool.
class CudaEvent final : public BackendEvent {
 public:
  CudaEvent(EventPool* pool, cudaEvent_t event) : pool_(pool), event_(event) {}
  ~CudaEvent() override { pool_->Put(event_); }
  bool Done() override { return cudaEventQuery(event_) != cudaErrorNotReady; }
  absl::Status Wait() override {
    return CudaStatus(cudaEventSynchronize(event_), "event synchronize");
  }
  cudaEvent_t event() const { return event_; }

 private:
  EventPool* pool_;
  cudaEvent_t event_;
};

}  // namespace
}  // namespace cuda

namespace {
using cuda::CudaStatus;
}  // namespace

absl::Status CudaDeviceAvailable(int device) {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    cudaGetLastError();  // do not leave the error behind
    return absl::UnavailableError(absl::StrCat("no usable CUDA device: ", cudaGetErrorName(e), " (",
                                               cudaGetErrorString(e), ")"));
  }
  if (device < 0 || device >= count) {
    return absl::UnavailableError(
        absl::StrCat("CUDA device ", device, " does not exist (", count, " found)"));
  }
  return absl::OkStatus();
}

CudaBackend::CudaBackend(const CudaBackendOptions& options)
    : options_(options), events_(std::make_unique<cuda::EventPool>()) {}

absl::StatusOr<std::unique_ptr<CudaBackend>> CudaBackend::Create(
    const CudaBackendOptions& options) {
  RETURN_IF_ERROR(CudaDeviceAvailable(options.device));
  if (options.skinny_max_rows < 0 || options.skinny_max_rows > cuda::kSkinnyMaxRows) {
    return absl::InvalidArgumentError(absl::StrCat("skinny_max_rows must be in [0, ",
                                                   cuda::kSkinnyMaxRows, "], got ",
                                                   options.skinny_max_rows));
  }
  std::unique_ptr<CudaBackend> backend(new CudaBackend(options));
  RETURN_IF_ERROR(backend->Init());
  return backend;
}

absl::Status CudaBackend::Init() {
  RETURN_IF_ERROR(CudaStatus(cudaSetDevice(options_.device), "set device"));
  cudaDeviceProp prop{};
  RETURN_IF_ERROR(CudaStatus(cudaGetDeviceProperties(&prop, options_.device), "device properties"));
  device_name_ = prop.name;
  size_t free_bytes = 0, total_bytes = 0;
  RETURN_IF_ERROR(CudaStatus(cudaMemGetInfo(&free_bytes, &total_bytes), "memory info"));
  uint64_t arena_bytes = options_.device_memory_limit;
  if (arena_bytes == 0)
    arena_bytes = free_bytes > options_.reserve_bytes ? free_bytes - options_.reserve_bytes : 0;
  if (arena_bytes == 0 || arena_bytes > free_bytes) {
    return absl::ResourceExhaustedError(
        absl::StrCat("cuda device ", options_.device, " (", device_name_, "): arena of ",
                     arena_bytes, " bytes requested, ", free_bytes, " free of ", total_bytes));
  }
  const cudaError_t e = cudaMalloc(&arena_base_, arena_bytes);
  if (e != cudaSuccess) {
    cudaGetLastError();
    arena_base_ = nullptr;
    return absl::ResourceExhaustedError(absl::StrCat(
        "cudaMalloc of the ", arena_bytes, "-byte arena failed: ", cudaGetErrorString(e)));
  }
  {
    std::lock_guard<std::mutex> lock(mem_mu_);
    arena_ = std::make_unique<cuda::ArenaAllocator>(reinterpret_cast<uintptr_t>(arena_base_),
                                                    arena_bytes, 256);
  }
  RETURN_IF_ERROR(
      CudaStatus(cudaStreamCreateWithFlags(&compute_, cudaStreamNonBlocking), "compute stream"));
  for (int i = 0; i < std::max(1, options_.copy_streams); ++i) {
    cudaStream_t s = nullptr;
    RETURN_IF_ERROR(
        CudaStatus(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "copy stream"));
    copy_streams_.push_back(s);
  }
  ASSIGN_OR_RETURN(gemm_workspace_, Allocate(options_.gemm_workspace_bytes, MemoryKind::kDevice));
  ASSIGN_OR_RETURN(gemm_scratch_, Allocate(options_.gemm_scratch_bytes, MemoryKind::kDevice));
  ASSIGN_OR_RETURN(lt_, cuda::LtGemm::Create({gemm_workspace_.data(), gemm_workspace_.size(),
                                              gemm_scratch_.data(), gemm_scratch_.size()},
                                             options_.split_activations));
  return absl::OkStatus();
}

CudaBackend::~CudaBackend() {
  cudaSetDevice(options_.device);
  if (compute_ != nullptr) cudaStreamSynchronize(compute_);
  for (cudaStream_t s : copy_streams_) cudaStreamSynchronize(s);
  lt_.reset();
  gemm_workspace_.Reset();
  gemm_scratch_.Reset();
  {
    std::lock_guard<std::mutex> lock(mem_mu_);
    ReclaimLocked(/*wait=*/true);
  }
  for (cudaStream_t s : copy_streams_) cudaStreamDestroy(s);
  if (compute_ != nullptr) cudaStreamDestroy(compute_);
  events_.reset();
  if (arena_base_ != nullptr) cudaFree(arena_base_);
}

// ---- Errors ------------------------------------------------------------------

void CudaBackend::Record(cudaError_t error, const char* op) {
  if (error == cudaSuccess) return;
  RecordStatus(CudaStatus(error, op));
}

void CudaBackend::RecordStatus(const absl::Status& status) {
  if (status.ok()) return;
  std::lock_guard<std::mutex> lock(error_mu_);
  if (error_.ok()) error_ = status;
}

absl::Status CudaBackend::TakeError() {
  std::lock_guard<std::mutex> lock(error_mu_);
  return std::exchange(error_, absl::OkStatus());
}

// ---- Memory --------------------------------------------------------------------

void CudaBackend::ReclaimLocked(bool wait) {
  auto still_running = [&](const std::pair<uintptr_t, cudaEvent_t>& f) {
    const cudaError_t e = wait ? cudaEventSynchronize(f.second) : cudaEventQuery(f.second);
    if (e == cudaErrorNotReady) return true;
    arena_->Free(f.first);
    events_->Put(f.second);
    return false;
  };
  pending_frees_.erase(std::remove_if(pending_frees_.begin(), pending_frees_.end(), still_running),
                       pending_frees_.end());
}

absl::StatusOr<DeviceBuffer> CudaBackend::Allocate(uint64_t bytes, MemoryKind kind) {
  if (kind == MemoryKind::kHostPinned) {
    cudaSetDevice(options_.device);
    void* p = nullptr;
    const cudaError_t e = cudaHostAlloc(&p, std::max<uint64_t>(bytes, 1), cudaHostAllocPortable);
    if (e != cudaSuccess) {
      cudaGetLastError();
      return absl::ResourceExhaustedError(absl::StrCat(
          "cudaHostAlloc of ", bytes, " pinned bytes failed: ", cudaGetErrorString(e)));
    }
    pinned_in_use_ += bytes;
    return MakeBuffer(p, bytes, kind);
  }
  std::lock_guard<std::mutex> lock(mem_mu_);
  ReclaimLocked(/*wait=*/false);
  std::optional<uintptr_t> a = arena_->Allocate(bytes);
  if (!a.has_value() && !pending_frees_.empty()) {
    ReclaimLocked(/*wait=*/true);
    a = arena_->Allocate(bytes);
  }
  if (!a.has_value()) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "cuda device memory: cannot allocate ", bytes, " bytes: ", arena_->bytes_in_use(), " of ",
        arena_->capacity(), " in use, largest free block ", arena_->largest_free_block()));
  }
  return MakeBuffer(reinterpret_cast<void*>(*a), bytes, kind);
}

void CudaBackend::Free(void* data, uint64_t size, MemoryKind kind) {
  if (kind == MemoryKind::kHostPinned) {
    cudaFreeHost(data);
    pinned_in_use_ -= size;
    return;
  }
  // Ops enqueued so far may still read the block: it returns to the arena
  // once they are done.
  absl::StatusOr<cudaEvent_t> event = events_->Get();
  std::lock_guard<std::mutex> lock(mem_mu_);
  if (event.ok() && cudaEventRecord(*event, compute_) == cudaSuccess) {
    pending_frees_.emplace_back(reinterpret_cast<uintptr_t>(data), *event);
    return;
  }
  if (event.ok()) events_->Put(*event);
  cudaStreamSynchronize(compute_);
  arena_->Free(reinterpret_cast<uintptr_t>(data));
}

MemoryStats CudaBackend::memory_stats() const {
  MemoryStats s;
  std::lock_guard<std::mutex> lock(mem_mu_);
  s.device_bytes_in_use = arena_->bytes_in_use();
  s.device_bytes_limit = arena_->capacity();
  s.device_bytes_peak = arena_->peak_bytes_in_use();
  s.host_pinned_bytes_in_use = pinned_in_use_.load();
  return s;
}

// ---- Copies --------------------------------------------------------------------

absl::StatusOr<cudaEvent_t> CudaBackend::EnqueueH2D(void* device_dst, const void* host_src,
                                                    uint64_t bytes) {
  RETURN_IF_ERROR(CudaStatus(cudaSetDevice(options_.device), "set device"));
  cudaStream_t stream = copy_streams_[next_copy_stream_++ % copy_streams_.size()];
  ASSIGN_OR_RETURN(cudaEvent_t fence, events_->Get());
  absl::Status s = CudaStatus(cudaEventRecord(fence, compute_), "record fence");
  if (s.ok()) s = CudaStatus(cudaStreamWaitEvent(stream, fence, 0), "wait fence");
  events_->Put(fence);  // re-recording a waited-on event later is safe
  RETURN_IF_ERROR(s);
  RETURN_IF_ERROR(CudaStatus(
      cudaMemcpyAsync(device_dst, host_src, bytes, cudaMemcpyHostToDevice, stream), "copy H2D"));
  ASSIGN_OR_RETURN(cudaEvent_t done, events_->Get());
  s = CudaStatus(cudaEventRecord(done, stream), "record copy");
  if (!s.ok()) {
    events_->Put(done);
    return s;
  }
  h2d_bytes_ += bytes;
  ++h2d_copies_;
  return done;
}

bool CudaBackend::IsPageable(const void* host) {
  cudaPointerAttributes a{};
  if (cudaPointerGetAttributes(&a, host) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return a.type == cudaMemoryTypeUnregistered;
}

absl::Status CudaBackend::CopyToDevice(void* device_dst, const void* host_src, uint64_t bytes) {
  if (bytes == 0) return absl::OkStatus();
  if (bytes <= kSmallUploadBytes && IsPageable(host_src)) {
    // The step's small uploads (token layout, dispatch indices): in order on
    // the compute stream, no host wait. The driver stages pageable memory
    // before returning, so the caller may reuse host_src at once.
    RETURN_IF_ERROR(CudaStatus(cudaSetDevice(options_.device), "set device"));
    return CudaStatus(
        cudaMemcpyAsync(device_dst, host_src, bytes, cudaMemcpyHostToDevice, compute_), "upload");
  }
  ASSIGN_OR_RETURN(cudaEvent_t done, EnqueueH2D(device_dst, host_src, bytes));
  absl::Status s = CudaStatus(cudaEventSynchronize(done), "copy H2D");
  events_->Put(done);
  return s;
}

absl::StatusOr<std::unique_ptr<BackendEvent>> CudaBackend::CopyToDeviceAsync(void* device_dst,
                                                                             const void* host_src,
                                                                             uint64_t bytes) {
  if (bytes == 0)
    return Backend::CopyToDeviceAsync(device_dst, host_src, bytes);  // completed event
  ASSIGN_OR_RETURN(cudaEvent_t done, EnqueueH2D(device_dst, host_src, bytes));
  return std::unique_ptr<BackendEvent>(new cuda::CudaEvent(events_.get(), done));
}

absl::Status CudaBackend::WaitOnDevice(BackendEvent* event) {
  auto* e = dynamic_cast<cuda::CudaEvent*>(event);
  if (e == nullptr) return event->Wait();  // another backend's (or a completed) event
  return CudaStatus(cudaStreamWaitEvent(compute_, e->event(), 0), "wait on copy");
}

absl::Status CudaBackend::CopyToHost(void* host_dst, const void* device_src, uint64_t bytes) {
  if (bytes > 0) {
    RETURN_IF_ERROR(CudaStatus(cudaSetDevice(options_.device), "set device"));
    RETURN_IF_ERROR(
        CudaStatus(cudaMemcpyAsync(host_dst, device_src, bytes, cudaMemcpyDeviceToHost, compute_),
                   "copy D2H"));
    ASSIGN_OR_RETURN(cudaEvent_t done, events_->Get());
    absl::Status s = CudaStatus(cudaEventRecord(done, compute_), "record D2H");
    if (s.ok()) s = CudaStatus(cudaEventSynchronize(done), "copy D2H");
    events_->Put(done);
    RETURN_IF_ERROR(s);
  }
  return TakeError();
}

absl::Status CudaBackend::Synchronize() {
  RETURN_IF_ERROR(CudaStatus(cudaStreamSynchronize(compute_), "synchronize"));
  return TakeError();
}

// ---- Ops -----------------------------------------------------------------------

void CudaBackend::Embedding(const EmbeddingParams& p) {
  Record(cuda::LaunchEmbedding(p, compute_), "Embedding");
}
void CudaBackend::RmsNorm(const RmsNormParams& p) {
  Record(cuda::LaunchRmsNorm(p, compute_), "RmsNorm");
}
void CudaBackend::Rope(const RopeParams& p) { Record(cuda::LaunchRope(p, compute_), "Rope"); }
void CudaBackend::KvAppend(const KvAppendParams& p) {
  Record(cuda::LaunchKvAppend(p, compute_), "KvAppend");
}
void CudaBackend::SwiGlu(const SwiGluParams& p) {
  Record(cuda::LaunchSwiGlu(p, compute_), "SwiGlu");
}
void CudaBackend::AddRows(const AddRowsParams& p) {
  Record(cuda::LaunchAddRows(p, compute_), "AddRows");
}
void CudaBackend::Clamp(const ClampParams& p) { Record(cuda::LaunchClamp(p, compute_), "Clamp"); }
void CudaBackend::GatherRows(const GatherRowsParams& p) {
  Record(cuda::LaunchGatherRows(p, compute_), "GatherRows");
}
void CudaBackend::ScatterRows(const ScatterRowsParams& p) {
  Record(cuda::LaunchScatterRows(p, compute_), "ScatterRows");
}
void CudaBackend::MoeCombine(const MoeCombineParams& p) {
  Record(cuda::LaunchMoeCombine(p, compute_), "MoeCombine");
}
void CudaBackend::MoeScatterAdd(const MoeScatterAddParams& p) {
  Record(cuda::LaunchMoeScatterAdd(p, compute_), "MoeScatterAdd");
}
void CudaBackend::SoftmaxTopK(const SoftmaxTopKParams& p) {
  Record(cuda::LaunchSoftmaxTopK(p, compute_), "SoftmaxTopK");
}
void CudaBackend::Attention(const AttentionParams& p) {
  if ((p.window > 0 || !p.sinks.empty()) && p.head_dim > 256) {
    // Only the wide kernel (DeepSeek's absorbed MLA) takes head_dim > 256,
    // and no model with such heads has a window or sinks.
    RecordStatus(absl::UnimplementedError(
        "the CUDA backend has no sliding-window attention or attention sinks for head_dim > 256; "
        "serve this model with --backend=cpu"));
    return;
  }
  Record(cuda::LaunchAttention(p, options_.attention, compute_), "Attention");
}
void CudaBackend::ArgmaxRows(const float* logits, int64_t rows, int64_t cols, int32_t* out) {
  Record(cuda::LaunchArgmaxRows(logits, rows, cols, out, compute_), "ArgmaxRows");
}

cudaError_t CudaBackend::SkinnyInChunks(const MatmulParams& p) {
  for (int64_t r0 = 0; r0 < p.m; r0 += cuda::kSkinnyMaxRows) {
    MatmulParams chunk = p;
    chunk.x = p.x + r0 * p.x_stride;
    chunk.y = p.y + r0 * p.y_stride;
    chunk.m = std::min(cuda::kSkinnyMaxRows, p.m - r0);
    const cudaError_t e = cuda::LaunchSkinnyGemm(chunk, compute_);
    if (e != cudaSuccess) return e;
  }
  return cudaSuccess;
}

void CudaBackend::Matmul(const MatmulParams& p) {
  assert(p.x_rows == nullptr && p.y_rows == nullptr);  // HasMatmulRowMaps() is false
  if (p.w.quant.format == WeightFormat::kFp8E4m3Block) {  // fp8_gemm.cu, via the skinny path
    Record(SkinnyInChunks(p), "Matmul (FP8 block-scaled weights)");
    return;
  }
  if (p.w.quant.quantized()) {
    Record(cuda::LaunchQuantMatmul(p, compute_), "Matmul (quantized weights)");
    return;
  }
  if (p.m <= options_.skinny_max_rows || options_.row_invariant_gemm) {
    Record(SkinnyInChunks(p), "Matmul (decode kernel)");
    return;
  }
  absl::Status s = lt_->Run(p, compute_);
  if (absl::IsUnimplemented(s)) {
    Record(SkinnyInChunks(p), "Matmul (decode kernel, cuBLASLt fallback)");
    return;
  }
  RecordStatus(s);
}

}  // namespace expertd::engine
