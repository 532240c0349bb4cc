// Internal to moe_parallel_bench: one MoE layer's experts, routing and
// ranks, and the timing every mode shares (moe_parallel_bench_lib.cc), and
// the decode mode (moe_parallel_bench_decode.cc). See moe_parallel_bench.cc
// for how the step is modelled.
#ifndef EXPERTD_ENGINE_PARALLEL_MOE_PARALLEL_BENCH_LIB_H_
#define EXPERTD_ENGINE_PARALLEL_MOE_PARALLEL_BENCH_LIB_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "engine/parallel/in_process_collectives.h"
#include "engine/parallel/multi_device_experts.h"
#include "engine/parallel/rank_state.h"

namespace expertd::engine::parallel::bench {

struct BenchOptions {
  std::string experts = "8,16,32,64,128,256";
  std::string prompts = "1,4,16,64,256";
  std::string zipf = "0,1.2";
  int64_t devices = 4;
  int64_t prompt_len = 16;
  int64_t hidden = 256;
  int64_t intermediate = 128;
  int64_t top_k = 2;
  int64_t reps = 3;
  bool decode = false;
  std::string batches = "1,4,16,64";  // --decode: sequences per step
};

// "1,4,16" -> {1, 4, 16}; unparsable items are skipped.
std::vector<double> ParseList(const std::string& text);

// One layer's routed experts, fp32, deterministic.
struct Experts {
  std::vector<std::vector<float>> gate, up, down;  // [E][I*H], [E][I*H], [E][H*I]
};

Experts MakeExperts(int64_t e, int64_t h, int64_t inter);

// top_k distinct experts per token; expert popularity ~ Zipf(s) over a
// seeded random permutation (hot experts are not neighbours), s = 0 uniform.
std::vector<int32_t> Route(int64_t tokens, int64_t e, int64_t k, double s, uint32_t seed);

// D ranks (one 1-thread CPU backend each) holding what `mode` gives each of
// the experts in `x`; every compute section runs under `serialize`.
struct Ranks {
  std::shared_ptr<InProcessGroup> group;
  std::vector<std::unique_ptr<RankState>> r;
};
absl::StatusOr<Ranks> MakeRanks(const BenchOptions& o, int d, MoeParallelism mode,
                                const Experts& x, int64_t e, absl::Mutex* serialize);

// Puts the step's input [tokens, hidden] and routing on every rank.
absl::Status Stage(Ranks& ranks, const std::vector<float>& x, const std::vector<int32_t>& ids,
                   const std::vector<float>& w, int64_t tokens);

struct Measured {
  double compute_max_ms = 0, compute_mean_ms = 0, collective_ms = 0, work_imbalance = 0,
         time_imbalance = 0;
  double step_ms() const { return compute_max_ms + collective_ms; }
};

// The serialised step's compute: each device's share alone, its best of
// `reps`; compute_max_ms is the slowest device's.
absl::StatusOr<Measured> TimeCompute(const BenchOptions& o, Ranks& ranks, MoeParallelism mode,
                                     const LayerStep& s);

// Bytes the busiest device receives in one step's collectives.
double MaxRecvBytes(const BenchOptions& o, MoeParallelism mode, const std::vector<int32_t>& ids,
                    const std::vector<int32_t>& owner, int64_t tokens);

// The step's collectives alone, on the in-process backend (best of reps).
absl::StatusOr<double> TimeCollectives(const BenchOptions& o, MoeParallelism mode,
                                       const std::vector<int32_t>& ids,
                                       const std::vector<int32_t>& owner, int64_t tokens);

// --decode: prints the decode tables (moe_parallel_bench_decode.cc).
absl::Status DecodeMain(const BenchOptions& o);

}  // namespace expertd::engine::parallel::bench

#endif  // EXPERTD_ENGINE_PARALLEL_MOE_PARALLEL_BENCH_LIB_H_
