#include "engine/parallel/topology.h"

#include "absl/base/internal/raw_logging.h"
#include "absl/strings/str_cat.h"

namespace expertd::engine::parallel {

absl::StatusOr<ParallelTopology> ParallelTopology::Create(int world_size, int rank,
                                                          int devices_per_node) {
  if (world_size < 1)
    return absl::InvalidArgumentError(absl::StrCat("world size must be >= 1, got ", world_size));
  if (rank < 0 || rank >= world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", rank, " is outside [0, ", world_size, ")"));
  }
  if (devices_per_node < 1 || world_size % devices_per_node != 0) {
    return absl::InvalidArgumentError(absl::StrCat("devices per node (", devices_per_node,
                                                   ") must be >= 1 and divide the world size (",
                                                   world_size, ")"));
  }
  return ParallelTopology(world_size, rank, devices_per_node);
}

ParallelTopology ParallelTopology::WithRank(int rank) const {
  ABSL_RAW_CHECK(rank >= 0 && rank < world_size_, "rank outside the world");
  return ParallelTopology(world_size_, rank, devices_per_node_);
}

std::string ParallelTopology::DebugString() const {
  return absl::StrCat("rank ", rank_, "/", world_size_, " (node ", node_rank(), "/", num_nodes(),
                      ", local ", local_rank(), "/", devices_per_node_, ")");
}

}  // namespace expertd::engine::parallel
