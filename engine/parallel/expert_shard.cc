#include "engine/parallel/expert_shard.h"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <string>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "engine/backend/weight_quantize.h"
#include "engine/model/resident_weights.h"
#include "models/dtype/fp8_block.h"

namespace expertd::engine::parallel {
namespace {

// A [r1 - r0, c1 - c0] block of a row-major [rows, cols] tensor.
struct Cut {
  int64_t r0, r1, c0, c1;
  int64_t rows() const { return r1 - r0; }
  int64_t cols() const { return c1 - c0; }
};

absl::StatusOr<void*> Upload(Backend* be, const void* host, uint64_t bytes, HeldExpert* held) {
  ASSIGN_OR_RETURN(DeviceBuffer buf, be->Allocate(std::max<uint64_t>(bytes, 64)));
  RETURN_IF_ERROR(be->CopyToDevice(buf.data(), host, bytes));
  void* data = buf.data();
  held->buffers.push_back(std::move(buf));
  held->bytes += bytes;
  return data;
}

// Copies the cut's bytes (esize bytes per element) into a dense host block.
std::vector<char> CopyCut(const void* src, int64_t cols, size_t esize, const Cut& cut) {
  std::vector<char> out(cut.rows() * cut.cols() * esize);
  for (int64_t r = cut.r0; r < cut.r1; ++r) {
    std::memcpy(out.data() + (r - cut.r0) * cut.cols() * esize,
                static_cast<const char*>(src) + (r * cols + cut.c0) * esize, cut.cols() * esize);
  }
  return out;
}

// The FP8 scale grid of weight `name` [rows, cols] as fp32.
absl::StatusOr<std::vector<float>> Fp8Scales(const WeightSource& src, const std::string& name,
                                             const models::Fp8BlockShape& shape) {
  const std::string scale_name = Fp8ScaleName(name);
  ASSIGN_OR_RETURN(models::TensorView sv, src.Get(scale_name));
  if (sv.shape != std::vector<int64_t>{shape.scale_rows(), shape.scale_cols()} ||
      sv.dtype == models::DType::kF8E4M3) {
    return absl::InvalidArgumentError(absl::StrCat("tensor '", scale_name, "': expected a float [",
                                                   shape.scale_rows(), ", ", shape.scale_cols(),
                                                   "] block-scale grid"));
  }
  std::vector<float> f32(shape.scale_rows() * shape.scale_cols());
  models::ConvertToF32(sv.dtype, sv.data, f32.data(), f32.size());
  return f32;
}

absl::StatusOr<models::Fp8BlockShape> Fp8Shape(const models::ModelConfig& config,
                                               const std::string& name, int64_t rows,
                                               int64_t cols) {
  if (!config.fp8.enabled) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor '", name, "' is FP8 E4M3 but config.json has no fp8 quantization_config"));
  }
  return models::Fp8BlockShape{rows, cols, config.fp8.block_rows, config.fp8.block_cols};
}

// An FP8 cut: the codes and the scale blocks it covers (cut.c0 is on a
// column-block boundary; a row cut may start inside a block: row0).
absl::Status LoadFp8Cut(Backend* be, const WeightSource& src, const models::ModelConfig& config,
                        const std::string& name, const models::TensorView& t, const Cut& cut,
                        HeldExpert* held, WeightRef* ref) {
  const int64_t rows = t.shape[0], cols = t.shape[1];
  ASSIGN_OR_RETURN(models::Fp8BlockShape shape, Fp8Shape(config, name, rows, cols));
  if (cut.c0 % shape.block_cols != 0) {
    return absl::InternalError(absl::StrCat(name, ": column cut ", cut.c0,
                                            " is not on an FP8 block boundary"));
  }
  ASSIGN_OR_RETURN(std::vector<float> grid, Fp8Scales(src, name, shape));
  const int64_t sr0 = cut.r0 / shape.block_rows, sr1 = (cut.r1 - 1) / shape.block_rows + 1;
  const int64_t sc0 = cut.c0 / shape.block_cols,
                sc1 = (cut.c1 + shape.block_cols - 1) / shape.block_cols;
  std::vector<float> scales;
  for (int64_t r = sr0; r < sr1; ++r) {
    for (int64_t c = sc0; c < sc1; ++c) scales.push_back(grid[r * shape.scale_cols() + c]);
  }
  const std::vector<char> codes = CopyCut(t.data, cols, 1, cut);
  ASSIGN_OR_RETURN(void* values, Upload(be, codes.data(), codes.size(), held));
  ASSIGN_OR_RETURN(void* sdev, Upload(be, scales.data(), scales.size() * 4, held));
  *ref = WeightRef{values, models::DType::kF8E4M3, cut.rows(), cut.cols()};
  ref->quant = Fp8BlockQuant(static_cast<const float*>(sdev), shape.block_rows,
                             shape.block_cols, cut.r0 % shape.block_rows);
  return absl::OkStatus();
}

// The cut as fp32 (FP8 weights dequantized in DeepSeek's order).
absl::StatusOr<std::vector<float>> CutToF32(const WeightSource& src,
                                            const models::ModelConfig& config,
                                            const std::string& name, const models::TensorView& t,
                                            const Cut& cut) {
  const int64_t rows = t.shape[0], cols = t.shape[1];
  std::vector<float> out(cut.rows() * cut.cols());
  if (t.dtype == models::DType::kF8E4M3) {
    ASSIGN_OR_RETURN(models::Fp8BlockShape shape, Fp8Shape(config, name, rows, cols));
    ASSIGN_OR_RETURN(std::vector<float> grid, Fp8Scales(src, name, shape));
    std::vector<float> whole(rows * cols);
    models::DequantizeFp8Block(shape, static_cast<const uint8_t*>(t.data), grid.data(),
                               whole.data());
    const std::vector<char> bytes = CopyCut(whole.data(), cols, 4, cut);
    std::memcpy(out.data(), bytes.data(), bytes.size());
    return out;
  }
  const size_t esize = models::DTypeSize(t.dtype);
  const std::vector<char> raw = CopyCut(t.data, cols, esize, cut);
  models::ConvertToF32(t.dtype, raw.data(), out.data(), out.size());
  return out;
}

absl::Status LoadCut(Backend* be, const WeightSource& src, const models::ModelConfig& config,
                     const std::string& name, int64_t rows, int64_t cols, const Cut& cut,
                     const ExpertShardStorage& storage, HeldExpert* held, WeightRef* ref) {
  ASSIGN_OR_RETURN(models::TensorView t, src.Get(name));
  if (t.shape.size() != 2 || t.shape[0] != rows || t.shape[1] != cols) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": expected shape [", rows, ", ", cols, "]"));
  }
  if (storage.quantized()) {
    ASSIGN_OR_RETURN(std::vector<float> f32, CutToF32(src, config, name, t, cut));
    WeightQuant q = storage;
    std::vector<uint8_t> values(QuantValueBytes(q.format, cut.rows(), cut.cols()));
    std::vector<char> scales(QuantScaleBytes(q, cut.rows(), cut.cols()));
    RETURN_IF_ERROR(QuantizeWeights(f32.data(), cut.rows(), cut.cols(), q, values.data(),
                                    scales.data()));
    ASSIGN_OR_RETURN(void* vdev, Upload(be, values.data(), values.size(), held));
    ASSIGN_OR_RETURN(q.scales, Upload(be, scales.data(), scales.size(), held));
    *ref = WeightRef{vdev, t.dtype == models::DType::kF8E4M3 ? models::DType::kF32 : t.dtype,
                     cut.rows(), cut.cols()};
    ref->quant = q;
    return absl::OkStatus();
  }
  if (t.dtype == models::DType::kF8E4M3) {
    return LoadFp8Cut(be, src, config, name, t, cut, held, ref);
  }
  const std::vector<char> raw = CopyCut(t.data, cols, models::DTypeSize(t.dtype), cut);
  ASSIGN_OR_RETURN(void* data, Upload(be, raw.data(), raw.size(), held));
  *ref = WeightRef{data, t.dtype, cut.rows(), cut.cols()};
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<int64_t> ExpertShardUnit(const models::ModelConfig& config,
                                        const ExpertShardStorage& storage) {
  const int64_t h = config.hidden_size, inter = config.moe_intermediate_size;
  if (!storage.quantized()) return config.fp8.enabled ? config.fp8.block_cols : 1;
  if (storage.format == WeightFormat::kFp8E4m3Block) {
    return absl::InvalidArgumentError(
        "--expert_dtype=fp8 is not supported on several devices yet (an FP8 checkpoint's "
        "experts are sharded as loaded)");
  }
  const int64_t g = storage.group_size, br = std::max<int64_t>(1, storage.block_rows);
  if (g <= 0 || h % g != 0 || inter % g != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        WeightFormatName(storage.format), " experts: group size ", g,
        " must divide hidden_size ", h, " and moe_intermediate_size ", inter));
  }
  return std::lcm(g, br);
}

