// moe_parallel_bench --decode: one new token per sequence, MoEShard vs
// expert parallelism vs one device, with the collective modelled on GPU
// links and a GPU roofline of the step (labelled as models).
#include <algorithm>
#include <cstdio>
#include <random>

#include "absl/time/clock.h"
#include "base/status_macros.h"
#include "engine/parallel/moe_parallel_bench_lib.h"
#include "engine/parallel/rank_threads.h"

namespace expertd::engine::parallel::bench {
namespace {

// A GPU link as the collective model sees it: every collective call pays
// `latency_s`, and the busiest device's received bytes cross at `bytes_per_s`.
struct Link {
  const char* name;
  double bytes_per_s, latency_s;
};
// Assumed, not measured: NVLink ~150 GB/s per direction, PCIe ~25 GB/s, and
// ~10 us per NCCL call on either (small-message latency).
constexpr Link kNvlink{"NVLink", 150e9, 10e-6};
constexpr Link kPcie{"PCIe", 25e9, 10e-6};
// GPU roofline of the expert compute (decode reads every active expert's
// weights once): HBM bandwidth assumed (H100-class, ~3 TB/s achievable) and
// bf16 weights; kernel launch costs are NOT modelled.
constexpr double kHbmBytesPerS = 3e12;
constexpr double kGpuWeightBytes = 2;

// Microseconds of one step's collectives on `link`: MoEShard one all-reduce,
// expert parallelism two all-to-all-v and one all-gather.
double ModelCollectiveUs(const Link& link, MoeParallelism mode, double recv_bytes) {
  const int calls = mode == MoeParallelism::kShard ? 1 : 3;
  return 1e6 * (calls * link.latency_s + recv_bytes / link.bytes_per_s);
}

// Expert parameters the busiest of `d` devices reads in one step: each
// active expert's gate, up and down once (its shard under MoEShard, whole
// experts it owns under expert parallelism, everything on one device).
double MaxWeightParams(const BenchOptions& o, int d, MoeParallelism mode,
                       const std::vector<int32_t>& ids, int64_t e) {
  std::vector<char> active(e, 0);
  for (int32_t id : ids) active[id] = 1;
  const double expert = 3.0 * o.hidden * o.intermediate;
  double worst = 0;
  for (int i = 0; i < d; ++i) {
    double params = 0;
    for (int64_t k = 0; k < e; ++k) {
      if (!active[k]) continue;
      if (mode == MoeParallelism::kShard) {
        params += expert * EvenShard(o.intermediate, d, i).size() / o.intermediate;
      } else if (EvenShard(e, d, i).begin <= k && k < EvenShard(e, d, i).end) {
        params += expert;
      }
    }
    worst = std::max(worst, params);
  }
  return worst;
}

// The provider's per-layer input broadcasts on CPU virtual devices (header,
// normalised input, routing weights and ids from rank 0; multi_device_
// experts.cc), in-process, best of reps. An SPMD run on GPUs has these
// inputs replicated already, so the GPU models leave them out.
absl::StatusOr<double> TimeBroadcasts(const BenchOptions& o, int d, int64_t rows) {
  std::shared_ptr<InProcessGroup> group = InProcessGroup::Create(d);
  std::vector<std::unique_ptr<Collectives>> comm;
  for (int i = 0; i < d; ++i) comm.push_back(group->Join(i));
  RankThreads threads(d);
  std::vector<double> took(d);
  double best = 1e30;
  for (int64_t rep = 0; rep <= o.reps; ++rep) {
    for (const absl::Status& st : threads.Run([&](int i) -> absl::Status {
           std::vector<char> header(40), x(rows * o.hidden * 4), k(rows * o.top_k * 4);
           RETURN_IF_ERROR(comm[i]->Barrier());
           const absl::Time start = absl::Now();
           RETURN_IF_ERROR(comm[i]->Broadcast(header.data(), header.size(), 0));
           RETURN_IF_ERROR(comm[i]->Broadcast(x.data(), x.size(), 0));
           RETURN_IF_ERROR(comm[i]->Broadcast(k.data(), k.size(), 0));
           RETURN_IF_ERROR(comm[i]->Broadcast(k.data(), k.size(), 0));
           took[i] = absl::ToDoubleMilliseconds(absl::Now() - start);
           return absl::OkStatus();
         })) {
      RETURN_IF_ERROR(st);
    }
    if (rep > 0) best = std::min(best, *std::max_element(took.begin(), took.end()));
  }
  return best;
}

// One decode step: `rows` sequences, one new token each.
struct DecodeCase {
  double zipf = 0;
  int64_t rows = 0;
  std::vector<int32_t> ids;
  std::vector<float> w, x;
};

std::vector<DecodeCase> MakeDecodeCases(const BenchOptions& o, int64_t e) {
  std::vector<DecodeCase> cases;
  for (double s : ParseList(o.zipf)) {
    for (double b : ParseList(o.batches)) {
      DecodeCase c;
      c.zipf = s;
      c.rows = static_cast<int64_t>(b);
      c.ids = Route(c.rows, e, o.top_k, s, 11);
      c.w.assign(c.ids.size(), 1.0f / o.top_k);
      c.x.resize(c.rows * o.hidden);
      std::mt19937 rng(3);
      std::normal_distribution<float> nd(0.0f, 1.0f);
      for (float& f : c.x) f = nd(rng);
      cases.push_back(std::move(c));
    }
  }
  return cases;
}

// What one strategy (or one device) measured on one case.
struct DecodeMeasured {
  Measured m;
  double recv_bytes = 0, weight_params = 0, broadcast_ms = 0;
};

// Every case on `d` devices with `mode`, the experts loaded once.
absl::StatusOr<std::vector<DecodeMeasured>> TimeDecode(const BenchOptions& o, int d,
                                                       MoeParallelism mode, const Experts& x,
                                                       int64_t e,
                                                       const std::vector<DecodeCase>& cases) {
  absl::Mutex serialize;
  ASSIGN_OR_RETURN(Ranks ranks, MakeRanks(o, d, mode, x, e, &serialize));
  std::vector<DecodeMeasured> out;
  for (const DecodeCase& c : cases) {
    RETURN_IF_ERROR(Stage(ranks, c.x, c.ids, c.w, c.rows));
    const LayerStep step{0, c.rows, o.top_k, o.hidden, e, 0.0};
    DecodeMeasured dm;
    ASSIGN_OR_RETURN(dm.m, TimeCompute(o, ranks, mode, step));
    if (d > 1) {
      ASSIGN_OR_RETURN(dm.m.collective_ms,
                       TimeCollectives(o, mode, c.ids, ranks.r[0]->owner, c.rows));
      dm.recv_bytes = MaxRecvBytes(o, mode, c.ids, ranks.r[0]->owner, c.rows);
      if (mode == MoeParallelism::kShard) {
        ASSIGN_OR_RETURN(dm.broadcast_ms, TimeBroadcasts(o, d, c.rows));
      }
    }
    dm.weight_params = MaxWeightParams(o, d, mode, c.ids, e);
    out.push_back(std::move(dm));
  }
  return out;
}

// Modelled GPU step in us: weights over HBM + the NVLink collective model.
double GpuModelUs(const DecodeMeasured& dm, MoeParallelism mode, bool one_device) {
  const double weights = 1e6 * dm.weight_params * kGpuWeightBytes / kHbmBytesPerS;
  return one_device ? weights : weights + ModelCollectiveUs(kNvlink, mode, dm.recv_bytes);
}

}  // namespace

absl::Status DecodeMain(const BenchOptions& o) {
  const int d = static_cast<int>(o.devices);
  std::printf(
      "decode: devices=%d hidden=%lld intermediate=%lld top_k=%lld, one token per sequence "
      "(fp32, 1 CPU thread per device)\n"
      "models (assumed, not measured): %s %.0f GB/s + %.0f us per call, %s %.0f GB/s + %.0f us "
      "per call; GPU roofline = bf16 expert weights read by the busiest device / %.1f TB/s HBM "
      "+ the NVLink collective\n",
      d, (long long)o.hidden, (long long)o.intermediate, (long long)o.top_k, kNvlink.name,
      kNvlink.bytes_per_s / 1e9, kNvlink.latency_s * 1e6, kPcie.name, kPcie.bytes_per_s / 1e9,
      kPcie.latency_s * 1e6, kHbmBytesPerS / 1e12);
  std::printf(
      "| experts | seqs | zipf | active experts | 1-dev compute ms | shard compute ms (max) | EP "
      "compute ms (max) | shard coll. ms | EP coll. ms | input bcast ms | shard step ms | EP step ms "
      "| 1-dev/shard | 1-dev/EP | weights MB read 1-dev/shard/EP | NVLink model coll. us shard/EP | PCIe model "
      "coll. us shard/EP | GPU model step us 1-dev/shard/EP |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (double ef : ParseList(o.experts)) {
    const int64_t e = static_cast<int64_t>(ef);
    const Experts x = MakeExperts(e, o.hidden, o.intermediate);
    const std::vector<DecodeCase> cases = MakeDecodeCases(o, e);
    ASSIGN_OR_RETURN(auto one, TimeDecode(o, 1, MoeParallelism::kShard, x, e, cases));
    ASSIGN_OR_RETURN(auto shard, TimeDecode(o, d, MoeParallelism::kShard, x, e, cases));
    ASSIGN_OR_RETURN(auto ep, TimeDecode(o, d, MoeParallelism::kExpert, x, e, cases));
    for (size_t i = 0; i < cases.size(); ++i) {
      const Measured &m1 = one[i].m, &ms = shard[i].m, &me = ep[i].m;
      std::printf(
          "| %lld | %lld | %.1f | %.0f | %.3f | %.3f | %.3f | %.3f | %.3f | %.3f | %.3f | %.3f | "
          "%.2fx | %.2fx | %.1f/%.1f/%.1f | %.1f/%.1f | %.1f/%.1f | %.1f/%.1f/%.1f |\n",
          (long long)e, (long long)cases[i].rows, cases[i].zipf,
          one[i].weight_params / (3.0 * o.hidden * o.intermediate), m1.step_ms(),
          ms.compute_max_ms, me.compute_max_ms, ms.collective_ms, me.collective_ms,
          shard[i].broadcast_ms, ms.step_ms(),
          me.step_ms(), m1.step_ms() / ms.step_ms(), m1.step_ms() / me.step_ms(),
          one[i].weight_params * 4 / 1e6, shard[i].weight_params * 4 / 1e6,
          ep[i].weight_params * 4 / 1e6,
          ModelCollectiveUs(kNvlink, MoeParallelism::kShard, shard[i].recv_bytes),
          ModelCollectiveUs(kNvlink, MoeParallelism::kExpert, ep[i].recv_bytes),
          ModelCollectiveUs(kPcie, MoeParallelism::kShard, shard[i].recv_bytes),
          ModelCollectiveUs(kPcie, MoeParallelism::kExpert, ep[i].recv_bytes),
          GpuModelUs(one[i], MoeParallelism::kShard, true),
          GpuModelUs(shard[i], MoeParallelism::kShard, false),
          GpuModelUs(ep[i], MoeParallelism::kExpert, false));
      std::fflush(stdout);
    }
  }
  return absl::OkStatus();
}

}  // namespace expertd::engine::parallel::bench
