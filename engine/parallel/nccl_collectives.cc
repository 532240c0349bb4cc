#include "engine/parallel/nccl_collectives.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <cstdlib>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace expertd::engine::parallel {
namespace {

absl::Status NcclStatus(ncclResult_t r, const char* what) {
  if (r == ncclSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, ": ", ncclGetErrorString(r)));
}

absl::Status CudaStatus(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, ": ", cudaGetErrorString(e)));
}

ncclDataType_t NcclType(ReduceType type) {
  switch (type) {
    case ReduceType::kFloat32:
      return ncclFloat32;
    case ReduceType::kInt64:
      return ncclInt64;
  }
  return ncclFloat32;
}

class NcclCollectives final : public Collectives {
 public:
  NcclCollectives(ParallelTopology topology, int device, ncclComm_t comm, cudaStream_t stream)
      : topology_(topology), device_(device), comm_(comm), stream_(stream) {}
  ~NcclCollectives() override {
    cudaSetDevice(device_);
    if (barrier_buf_ != nullptr) cudaFree(barrier_buf_);
    ncclCommDestroy(comm_);
    cudaStreamDestroy(stream_);
  }

  const ParallelTopology& topology() const override { return topology_; }

  absl::Status AllReduceSum(void* buf, int64_t count, ReduceType type) override {
    RETURN_IF_ERROR(Enter());
    RETURN_IF_ERROR(NcclStatus(
        ncclAllReduce(buf, buf, count, NcclType(type), ncclSum, comm_, stream_), "ncclAllReduce"));
    return Wait();
  }

  absl::Status AllGather(const void* send, void* recv, int64_t bytes) override {
    RETURN_IF_ERROR(Enter());
    RETURN_IF_ERROR(
        NcclStatus(ncclAllGather(send, recv, bytes, ncclChar, comm_, stream_), "ncclAllGather"));
    return Wait();
  }

  absl::Status AllToAll(const void* send, void* recv, int64_t bytes_per_rank) override {
    std::vector<int64_t> sizes(topology_.world_size(), bytes_per_rank);
    return AllToAllV(send, sizes.data(), recv, sizes.data());
  }

  absl::Status AllToAllV(const void* send, const int64_t* send_bytes, void* recv,
                         const int64_t* recv_bytes) override {
    RETURN_IF_ERROR(Enter());
    RETURN_IF_ERROR(NcclStatus(ncclGroupStart(), "ncclGroupStart"));
    int64_t send_off = 0, recv_off = 0;
    for (int peer = 0; peer < topology_.world_size(); ++peer) {
      if (send_bytes[peer] > 0) {
        ncclSend(static_cast<const char*>(send) + send_off, send_bytes[peer], ncclChar, peer, comm_,
                 stream_);
      }
      if (recv_bytes[peer] > 0) {
        ncclRecv(static_cast<char*>(recv) + recv_off, recv_bytes[peer], ncclChar, peer, comm_,
                 stream_);
      }
      send_off += send_bytes[peer];
      recv_off += recv_bytes[peer];
    }
    RETURN_IF_ERROR(NcclStatus(ncclGroupEnd(), "ncclSend/ncclRecv"));
    return Wait();
  }

  absl::Status Broadcast(void* buf, int64_t bytes, int root) override {
    RETURN_IF_ERROR(Enter());
    RETURN_IF_ERROR(NcclStatus(ncclBroadcast(buf, buf, bytes, ncclChar, root, comm_, stream_),
                               "ncclBroadcast"));
    return Wait();
  }

  absl::Status Barrier() override {
    // NCCL has no barrier: a one-element all-reduce is the usual stand-in.
    RETURN_IF_ERROR(Enter());
    if (barrier_buf_ == nullptr)
      RETURN_IF_ERROR(CudaStatus(cudaMalloc(&barrier_buf_, sizeof(float)), "cudaMalloc"));
    RETURN_IF_ERROR(NcclStatus(
        ncclAllReduce(barrier_buf_, barrier_buf_, 1, ncclFloat32, ncclSum, comm_, stream_),
        "ncclAllReduce (barrier)"));
    return Wait();
  }

  void Abort(const absl::Status& why) override {
    (void)why;
    ncclCommAbort(comm_);
  }

 private:
  absl::Status Enter() { return CudaStatus(cudaSetDevice(device_), "cudaSetDevice"); }
  absl::Status Wait() {
    return CudaStatus(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
  }

  const ParallelTopology topology_;
  const int device_;
  ncclComm_t comm_;
  cudaStream_t stream_;
  void* barrier_buf_ = nullptr;
};

}  // namespace

absl::StatusOr<std::vector<std::unique_ptr<Collectives>>> CreateNcclCollectives(
    const RendezvousSpec& spec) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices < spec.devices_per_node) {
    return absl::FailedPreconditionError(
        absl::StrCat("NCCL collectives need ", spec.devices_per_node,
                     " CUDA devices on this node, found ", devices));
  }
  // Every node derives the same id from NCCL_COMM_ID; a single node makes a
  // fresh one.
  if (!spec.address.empty()) setenv("NCCL_COMM_ID", spec.address.c_str(), /*overwrite=*/1);
  ncclUniqueId id;
  RETURN_IF_ERROR(NcclStatus(ncclGetUniqueId(&id), "ncclGetUniqueId"));
  std::vector<ncclComm_t> comms(spec.devices_per_node);
  std::vector<cudaStream_t> streams(spec.devices_per_node);
  RETURN_IF_ERROR(NcclStatus(ncclGroupStart(), "ncclGroupStart"));
  for (int local = 0; local < spec.devices_per_node; ++local) {
    ASSIGN_OR_RETURN(ParallelTopology t, spec.TopologyOf(local));
    RETURN_IF_ERROR(CudaStatus(cudaSetDevice(local), "cudaSetDevice"));
    RETURN_IF_ERROR(
        CudaStatus(cudaStreamCreateWithFlags(&streams[local], cudaStreamNonBlocking), "stream"));
    RETURN_IF_ERROR(NcclStatus(ncclCommInitRank(&comms[local], t.world_size(), id, t.rank()),
                               "ncclCommInitRank"));
  }
  RETURN_IF_ERROR(NcclStatus(ncclGroupEnd(), "ncclCommInitRank (group)"));
  std::vector<std::unique_ptr<Collectives>> out;
  for (int local = 0; local < spec.devices_per_node; ++local) {
    ASSIGN_OR_RETURN(ParallelTopology t, spec.TopologyOf(local));
    out.push_back(std::make_unique<NcclCollectives>(t, local, comms[local], streams[local]));
  }
  return out;
}

}  // namespace expertd::engine::parallel