ShardRange ExpertColumns(int64_t intermediate, int64_t unit, int devices, int rank) {
  const int64_t units = (intermediate + unit - 1) / unit;
  const ShardRange u = EvenShard(units, devices, rank);
  return ShardRange{std::min(u.begin * unit, intermediate), std::min(u.end * unit, intermediate)};
}

absl::Status LoadExpertShard(Backend* backend, const WeightSource& source,
                             const models::ModelConfig& config, int layer, int expert,
                             ShardRange cols, const ExpertShardStorage& storage,
                             HeldExpert* held) {
  if (cols.size() == 0) return absl::OkStatus();
  const int64_t h = config.hidden_size, inter = config.moe_intermediate_size;
  const ExpertTensorNames names = ExpertTensorNamesFor(config, layer, expert);
  const Cut rows_cut{cols.begin, cols.end, 0, h}, cols_cut{0, h, cols.begin, cols.end};
  RETURN_IF_ERROR(LoadCut(backend, source, config, names.gate, inter, h, rows_cut, storage, held,
                          &held->w.gate));
  RETURN_IF_ERROR(LoadCut(backend, source, config, names.up, inter, h, rows_cut, storage, held,
                          &held->w.up));
  return LoadCut(backend, source, config, names.down, h, inter, cols_cut, storage, held,
                 &held->w.down);
}

}  // namespace expertd::engine::parallel
