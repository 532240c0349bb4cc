#include "engine/parallel/shard_weight_source.h"

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "engine/model/expert_provider.h"
#include "engine/model/resident_weights.h"

namespace expertd::engine::parallel {

ShardWeightSource::ShardWeightSource(const WeightSource* base, ShardRange cols)
    : base_(base), cols_(cols), config_(base->config()) {
  config_.moe_intermediate_size = cols.size();
  const models::ModelConfig& c = base->config();
  for (int layer = 0; layer < c.num_hidden_layers; ++layer) {
    if (layer >= static_cast<int>(c.is_moe_layer.size()) || !c.is_moe_layer[layer]) continue;
    for (int e = 0; e < c.num_experts; ++e) {
      const ExpertTensorNames n = ExpertTensorNamesFor(c, layer, e);
      experts_[n.gate] = Cut::kRows;
      experts_[n.up] = Cut::kRows;
      experts_[n.down] = Cut::kCols;
      experts_[Fp8ScaleName(n.gate)] = Cut::kScaleRows;
      experts_[Fp8ScaleName(n.up)] = Cut::kScaleRows;
      experts_[Fp8ScaleName(n.down)] = Cut::kScaleCols;
    }
  }
}

absl::StatusOr<std::unique_ptr<ShardWeightSource>> ShardWeightSource::Create(
    const WeightSource* base, ShardRange cols) {
  const int64_t inter = base->config().moe_intermediate_size;
  if (cols.size() <= 0 || cols.begin < 0 || cols.end > inter) {
    return absl::InvalidArgumentError(absl::StrCat("expert shard [", cols.begin, ", ", cols.end,
                                                   ") is empty or outside the width ", inter));
  }
  return std::unique_ptr<ShardWeightSource>(new ShardWeightSource(base, cols));
}

absl::StatusOr<models::TensorView> ShardWeightSource::Get(const std::string& name) const {
  auto cut = experts_.find(name);
  ASSIGN_OR_RETURN(models::TensorView v, base_->Get(name));
  if (cut == experts_.end()) return v;
  return Slice(name, cut->second, std::move(v));
}

absl::StatusOr<models::TensorView> ShardWeightSource::Slice(const std::string& name, Cut cut,
                                                            models::TensorView v) const {
  const models::ModelConfig& c = base_->config();
  const int64_t h = c.hidden_size, inter = c.moe_intermediate_size;
  // The cut in the tensor's own units: rows [r0, r1) or columns [c0, c1) of
  // a [rows, cols] tensor; scale grids in blocks.
  int64_t rows = 0, cols = 0, b = cols_.begin, e = cols_.end;
  bool by_rows = cut == Cut::kRows || cut == Cut::kScaleRows;
  switch (cut) {
    case Cut::kRows:
      rows = inter, cols = h;
      break;
    case Cut::kCols:
      rows = h, cols = inter;
      break;
    case Cut::kScaleRows:
    case Cut::kScaleCols: {
      const int64_t br = c.fp8.block_rows, bc = c.fp8.block_cols;
      if (!c.fp8.enabled || br <= 0 || bc <= 0) return v;  // not an FP8 scale grid
      const int64_t blk = by_rows ? br : bc;
      if (cols_.begin % blk != 0) {
        return absl::InvalidArgumentError(
            absl::StrCat(name, ": expert shard [", cols_.begin, ", ", cols_.end,
                         ") does not start on an FP8 block boundary (", blk, ")"));
      }
      rows = by_rows ? (inter + br - 1) / br : (h + br - 1) / br;
      cols = by_rows ? (h + bc - 1) / bc : (inter + bc - 1) / bc;
      b = cols_.begin / blk;
      e = (cols_.end + blk - 1) / blk;
      break;
    }
  }
  if (v.shape != std::vector<int64_t>{rows, cols}) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": expected shape [", rows, ", ", cols, "]"));
  }
  if (v.dtype == models::DType::kF8E4M3 && c.fp8.enabled) {
    const int64_t blk = by_rows ? c.fp8.block_rows : c.fp8.block_cols;
    if (cols_.begin % blk != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, ": expert shard [", cols_.begin, ", ", cols_.end,
                       ") does not start on an FP8 block boundary (", blk, ")"));
    }
  }
  const size_t esize = models::DTypeSize(v.dtype);
  absl::MutexLock lock(&mu_);
  std::vector<char>& bytes = slices_[name];
  if (bytes.empty()) {
    const char* src = static_cast<const char*>(v.data);
    if (by_rows) {
      bytes.assign(src + b * cols * esize, src + e * cols * esize);
    } else {
      bytes.resize(rows * (e - b) * esize);
      for (int64_t r = 0; r < rows; ++r) {
        std::memcpy(bytes.data() + r * (e - b) * esize, src + (r * cols + b) * esize,
                    (e - b) * esize);
      }
    }
  }
  v.shape = by_rows ? std::vector<int64_t>{e - b, cols} : std::vector<int64_t>{rows, e - b};
  v.data = bytes.data();
  v.nbytes = bytes.size();
  v.file.clear();  // not a byte range of the file: fingerprinted by content
  v.file_offset = 0;
  return v;
}

}  // namespace expertd::engine::parallel
