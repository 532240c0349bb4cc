// ShardWeightSource: a WeightSource that shows one device's MoEShard slice of
// every routed expert of a base source, so the expert store (engine/experts)
// can pack, cache and page just that device's shard bytes (1/D of every
// expert) with no change to the store.
//
// config() is the base config with moe_intermediate_size = the slice width;
// each routed expert's gate/up are rows [begin, end) and down the columns
// [begin, end) of the base tensors; every other tensor passes through. The
// slices are dense (the base tensor's dtype; the store may quantize them to
// its storage format on unit boundaries, expert_shard.h). A sliced tensor is
// copied into host memory on its first Get and kept for the source's
// lifetime (the TensorView contract), so a source that packs every expert
// holds 1/D of the experts' bytes in host memory.
//
// FP8 experts are sliced with their `*_scale_inv` grids: the cut must then
// fall on block boundaries (begin a multiple of both block sizes; the end
// may be the ragged edge), which ExpertColumns gives with a unit that is a
// multiple of both (InvalidArgument otherwise).
//
// Thread safety: const methods may be called concurrently.
#ifndef EXPERTD_ENGINE_PARALLEL_SHARD_WEIGHT_SOURCE_H_
#define EXPERTD_ENGINE_PARALLEL_SHARD_WEIGHT_SOURCE_H_

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "engine/model/weight_source.h"
#include "engine/parallel/topology.h"

namespace expertd::engine::parallel {

class ShardWeightSource final : public WeightSource {
 public:
  // `base` outlives the source. `cols` non-empty, inside the expert width.
  static absl::StatusOr<std::unique_ptr<ShardWeightSource>> Create(const WeightSource* base,
                                                                   ShardRange cols);

  const models::ModelConfig& config() const override { return config_; }
  bool Has(const std::string& name) const override { return base_->Has(name); }
  absl::StatusOr<models::TensorView> Get(const std::string& name) const override;

 private:
  enum class Cut { kRows, kCols, kScaleRows, kScaleCols };
  absl::StatusOr<models::TensorView> Slice(const std::string& name, Cut cut,
                                           models::TensorView v) const;
  ShardWeightSource(const WeightSource* base, ShardRange cols);

  const WeightSource* base_;
  const ShardRange cols_;
  models::ModelConfig config_;
  std::map<std::string, Cut> experts_;  // routed expert tensor -> how it is cut
  mutable absl::Mutex mu_;
  mutable std::map<std::string, std::vector<char>> slices_ ABSL_GUARDED_BY(mu_);
};

}  // namespace expertd::engine::parallel

#endif  // EXPERTD_ENGINE_PARALLEL_SHARD_WEIGHT_SOURCE_H_
