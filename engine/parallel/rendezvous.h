// Rendezvous: how the devices of several pods (nodes) find each other and
// form ONE collective group, from the environment the orchestrator sets; no
// cluster protocol of our own. Each process (one per pod) drives
// `devices_per_node` ranks (its --devices); global rank = node_rank *
// devices_per_node + local device.
//
// Environment, first match wins (deploy/kubernetes/templates/multinode-*.yaml
// are the manifests):
//   number of nodes:  EXPERTD_NUM_NODES, else LWS_GROUP_SIZE (LeaderWorkerSet),
//                     else 1
//   this node's rank: EXPERTD_NODE_RANK, else LWS_WORKER_INDEX, else
//                     JOB_COMPLETION_INDEX (Kubernetes indexed Job), else 0
//   leader address:   EXPERTD_LEADER_ADDRESS, else LWS_LEADER_ADDRESS;
//                     required when there is more than one node
//   port:             EXPERTD_RENDEZVOUS_PORT, else 29500
//
// The NCCL backend hands "address:port" to NCCL as NCCL_COMM_ID, so NCCL's
// own bootstrap (rank 0 listens there, every rank connects) builds the group;
// the in-process backend uses the same string as the name of a process-wide
// meeting point, which is how this code path is tested without GPUs.
#ifndef EXPERTD_ENGINE_PARALLEL_RENDEZVOUS_H_
#define EXPERTD_ENGINE_PARALLEL_RENDEZVOUS_H_

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/parallel/collectives.h"
#include "engine/parallel/in_process_collectives.h"
#include "engine/parallel/topology.h"

namespace expertd::engine::parallel {

// Reads one environment variable; nullopt when unset. Tests pass a map.
using EnvLookup = std::function<std::optional<std::string>(const std::string& name)>;
// The process environment (getenv).
EnvLookup ProcessEnv();

struct RendezvousSpec {
  int num_nodes = 1;
  int node_rank = 0;
  int devices_per_node = 1;
  std::string address;  // "host:port" of node 0; empty for a single node

  int world_size() const { return num_nodes * devices_per_node; }
  // The topology of this node's local device `local` (0 <= local < devices_per_node).
  absl::StatusOr<ParallelTopology> TopologyOf(int local) const;
};

// InvalidArgument naming the variable for a malformed or inconsistent value
// (non-numeric, node rank outside [0, nodes), several nodes but no leader).
absl::StatusOr<RendezvousSpec> RendezvousFromEnv(const EnvLookup& env, int devices_per_node);

// In-process backend: joins the group named by spec.address (or a private one
// for a single node) and returns the endpoints of this node's ranks, in local
// order. Each node (thread group) calls it once; the group is created by the
// first caller and forgotten by the meeting point when the last node joined.
// InvalidArgument when two callers disagree on the world size.
absl::StatusOr<std::vector<std::unique_ptr<Collectives>>> JoinInProcess(
    const RendezvousSpec& spec, InProcessOptions options = {});

}  // namespace expertd::engine::parallel

#endif  // EXPERTD_ENGINE_PARALLEL_RENDEZVOUS_H_
