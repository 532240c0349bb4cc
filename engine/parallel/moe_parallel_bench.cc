// moe_parallel_bench: prefill cost of one MoE layer over D devices, MoEShard
// vs expert parallelism, for uniform and Zipf-skewed routing.
//
// This box has 2 cores, so D devices cannot run at once. The step is
// MODELLED: the real per-device step code runs on D threads (one CPU virtual
// device each, one backend thread each) with every compute section
// serialised under one mutex and timed in thread CPU time, so each device's
// share is timed alone and other processes' load does not inflate it; the
// modelled step is the slowest device's compute + the collectives' cost,
// measured separately here with the in-process backend (memcpy between
// threads; NOT NVLink/NCCL). Each device's share is its best of --reps
// (interference from other processes only ever adds time). Work imbalance is
// max/mean of rows x columns computed per device, counted by the step code
// itself.
//
//   tools/bazel.sh build -c opt //engine/parallel:moe_parallel_bench
//   bazel-bin/engine/parallel/moe_parallel_bench --experts=8,32,128,256
//     --prompts=1,16,256 --zipf=0,1.2 --devices=4
//
// --decode: one new token per sequence (--batches of 1..64 sequences, so
// 1..64 rows per layer step), resident experts, and a third column set: ONE
// device doing the whole layer (the same step code at D = 1, no collective).
// Besides the in-process collective it prints the collective MODELLED on a
// GPU link from its bytes and a GPU roofline model of the step (expert
// weight bytes each device reads, at bf16, over HBM bandwidth, plus the
// NVLink collective model; the assumptions are constants in
// moe_parallel_bench_decode.cc). The models are labelled as such; no GPU
// was measured.
#include <cstdio>
#include <random>
#include <vector>

#include "base/flags.h"
#include "base/status_macros.h"
#include "engine/parallel/moe_parallel_bench_lib.h"

namespace expertd::engine::parallel::bench {
namespace {

absl::Status Main(const BenchOptions& o) {
  if (o.decode) return DecodeMain(o);
  std::printf(
      "devices=%lld hidden=%lld intermediate=%lld top_k=%lld prompt_len=%lld (fp32, 1 CPU thread "
      "per device)\n",
      (long long)o.devices, (long long)o.hidden, (long long)o.intermediate, (long long)o.top_k,
      (long long)o.prompt_len);
  std::printf(
      "| experts | prompts | zipf | shard work max/mean | EP work max/mean | 1-device ms | shard "
      "compute ms (max) | shard eff. | EP compute ms (max) | shard coll. ms | EP coll. ms | shard "
      "recv MB | EP recv MB | shard step ms | EP step ms | EP/shard compute | EP/shard step |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (double ef : ParseList(o.experts)) {
    const int64_t e = static_cast<int64_t>(ef);
    const Experts x = MakeExperts(e, o.hidden, o.intermediate);
    for (double s : ParseList(o.zipf)) {
      for (double pf : ParseList(o.prompts)) {
        const int64_t tokens = static_cast<int64_t>(pf) * o.prompt_len;
        const std::vector<int32_t> ids = Route(tokens, e, o.top_k, s, 11);
        std::vector<float> w(ids.size(), 1.0f / o.top_k), xin(tokens * o.hidden);
        std::mt19937 rng(3);
        std::normal_distribution<float> nd(0.0f, 1.0f);
        for (float& f : xin) f = nd(rng);
        const LayerStep step{0, tokens, o.top_k, o.hidden, e, 0.0};
        Measured m[2], one;
        {  // the same layer on one device: the work MoEShard divides by D
          absl::Mutex serialize;
          ASSIGN_OR_RETURN(Ranks ranks, MakeRanks(o, 1, MoeParallelism::kShard, x, e, &serialize));
          RETURN_IF_ERROR(Stage(ranks, xin, ids, w, tokens));
          ASSIGN_OR_RETURN(one, TimeCompute(o, ranks, MoeParallelism::kShard, step));
        }
        double recv_mb[2];
        for (MoeParallelism mode : {MoeParallelism::kShard, MoeParallelism::kExpert}) {
          absl::Mutex serialize;
          ASSIGN_OR_RETURN(Ranks ranks,
                           MakeRanks(o, static_cast<int>(o.devices), mode, x, e, &serialize));
          RETURN_IF_ERROR(Stage(ranks, xin, ids, w, tokens));
          const int i = mode == MoeParallelism::kShard ? 0 : 1;
          ASSIGN_OR_RETURN(m[i], TimeCompute(o, ranks, mode, step));
          ASSIGN_OR_RETURN(m[i].collective_ms,
                           TimeCollectives(o, mode, ids, ranks.r[0]->owner, tokens));
          recv_mb[i] = MaxRecvBytes(o, mode, ids, ranks.r[0]->owner, tokens) / 1e6;
        }
        // shard eff. = the ideal 1/D of the one-device time over the slowest
        // device's measured share (1.0 = perfect split).
        std::printf(
            "| %lld | %lld | %.1f | %.3f | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | "
            "%.2f | %.2f | %.2f | %.2fx | %.2fx |\n",
            (long long)e, (long long)pf, s, m[0].work_imbalance, m[1].work_imbalance,
            one.compute_max_ms, m[0].compute_max_ms,
            one.compute_max_ms / o.devices / m[0].compute_max_ms, m[1].compute_max_ms,
            m[0].collective_ms, m[1].collective_ms, recv_mb[0], recv_mb[1], m[0].step_ms(),
            m[1].step_ms(), m[1].compute_max_ms / m[0].compute_max_ms,
            m[1].step_ms() / m[0].step_ms());
        std::fflush(stdout);
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace expertd::engine::parallel::bench

int main(int argc, char** argv) {
  expertd::engine::parallel::bench::BenchOptions o;
  expertd::FlagSet flags(
      "moe_parallel_bench [--experts=8,128] [--prompts=1,256] [--zipf=0,1.2] [--devices=4] "
      "[--decode --batches=1,4,16,64]");
  flags.String("experts", &o.experts, "comma-separated expert counts");
  flags.String("prompts", &o.prompts, "comma-separated prompt counts (each --prompt_len tokens)");
  flags.String("zipf", &o.zipf,
               "comma-separated Zipf exponents of expert popularity (0 = uniform)");
  flags.Int("devices", &o.devices, 1, 64, "virtual devices");
  flags.Int("prompt_len", &o.prompt_len, 1, 4096, "tokens per prompt");
  flags.Int("hidden", &o.hidden, 8, 8192, "hidden size");
  flags.Int("intermediate", &o.intermediate, 1, 16384, "expert intermediate size");
  flags.Int("top_k", &o.top_k, 1, 16, "experts per token");
  flags.Int("reps", &o.reps, 1, 100, "timed repetitions (best is kept)");
  flags.Bool("decode", &o.decode,
             "decode steps: one token per sequence, --batches sequences, and one device too");
  flags.String("batches", &o.batches, "--decode: comma-separated sequences per step");
  absl::Status st = flags.Parse(argc, argv, nullptr);
  if (!st.ok()) {
    std::fprintf(stderr, "%s\n%s", std::string(st.message()).c_str(), flags.Usage().c_str());
    return 2;
  }
  st = expertd::engine::parallel::bench::Main(o);
  if (!st.ok()) {
    std::fprintf(stderr, "moe_parallel_bench: %s\n", st.ToString().c_str());
    return 1;
  }
  return 0;
}
