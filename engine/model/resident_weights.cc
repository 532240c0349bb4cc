#include "engine/model/resident_weights.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"

namespace expertd::engine {

absl::StatusOr<WeightRef> ResidentWeights::Load(const std::string& name, int64_t rows,
                                                int64_t cols) {
  ASSIGN_OR_RETURN(models::TensorView view, source_->Get(name));
  const bool ok_2d = view.shape.size() == 2 && view.shape[0] == rows && view.shape[1] == cols;
  const bool ok_1d = view.shape.size() == 1 && rows == 1 && view.shape[0] == cols;
  if (!ok_2d && !ok_1d) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", name, "' has shape [", absl::StrJoin(view.shape, ","),
                     "], expected [", rows == 1 ? "" : absl::StrCat(rows, ","), cols, "]"));
  }
  WeightRef ref;
  ref.dtype = view.dtype;
  ref.rows = rows;
  ref.cols = cols;
  if (backend_->host_memory_is_device_memory()) {
    ref.data = view.data;
    return ref;
  }
  ASSIGN_OR_RETURN(DeviceBuffer buf, backend_->Allocate(view.nbytes));
  RETURN_IF_ERROR(backend_->CopyToDevice(buf.data(), view.data, view.nbytes));
  ref.data = buf.data();
  device_bytes_ += view.nbytes;
  buffers_.push_back(std::move(buf));
  return ref;
}

absl::StatusOr<WeightRef> ResidentWeights::Upload(DType dtype, int64_t rows, int64_t cols,
                                                  const void* host) {
  WeightRef ref;
  ref.dtype = dtype;
  ref.rows = rows;
  ref.cols = cols;
  ASSIGN_OR_RETURN(DeviceBuffer buf, backend_->Allocate(ref.nbytes()));
  RETURN_IF_ERROR(backend_->CopyToDevice(buf.data(), host, ref.nbytes()));
  ref.data = buf.data();
  device_bytes_ += ref.nbytes();
  buffers_.push_back(std::move(buf));
  return ref;
}

absl::StatusOr<WeightRef> ResidentWeights::LoadOptional(const std::string& name, int64_t rows,
                                                        int64_t cols) {
  if (!source_->Has(name)) return WeightRef{};
  return Load(name, rows, cols);
}

}  // namespace expertd::engine
