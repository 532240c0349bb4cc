// ParallelTopology: who is who in a group of devices working on one model, as
// a value type (the TensorRT-LLM WorldConfig idea): the world size, this
// rank, and how ranks are laid out over nodes (pods). Copyable, immutable,
// cheap; every getter is constexpr so shard arithmetic can be checked at
// compile time in tests.
//
//   global rank = node_rank * devices_per_node + local_rank
//
// A single-node server with --devices=4 is {world 4, 4 per node}; two pods of
// 8 GPUs each are {world 16, 8 per node}. Ranks are dense in [0, world).
#ifndef EXPERTD_ENGINE_PARALLEL_TOPOLOGY_H_
#define EXPERTD_ENGINE_PARALLEL_TOPOLOGY_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace expertd::engine::parallel {

class ParallelTopology {
 public:
  // One device, rank 0: the single-device engine.
  constexpr ParallelTopology() = default;

  // InvalidArgument unless world >= 1, 0 <= rank < world, devices_per_node
  // >= 1 and divides world.
  static absl::StatusOr<ParallelTopology> Create(int world_size, int rank, int devices_per_node);
  // All ranks on one node.
  static absl::StatusOr<ParallelTopology> SingleNode(int world_size, int rank) {
    return Create(world_size, rank, world_size);
  }

  constexpr int world_size() const { return world_size_; }
  constexpr int rank() const { return rank_; }
  constexpr int devices_per_node() const { return devices_per_node_; }
  constexpr int num_nodes() const { return world_size_ / devices_per_node_; }
  constexpr int node_rank() const { return rank_ / devices_per_node_; }
  constexpr int local_rank() const { return rank_ % devices_per_node_; }
  constexpr bool is_leader() const { return rank_ == 0; }
  constexpr bool is_multi_node() const { return num_nodes() > 1; }

  // The same layout seen from another rank (REQUIRES: 0 <= rank < world).
  ParallelTopology WithRank(int rank) const;

  std::string DebugString() const;

  friend constexpr bool operator==(const ParallelTopology& a, const ParallelTopology& b) {
    return a.world_size_ == b.world_size_ && a.rank_ == b.rank_ &&
           a.devices_per_node_ == b.devices_per_node_;
  }
  friend constexpr bool operator!=(const ParallelTopology& a, const ParallelTopology& b) {
    return !(a == b);
  }

 private:
  constexpr ParallelTopology(int world_size, int rank, int devices_per_node)
      : world_size_(world_size), rank_(rank), devices_per_node_(devices_per_node) {}

  int world_size_ = 1;
  int rank_ = 0;
  int devices_per_node_ = 1;
};

// How `total` items (an expert's intermediate columns, a layer's experts)
// split over `parts` ranks when they do not divide evenly: the first
// total % parts ranks get one more. Contiguous, ordered by rank.
struct ShardRange {
  int64_t begin = 0;
  int64_t end = 0;
  constexpr int64_t size() const { return end - begin; }
};
constexpr ShardRange EvenShard(int64_t total, int parts, int index) {
  const int64_t base = total / parts, extra = total % parts;
  const int64_t begin = index * base + (index < extra ? index : extra);
  return ShardRange{begin, begin + base + (index < extra ? 1 : 0)};
}

}  // namespace expertd::engine::parallel

#endif  // EXPERTD_ENGINE_PARALLEL_TOPOLOGY_H_
