#include "engine/model/resident_weights.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "models/checkpoint/tensor_names.h"

namespace expertd::engine {

std::string Fp8ScaleName(const std::string& weight_name) { return weight_name + "_scale_inv"; }

absl::Status ResidentWeights::AttachFp8Scales(const std::string& name, WeightRef* ref) {
  const models::Fp8BlockQuantization& q = source_->config().fp8;
  if (!q.enabled) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor '", name, "' is FP8 E4M3 but config.json has no fp8 quantization_config"));
  }
  if (q.block_cols % 16 != 0) {
    return absl::InvalidArgumentError(absl::StrCat("FP8 weight_block_size [", q.block_rows, ", ",
                                                   q.block_cols,
                                                   "]: the column block must be a multiple of 16"));
  }
  const std::string scale_name = Fp8ScaleName(name);
  ASSIGN_OR_RETURN(models::TensorView sv, source_->Get(scale_name));
  const models::Fp8BlockShape shape{ref->rows, ref->cols, q.block_rows, q.block_cols};
  if (sv.shape != std::vector<int64_t>{shape.scale_rows(), shape.scale_cols()} ||
      sv.dtype == models::DType::kF8E4M3) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor '", scale_name, "' is ", models::DTypeName(sv.dtype), " [",
        absl::StrJoin(sv.shape, ","), "], expected a float [", shape.scale_rows(), ",",
        shape.scale_cols(), "] (one scale per ", q.block_rows, "x", q.block_cols, " block)"));
  }
  const int64_t count = shape.scale_rows() * shape.scale_cols();
  const float* scale = nullptr;
  if (sv.dtype == models::DType::kF32 && backend_->host_memory_is_device_memory()) {
    scale = static_cast<const float*>(sv.data);
  } else {
    std::vector<float> f32(count);
    models::ConvertToF32(sv.dtype, sv.data, f32.data(), count);
    ASSIGN_OR_RETURN(WeightRef up, Upload(models::DType::kF32, 1, count, f32.data()));
    scale = static_cast<const float*>(up.data);
  }
  ref->quant = Fp8BlockQuant(scale, q.block_rows, q.block_cols);
  return absl::OkStatus();
}

absl::StatusOr<WeightRef> ResidentWeights::LoadMxfp4(const models::TensorView& codes, int64_t rows,
                                                     int64_t cols) {
  const std::string scales_name = models::Mxfp4ScalesName(codes.name);
  ASSIGN_OR_RETURN(models::TensorView scales, source_->Get(scales_name));
  if (cols % 32 != 0 || codes.shape != std::vector<int64_t>{rows, cols / 2} ||
      scales.dtype != models::DType::kU8 || scales.shape != std::vector<int64_t>{rows, cols / 32}) {
    return absl::InvalidArgumentError(absl::StrCat(
        "MXFP4 tensor '", codes.name, "' has codes [", absl::StrJoin(codes.shape, ","),
        "] and scales ", models::DTypeName(scales.dtype), " [", absl::StrJoin(scales.shape, ","),
        "], expected [", rows, ",", cols / 2, "] and uint8 [", rows, ",", cols / 32, "] for a [",
        rows, ",", cols, "] matrix"));
  }
  WeightRef ref;
  ref.dtype = models::DType::kBF16;  // every MXFP4 value is a bf16; the kernels read `quant`
  ref.rows = rows;
  ref.cols = cols;
  ref.quant.format = WeightFormat::kMxfp4;
  ref.quant.scale_dtype = ScaleDType::kE8M0;
  ref.quant.group_size = 32;
  if (backend_->host_memory_is_device_memory()) {
    ref.data = codes.data;
    ref.quant.scales = scales.data;
    return ref;
  }
  ASSIGN_OR_RETURN(WeightRef up_codes, Upload(models::DType::kU8, rows, cols / 2, codes.data));
  ASSIGN_OR_RETURN(WeightRef up_scales, Upload(models::DType::kU8, rows, cols / 32, scales.data));
  ref.data = up_codes.data;
  ref.quant.scales = up_scales.data;
  return ref;
}

absl::StatusOr<WeightRef> ResidentWeights::Load(const std::string& name, int64_t rows,
                                                int64_t cols) {
  ASSIGN_OR_RETURN(models::TensorView view, source_->Get(name));
  if (view.dtype == models::DType::kU8) return LoadMxfp4(view, rows, cols);
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
  if (view.dtype == models::DType::kF8E4M3) {
    if (!ok_2d) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor '", name, "' is 1-D FP8: only matrices may be block-quantized"));
    }
    RETURN_IF_ERROR(AttachFp8Scales(name, &ref));
  }
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
