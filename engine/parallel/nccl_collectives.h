// NcclCollectives: Collectives over NVIDIA NCCL, for GPUs within one node
// (NVLink/PCIe) and across nodes (InfiniBand/RoCE/TCP), one communicator per
// device. Built whenever CUDA is (--config=cuda); the engine reaches it only
// through the Collectives interface.
//
// Buffers are CUDA device memory of the communicator's device. Each
// collective is enqueued on the communicator's own stream and waited for
// (the interface is blocking); a caller that computes on another stream must
// synchronise it first. Sum order is NCCL's (ring/tree), reproducible for a
// fixed topology and NCCL configuration, not the in-process rank order.
#ifndef EXPERTD_ENGINE_PARALLEL_NCCL_COLLECTIVES_H_
#define EXPERTD_ENGINE_PARALLEL_NCCL_COLLECTIVES_H_

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/parallel/collectives.h"
#include "engine/parallel/rendezvous.h"

namespace expertd::engine::parallel {

// Creates the communicators of this node's ranks: local device i is CUDA
// device i. For several nodes the group forms through NCCL's bootstrap at
// spec.address (set as NCCL_COMM_ID before ncclGetUniqueId, so every node
// derives the same id; node 0 hosts the bootstrap root). Blocks until every
// node has joined. Errors: no or too few CUDA devices (FailedPrecondition),
// NCCL failures (Internal, with NCCL's message).
absl::StatusOr<std::vector<std::unique_ptr<Collectives>>> CreateNcclCollectives(
    const RendezvousSpec& spec);

}  // namespace expertd::engine::parallel

#endif  // EXPERTD_ENGINE_PARALLEL_NCCL_COLLECTIVES_H_
