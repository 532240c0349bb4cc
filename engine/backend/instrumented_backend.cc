#include "engine/backend/instrumented_backend.h"

namespace expertd::engine {

InstrumentedBackend::InstrumentedBackend(std::unique_ptr<Backend> target)
    : target_(std::move(target)) {}

int64_t InstrumentedBackend::ops() const {
  int64_t n = 0;
  for (int i = 0; i <= static_cast<int>(BackendCall::kGroupedMatmul); ++i) n += counts_[i].load();
  return n;
}

void InstrumentedBackend::FailNthOp(int64_t n, absl::Status status) {
  absl::MutexLock lock(&mu_);
  op_countdown_ = n;
  op_status_ = std::move(status);
}

void InstrumentedBackend::FailNthAllocation(int64_t n, absl::Status status) {
  absl::MutexLock lock(&mu_);
  alloc_countdown_ = n;
  alloc_status_ = std::move(status);
}

bool InstrumentedBackend::Admit(BackendCall call) {
  counts_[static_cast<int>(call)].fetch_add(1);
  absl::MutexLock lock(&mu_);
  if (op_countdown_ == 0 || --op_countdown_ > 0) return true;
  if (pending_.ok()) pending_ = op_status_;
  return false;
}

absl::Status InstrumentedBackend::TakePending() {
  absl::MutexLock lock(&mu_);
  absl::Status s = pending_;
  pending_ = absl::OkStatus();
  return s;
}

absl::StatusOr<DeviceBuffer> InstrumentedBackend::Allocate(uint64_t bytes, MemoryKind kind) {
  counts_[static_cast<int>(BackendCall::kAllocate)].fetch_add(1);
  {
    absl::MutexLock lock(&mu_);
    if (alloc_countdown_ > 0 && --alloc_countdown_ == 0) return alloc_status_;
  }
  return target_->Allocate(bytes, kind);
}

absl::Status InstrumentedBackend::CopyToDevice(void* device_dst, const void* host_src,
                                               uint64_t bytes) {
  counts_[static_cast<int>(BackendCall::kCopyToDevice)].fetch_add(1);
  return target_->CopyToDevice(device_dst, host_src, bytes);
}

absl::StatusOr<std::unique_ptr<BackendEvent>> InstrumentedBackend::CopyToDeviceAsync(
    void* device_dst, const void* host_src, uint64_t bytes) {
  counts_[static_cast<int>(BackendCall::kCopyToDeviceAsync)].fetch_add(1);
  return target_->CopyToDeviceAsync(device_dst, host_src, bytes);
}

absl::Status InstrumentedBackend::CopyToHost(void* host_dst, const void* device_src,
                                             uint64_t bytes) {
  counts_[static_cast<int>(BackendCall::kCopyToHost)].fetch_add(1);
  absl::Status copied = target_->CopyToHost(host_dst, device_src, bytes);
  absl::Status fault = TakePending();
  return fault.ok() ? copied : fault;
}

absl::Status InstrumentedBackend::Synchronize() {
  counts_[static_cast<int>(BackendCall::kSynchronize)].fetch_add(1);
  absl::Status synced = target_->Synchronize();
  absl::Status fault = TakePending();
  return fault.ok() ? synced : fault;
}

#define EXPERTD_FORWARD_OP(Name, Params)               \
  void InstrumentedBackend::Name(const Params& p) {    \
    if (Admit(BackendCall::k##Name)) target_->Name(p); \
  }

EXPERTD_FORWARD_OP(Embedding, EmbeddingParams)
EXPERTD_FORWARD_OP(RmsNorm, RmsNormParams)
EXPERTD_FORWARD_OP(Matmul, MatmulParams)
EXPERTD_FORWARD_OP(Rope, RopeParams)
EXPERTD_FORWARD_OP(KvAppend, KvAppendParams)
EXPERTD_FORWARD_OP(Attention, AttentionParams)
EXPERTD_FORWARD_OP(SoftmaxTopK, SoftmaxTopKParams)
EXPERTD_FORWARD_OP(SwiGlu, SwiGluParams)
EXPERTD_FORWARD_OP(AddRows, AddRowsParams)
EXPERTD_FORWARD_OP(Clamp, ClampParams)
EXPERTD_FORWARD_OP(GatherRows, GatherRowsParams)
EXPERTD_FORWARD_OP(ScatterRows, ScatterRowsParams)
EXPERTD_FORWARD_OP(MoeCombine, MoeCombineParams)
EXPERTD_FORWARD_OP(MoeScatterAdd, MoeScatterAddParams)
EXPERTD_FORWARD_OP(GroupedMatmul, GroupedMatmulParams)

#undef EXPERTD_FORWARD_OP

}  // namespace expertd::engine
