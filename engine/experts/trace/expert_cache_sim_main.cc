// expert-cache-sim: replays a routing trace through the expert-cache policies
// and Belady's optimal MIN, for one or more cache budgets.
//
//   bazel run //engine/experts:expert-cache-sim -- --trace=trace.jsonl \
//       --capacity_fraction=0.1,0.25,0.5
//   bazel run //engine/experts:expert-cache-sim -- --synthetic --zipf=1.2 \
//       --layers=16 --experts=64 --top_k=8 --steps=2000
//
// Prints a table (or --json): per budget and policy, the hit rate, misses and
// the ratio of the policy's hit rate to Belady's.
#include <cstdio>
#include <iostream>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "base/flags.h"
#include "base/status_macros.h"
#include "engine/experts/trace/cache_sim.h"
#include "engine/experts/trace/routing_trace.h"
#include "engine/experts/trace/synthetic_trace.h"
#include "nlohmann/json.hpp"

namespace expertd::engine {
namespace {

struct Options {
  std::string trace;
  bool synthetic = false;
  int64_t layers = 16, experts = 64, top_k = 8, steps = 1000, tokens = 1;
  double zipf = 0, stickiness = 0;
  int64_t seed = 1;
  std::string capacity;           // "8,32"
  std::string capacity_fraction;  // "0.1,0.25"
  uint64_t budget_bytes = 0;
  uint64_t expert_bytes = 0;
  double pin_hot_fraction = 0;
  double lfu_half_life = 0;
  bool json = false;
};

absl::StatusOr<std::vector<double>> ParseList(const std::string& text) {
  std::vector<double> out;
  for (absl::string_view part : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    double v;
    if (!absl::SimpleAtod(part, &v) || v <= 0) {
      return absl::InvalidArgumentError(absl::StrCat("bad list value '", part, "'"));
    }
    out.push_back(v);
  }
  return out;
}

absl::StatusOr<RoutingTrace> LoadTrace(const Options& o) {
  if (!o.trace.empty()) return ReadRoutingTrace(o.trace);
  if (!o.synthetic) return absl::InvalidArgumentError("give --trace=FILE or --synthetic");
  SyntheticTraceOptions s;
  s.num_layers = static_cast<int32_t>(o.layers);
  s.num_experts = static_cast<int32_t>(o.experts);
  s.top_k = static_cast<int32_t>(o.top_k);
  s.steps = o.steps;
  s.tokens_per_step = static_cast<int32_t>(o.tokens);
  s.zipf_s = o.zipf;
  s.stickiness = o.stickiness;
  s.expert_bytes = o.expert_bytes;
  s.seed = static_cast<uint64_t>(o.seed);
  return GenerateSyntheticTrace(s);
}

absl::StatusOr<std::vector<int64_t>> Capacities(const Options& o, const RoutingTrace& t,
                                                int64_t moe_experts) {
  std::vector<int64_t> caps;
  if (!o.capacity.empty()) {
    ASSIGN_OR_RETURN(auto list, ParseList(o.capacity));
    for (double v : list) caps.push_back(static_cast<int64_t>(v));
  }
  if (!o.capacity_fraction.empty()) {
    ASSIGN_OR_RETURN(auto list, ParseList(o.capacity_fraction));
    for (double v : list)
      caps.push_back(std::max<int64_t>(1, static_cast<int64_t>(v * moe_experts)));
  }
  if (o.budget_bytes > 0) {
    const uint64_t per = o.expert_bytes ? o.expert_bytes : t.header.expert_bytes;
    if (per == 0)
      return absl::InvalidArgumentError(
          "--budget_bytes needs expert_bytes (trace header or --expert_bytes)");
    caps.push_back(std::max<int64_t>(1, static_cast<int64_t>(o.budget_bytes / per)));
  }
  if (caps.empty()) caps = {moe_experts / 8, moe_experts / 4, moe_experts / 2};
  for (int64_t& c : caps) c = std::max<int64_t>(1, c);
  return caps;
}

int Run(int argc, char** argv) {
  Options o;
  FlagSet flags("expert-cache-sim: replay a routing trace through LRU, LFU and Belady's MIN");
  flags.String("trace", &o.trace, "routing trace (JSON lines, see docs/offload.md)");
  flags.Bool("synthetic", &o.synthetic, "generate a Zipf-skewed trace instead");
  flags.Int("layers", &o.layers, 1, 1 << 16, "synthetic: MoE layers");
  flags.Int("experts", &o.experts, 1, 1 << 16, "synthetic: experts per layer");
  flags.Int("top_k", &o.top_k, 1, 1 << 16, "synthetic: experts per token");
  flags.Int("steps", &o.steps, 1, 1 << 30, "synthetic: steps");
  flags.Int("tokens", &o.tokens, 1, 1 << 20, "synthetic: tokens per step");
  flags.Double("zipf", &o.zipf, 0, 10,
               "synthetic: Zipf exponent of expert popularity (0 = uniform)");
  flags.Double("stickiness", &o.stickiness, 0, 1,
               "synthetic: probability a token repeats its last choice");
  flags.Int("seed", &o.seed, 0, INT64_MAX, "synthetic: seed");
  flags.String("capacity", &o.capacity, "cache sizes in experts, comma-separated");
  flags.String("capacity_fraction", &o.capacity_fraction,
               "cache sizes as fractions of all routed experts");
  flags.ByteSize("budget_bytes", &o.budget_bytes, "cache size in bytes (needs expert_bytes)");
  flags.ByteSize("expert_bytes", &o.expert_bytes, "bytes per expert (default: the trace header's)");
  flags.Double("pin_hot_fraction", &o.pin_hot_fraction, 0, 1,
               "also run lru/lfu with this hot fraction pinned");
  flags.Double("lfu_half_life", &o.lfu_half_life, 0, 1e18,
               "LFU half-life in accesses (0 = 32 x capacity)");
  flags.Bool("json", &o.json, "print JSON instead of a table");
  absl::Status s = flags.Parse(argc, argv, nullptr);
  if (flags.help_requested()) {
    std::cout << flags.Usage();
    return 0;
  }
  auto trace = s.ok() ? LoadTrace(o) : absl::StatusOr<RoutingTrace>(s);
  if (!trace.ok()) {
    std::cerr << "expert-cache-sim: " << trace.status() << "\n";
    return 2;
  }
  const std::vector<ExpertKey> accesses = TraceAccesses(*trace);
  std::set<int32_t> layers;
  for (const ExpertKey& k : accesses) layers.insert(k.layer);
  const int64_t moe_experts = static_cast<int64_t>(layers.size()) * trace->header.num_experts;
  auto caps = Capacities(o, *trace, moe_experts);
  if (!caps.ok()) {
    std::cerr << "expert-cache-sim: " << caps.status() << "\n";
    return 2;
  }
  nlohmann::json out = nlohmann::json::array();
  if (!o.json) {
    absl::PrintF("trace: %d records, %d accesses, %d routed experts (%d distinct used)\n",
                 trace->records.size(), accesses.size(), moe_experts,
                 SimulateBelady(accesses, 1).distinct);
    absl::PrintF("%10s  %-14s %9s %10s %11s\n", "capacity", "policy", "hit rate", "misses",
                 "vs belady");
  }
  for (int64_t cap : *caps) {
    const CacheSimResult best = SimulateBelady(accesses, cap);
    std::vector<CacheSimResult> results = {best};
    for (double pin : {0.0, o.pin_hot_fraction}) {
      if (pin == 0 && results.size() > 1) continue;
      for (PolicyKind kind : {PolicyKind::kLru, PolicyKind::kLfu}) {
        CacheSimOptions so;
        so.capacity = cap;
        so.policy.kind = kind;
        so.policy.lfu_half_life = o.lfu_half_life;
        so.pin_hot_fraction = pin;
        so.num_experts = trace->header.num_experts;
        results.push_back(SimulatePolicy(accesses, so));
      }
    }
    for (const CacheSimResult& r : results) {
      const double ratio = best.hit_rate() > 0 ? r.hit_rate() / best.hit_rate() : 1;
      if (o.json) {
        out.push_back({{"capacity", cap},
                       {"policy", r.policy},
                       {"hit_rate", r.hit_rate()},
                       {"hits", r.hits},
                       {"misses", r.misses()},
                       {"accesses", r.accesses},
                       {"ratio_to_belady", ratio}});
      } else {
        absl::PrintF("%10d  %-14s %8.2f%% %10d %10.1f%%\n", cap, r.policy, 100 * r.hit_rate(),
                     r.misses(), 100 * ratio);
      }
    }
  }
  if (o.json) std::cout << out.dump(2) << "\n";
  return 0;
}

}  // namespace
}  // namespace expertd::engine

int main(int argc, char** argv) { return expertd::engine::Run(argc, argv); }
