// ResidentWeights: puts named tensors from a WeightSource into device memory and
// keeps them there. On a backend whose host memory is device memory (CPU) the
// source's memory (e.g. the checkpoint's mmap) is used in place, zero-copy;
// otherwise each tensor is copied into its own DeviceBuffer.
//
// Thread safety: Load is not thread-safe; the returned WeightRefs are
// immutable and may be read from any thread while the store lives.
#ifndef EXPERTD_ENGINE_MODEL_RESIDENT_WEIGHTS_H_
#define EXPERTD_ENGINE_MODEL_RESIDENT_WEIGHTS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/backend/backend.h"
#include "engine/model/weight_source.h"
#include "models/dtype/fp8_block.h"

namespace expertd::engine {

// "<weight>_scale_inv": the block scales of an FP8 weight (DeepSeek's naming).
std::string Fp8ScaleName(const std::string& weight_name);

class ResidentWeights {
 public:
  // Both must outlive the store.
  ResidentWeights(Backend* backend, const WeightSource* source)
      : backend_(backend), source_(source) {}

  // Loads `name`, checking its shape: a 2-D [rows, cols] or 1-D [cols] (then
  // rows must be 1). NotFound / InvalidArgument naming the tensor.
  // An FP8 E4M3 matrix stays FP8 with its block scales attached
  // (WeightRef::quant kFp8E4m3Block, from `<name>_scale_inv`, converted to fp32 when stored
  // as bf16); only Matmul reads such a weight. An MXFP4 matrix (uint8 codes
  // [rows, cols / 2] and `<name>_scales`, models/checkpoint/gpt_oss_experts.h)
  // stays MXFP4 (WeightRef::quant kMxfp4), in place on a host-memory backend.
  absl::StatusOr<WeightRef> Load(const std::string& name, int64_t rows, int64_t cols);
  // Like Load but returns an empty WeightRef when the tensor is absent.
  absl::StatusOr<WeightRef> LoadOptional(const std::string& name, int64_t rows, int64_t cols);

  // Copies a tensor made on the host (e.g. a transposed weight) into device
  // memory the store owns: `host` holds rows * cols elements of `dtype`.
  absl::StatusOr<WeightRef> Upload(DType dtype, int64_t rows, int64_t cols, const void* host);

  const WeightSource& source() const { return *source_; }
  Backend* backend() const { return backend_; }
  uint64_t device_bytes() const { return device_bytes_; }  // copied onto the device

 private:
  absl::Status AttachFp8Scales(const std::string& name, WeightRef* ref);
  absl::StatusOr<WeightRef> LoadMxfp4(const models::TensorView& codes, int64_t rows, int64_t cols);

  Backend* backend_;
  const WeightSource* source_;
  std::vector<DeviceBuffer> buffers_;
  uint64_t device_bytes_ = 0;
};

}  // namespace expertd::engine

#endif  // EXPERTD_ENGINE_MODEL_RESIDENT_WEIGHTS_H_
