// Collectives: the communication primitives a group of ranks (devices) uses
// to work on one model. One object per rank; every rank of the group calls
// the same sequence of collectives with matching arguments (SPMD), each from
// its own thread or process. Two implementations: InProcessCollectives (CPU
// virtual devices, one thread per rank; in_process_collectives.h) and
// NcclCollectives (GPUs, within and across nodes; nccl_collectives.h).
//
// Contract for every operation:
//   - Blocking: when it returns OK the result is in the output buffer and the
//     input buffers may be reused.
//   - Buffers are in the memory of this rank's device (host memory for the
//     in-process backend, CUDA device memory for NCCL). In-place is allowed
//     where noted.
//   - Counts are per rank and must match on every rank (the in-process
//     backend checks and fails the collective with InvalidArgument).
//   - Errors: a rank that fails, or a peer that does not arrive before the
//     backend's deadline, breaks the group: the collective returns a
//     non-OK status (DeadlineExceeded, Aborted, Internal) on the ranks that
//     see it, and every later collective fails fast. Abort() breaks the group
//     on purpose, so that a rank whose own work failed releases its peers
//     instead of leaving them waiting.
//   - Determinism: AllReduceSum adds the ranks' values in rank order
//     (((r0 + r1) + r2) + ...) in the in-process backend, so results are
//     bitwise reproducible and identical on every rank. NCCL's order depends
//     on its algorithm (ring/tree) but is the same from run to run on a fixed
//     topology and configuration.
//
// Thread safety: one Collectives object is used by one thread at a time (its
// rank's). Abort() may be called from any thread.
#ifndef EXPERTD_ENGINE_PARALLEL_COLLECTIVES_H_
#define EXPERTD_ENGINE_PARALLEL_COLLECTIVES_H_

#include <cstdint>

#include "absl/status/status.h"
#include "engine/parallel/topology.h"

namespace expertd::engine::parallel {

// Element types a reduction understands. Data movement (gather, all-to-all,
// broadcast) is typeless: it moves bytes.
enum class ReduceType { kFloat32, kInt64 };

class Collectives {
 public:
  virtual ~Collectives() = default;

  virtual const ParallelTopology& topology() const = 0;

  // buf[i] = sum over ranks of buf[i]; `count` elements of `type`. In place.
  virtual absl::Status AllReduceSum(void* buf, int64_t count, ReduceType type) = 0;
  absl::Status AllReduceSum(float* buf, int64_t count) {
    return AllReduceSum(buf, count, ReduceType::kFloat32);
  }

  // recv[r * bytes .. (r+1) * bytes) = rank r's send[0 .. bytes).
  // recv holds world * bytes; send may alias recv + rank * bytes.
  virtual absl::Status AllGather(const void* send, void* recv, int64_t bytes) = 0;

  // Equal-size all-to-all: send holds world blocks of `bytes_per_rank`; block
  // d goes to rank d, and recv's block s is what rank s sent to this rank.
  // send and recv must not overlap.
  virtual absl::Status AllToAll(const void* send, void* recv, int64_t bytes_per_rank) = 0;

  // Variable-size all-to-all (expert parallelism's token exchange). This rank
  // sends send_bytes[d] bytes to rank d, packed in rank order in `send`, and
  // receives recv_bytes[s] bytes from rank s, packed in rank order in `recv`.
  // Both arrays have world entries; recv_bytes[s] must equal rank s's
  // send_bytes[this rank]. send and recv must not overlap.
  virtual absl::Status AllToAllV(const void* send, const int64_t* send_bytes, void* recv,
                                 const int64_t* recv_bytes) = 0;

  // buf on every rank = buf on `root`. In place.
  virtual absl::Status Broadcast(void* buf, int64_t bytes, int root) = 0;

  // Returns when every rank has called Barrier (or the group is broken).
  virtual absl::Status Barrier() = 0;

  // Breaks the group (see the file comment). Idempotent, any thread.
  virtual void Abort(const absl::Status& why) = 0;
};

}  // namespace expertd::engine::parallel

#endif  // EXPERTD_ENGINE_PARALLEL_COLLECTIVES_H_
