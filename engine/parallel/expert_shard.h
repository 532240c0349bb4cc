// ExpertShard: one device's part of a routed expert, in the storage format
// the expert is computed in (dense, FP8 block-scaled from an FP8 checkpoint,
// or int8 / int4 / mxfp4 quantized at load).
//
// MoEShard splits the intermediate dimension I of every expert: gate/up
// ([I, H], Hugging Face layout) by rows and down ([H, I]) by the matching
// columns. A block-scaled weight can only be cut where its scale blocks end,
// so the split is made in units of ExpertShardUnit columns (the down
// weight's column group; for int formats also the gate/up row block) and the
// last unit may be short (ragged FP8 edge blocks). ExpertColumns divides the
// units over the devices with EvenShard: when D does not divide them, the
// first devices get one unit more, and when there are fewer units than
// devices the last devices hold nothing (and contribute zeros).
//
// A slice cut on unit boundaries holds exactly the values and scales of the
// whole weight's blocks it covers: quantizing the slice gives the same codes
// and scales as slicing the quantized whole (blocks never straddle a cut), and
// an FP8 gate/up row slice keeps the parent's scale rows through
// WeightQuant::row0. So every device computes with the single-device
// engine's numbers; only the fp32 summation order differs.
#ifndef EXPERTD_ENGINE_PARALLEL_EXPERT_SHARD_H_
#define EXPERTD_ENGINE_PARALLEL_EXPERT_SHARD_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/backend/backend.h"
#include "engine/model/expert_provider.h"
#include "engine/model/weight_source.h"
#include "engine/parallel/topology.h"
#include "models/config/model_config.h"

namespace expertd::engine::parallel {

// How the devices store experts: kDense keeps the checkpoint's dtype (FP8
// checkpoints stay FP8 with their block scales); int8 / int4 / mxfp4
// quantize each expert at load with QuantizeWeights (block_rows, group_size,
// scale_dtype as the expert pack would store them). `scales` is ignored.
using ExpertShardStorage = WeightQuant;

// The column granularity of the intermediate dimension for `config`'s
// experts stored as `storage` (1 for dense). InvalidArgument when the
// storage cannot hold the expert's shape (a group that does not divide H).
absl::StatusOr<int64_t> ExpertShardUnit(const models::ModelConfig& config,
                                        const ExpertShardStorage& storage);

// Device `rank` of `devices`: columns [begin, end) of the intermediate
// dimension `intermediate`, cut on multiples of `unit` (end may be ragged at
// `intermediate`). Empty when the device gets no unit.
ShardRange ExpertColumns(int64_t intermediate, int64_t unit, int devices, int rank);

// One device's copy of (part of) an expert: the buffers own device memory,
// `w` points into them.
struct HeldExpert {
  std::vector<DeviceBuffer> buffers;
  ExpertWeights w;  // empty refs when nothing is held
  uint64_t bytes = 0;  // values + scales held on the device
};

// Loads intermediate columns `cols` of expert (layer, expert) from `source`
// into `backend`'s memory as `storage`. `cols` empty: *held stays empty.
// Errors name the tensor (wrong shape, FP8 without scales or config).
absl::Status LoadExpertShard(Backend* backend, const WeightSource& source,
                             const models::ModelConfig& config, int layer, int expert,
                             ShardRange cols, const ExpertShardStorage& storage,
                             HeldExpert* held);

}  // namespace expertd::engine::parallel

#endif  // EXPERTD_ENGINE_PARALLEL_EXPERT_SHARD_H_
