#include "engine/parallel/shard_weight_source.h"

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "engine/model/expert_provider.h"

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
  if (v.dtype == models::DType::kF8E4M3) {
    return absl::UnimplementedError(absl::StrCat(
        name, ": FP8 experts cannot be offloaded across devices yet (their block scales would "
              "need slicing); keep them resident (no expert offload) with several devices"));
  }
  const int64_t h = base_->config().hidden_size, inter = base_->config().moe_intermediate_size;
  const bool rows = cut->second == Cut::kRows;
  const std::vector<int64_t> want = rows ? std::vector<int64_t>{inter, h}
                                         : std::vector<int64_t>{h, inter};
  if (v.shape != want) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": expected shape [", want[0], ", ", want[1], "]"));
  }
  const size_t esize = models::DTypeSize(v.dtype);
  absl::MutexLock lock(&mu_);
  std::vector<char>& bytes = slices_[name];
  if (bytes.empty()) {
    const char* src = static_cast<const char*>(v.data);
    if (rows) {
      bytes.assign(src + cols_.begin * h * esize, src + cols_.end * h * esize);
    } else {
      bytes.resize(h * cols_.size() * esize);
      for (int64_t r = 0; r < h; ++r) {
        std::memcpy(bytes.data() + r * cols_.size() * esize,
                    src + (r * inter + cols_.begin) * esize, cols_.size() * esize);
      }
    }
  }
  v.shape = rows ? std::vector<int64_t>{cols_.size(), h} : std::vector<int64_t>{h, cols_.size()};
  v.data = bytes.data();
  v.nbytes = bytes.size();
  v.file.clear();  // not a byte range of the file: fingerprinted by content
  v.file_offset = 0;
  return v;
}

}  // namespace expertd::engine::parallel
