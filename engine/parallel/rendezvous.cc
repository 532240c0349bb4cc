#include "engine/parallel/rendezvous.h"

#include <cstdlib>
#include <map>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "base/status_macros.h"

namespace expertd::engine::parallel {
namespace {

struct Found {
  std::string name, value;
};

std::optional<Found> FirstSet(const EnvLookup& env, std::initializer_list<const char*> names) {
  for (const char* name : names) {
    std::optional<std::string> v = env(name);
    if (v.has_value() && !v->empty()) return Found{name, *v};
  }
  return std::nullopt;
}

absl::StatusOr<int> IntFromEnv(const EnvLookup& env, std::initializer_list<const char*> names,
                               int fallback, int min_value) {
  std::optional<Found> f = FirstSet(env, names);
  if (!f.has_value()) return fallback;
  int v = 0;
  if (!absl::SimpleAtoi(f->value, &v) || v < min_value) {
    return absl::InvalidArgumentError(
        absl::StrCat(f->name, "='", f->value, "' is not an integer >= ", min_value));
  }
  return v;
}

// The in-process meeting point: groups by rendezvous address.
struct Meeting {
  std::shared_ptr<InProcessGroup> group;
  int nodes_joined = 0;
  int num_nodes = 0;
};

absl::Mutex meetings_mu(absl::kConstInit);
std::map<std::string, Meeting>& Meetings() ABSL_EXCLUSIVE_LOCKS_REQUIRED(meetings_mu) {
  static auto* meetings = new std::map<std::string, Meeting>();
  return *meetings;
}

}  // namespace

EnvLookup ProcessEnv() {
  return [](const std::string& name) -> std::optional<std::string> {
    const char* v = std::getenv(name.c_str());
    if (v == nullptr) return std::nullopt;
    return std::string(v);
  };
}

absl::StatusOr<ParallelTopology> RendezvousSpec::TopologyOf(int local) const {
  if (local < 0 || local >= devices_per_node) {
    return absl::InvalidArgumentError(
        absl::StrCat("local device ", local, " outside [0, ", devices_per_node, ")"));
  }
  return ParallelTopology::Create(world_size(), node_rank * devices_per_node + local,
                                  devices_per_node);
}

absl::StatusOr<RendezvousSpec> RendezvousFromEnv(const EnvLookup& env, int devices_per_node) {
  if (devices_per_node < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("devices per node must be >= 1, got ", devices_per_node));
  }
  RendezvousSpec spec;
  spec.devices_per_node = devices_per_node;
  ASSIGN_OR_RETURN(spec.num_nodes, IntFromEnv(env, {"EXPERTD_NUM_NODES", "LWS_GROUP_SIZE"}, 1, 1));
  ASSIGN_OR_RETURN(
      spec.node_rank,
      IntFromEnv(env, {"EXPERTD_NODE_RANK", "LWS_WORKER_INDEX", "JOB_COMPLETION_INDEX"}, 0, 0));
  if (spec.node_rank >= spec.num_nodes) {
    return absl::InvalidArgumentError(
        absl::StrCat("node rank ", spec.node_rank, " is outside [0, ", spec.num_nodes,
                     ") (set EXPERTD_NUM_NODES to the number of pods)"));
  }
  ASSIGN_OR_RETURN(int port, IntFromEnv(env, {"EXPERTD_RENDEZVOUS_PORT"}, 29500, 1));
  if (port > 65535)
    return absl::InvalidArgumentError(absl::StrCat("EXPERTD_RENDEZVOUS_PORT=", port, " > 65535"));
  std::optional<Found> leader = FirstSet(env, {"EXPERTD_LEADER_ADDRESS", "LWS_LEADER_ADDRESS"});
  if (leader.has_value()) {
    spec.address = absl::StrCat(leader->value, ":", port);
  } else if (spec.num_nodes > 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(spec.num_nodes,
                     " nodes but no leader address: set EXPERTD_LEADER_ADDRESS (or run under a "
                     "LeaderWorkerSet)"));
  }
  return spec;
}

absl::StatusOr<std::vector<std::unique_ptr<Collectives>>> JoinInProcess(const RendezvousSpec& spec,
                                                                        InProcessOptions options) {
  std::shared_ptr<InProcessGroup> group;
  if (spec.num_nodes == 1) {
    group = InProcessGroup::Create(spec.world_size(), options);
  } else {
    absl::MutexLock lock(&meetings_mu);
    Meeting& m = Meetings()[spec.address];
    if (m.group == nullptr) {
      m.group = InProcessGroup::Create(spec.world_size(), options);
      m.num_nodes = spec.num_nodes;
    } else if (m.group->world_size() != spec.world_size() || m.num_nodes != spec.num_nodes) {
      return absl::InvalidArgumentError(absl::StrCat("rendezvous ", spec.address, ": world of ",
                                                     m.group->world_size(), " ranks on ",
                                                     m.num_nodes, " nodes, but this node expects ",
                                                     spec.world_size(), " on ", spec.num_nodes));
    }
    group = m.group;
    if (++m.nodes_joined == m.num_nodes) Meetings().erase(spec.address);
  }
  std::vector<std::unique_ptr<Collectives>> endpoints;
  for (int local = 0; local < spec.devices_per_node; ++local) {
    ASSIGN_OR_RETURN(ParallelTopology t, spec.TopologyOf(local));
    endpoints.push_back(group->Join(t));
  }
  return endpoints;
}

}  // namespace expertd::engine::parallel
