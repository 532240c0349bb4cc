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
// threads; NOT NVLink/NCCL). Work imbalance is max/mean of rows x columns
// computed per device, counted by the step code itself.
//
//   bazel run -c opt //engine/parallel:moe_parallel_bench -- \
//     --experts=8,32,128,256 --prompts=1,16,256 --zipf=0,1.2 --devices=4
//
// --decode: one new token per sequence (--batches of 1..64 sequences, so
// 1..64 rows per layer step), resident experts, and a third column set: ONE
// device doing the whole layer (the same step code at D = 1, no collective).
// Besides the in-process collective it prints the collective MODELLED on a
// GPU link from its bytes (kLinks below) and a GPU roofline model of the
// step (expert weight bytes each device reads, at bf16, over kHbmBytesPerS,
// plus the NVLink collective model). The models are labelled as such; no
// GPU was measured.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <random>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "base/flags.h"
#include "base/status_macros.h"
#include "engine/backend/backend_factory.h"
#include "engine/parallel/in_process_collectives.h"
#include "engine/parallel/multi_device_experts.h"
#include "engine/parallel/rank_state.h"
#include "engine/parallel/rank_threads.h"

namespace expertd::engine::parallel {
namespace {

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

std::vector<double> ParseList(const std::string& text) {
  std::vector<double> out;
  for (absl::string_view p : absl::StrSplit(text, ',')) {
    double v;
    if (absl::SimpleAtod(p, &v)) out.push_back(v);
  }
  return out;
}

// One layer's routed experts, fp32, deterministic.
struct Experts {
  std::vector<std::vector<float>> gate, up, down;  // [E][I*H], [E][I*H], [E][H*I]
};

Experts MakeExperts(int64_t e, int64_t h, int64_t inter) {
  std::mt19937 rng(7);
  std::normal_distribution<float> d(0.0f, 0.05f);
  Experts x;
  auto fill = [&](int64_t n) {
    std::vector<float> v(n);
    for (float& f : v) f = d(rng);
    return v;
  };
  for (int64_t i = 0; i < e; ++i) {
    x.gate.push_back(fill(inter * h));
    x.up.push_back(fill(inter * h));
    x.down.push_back(fill(h * inter));
  }
  return x;
}

// top_k distinct experts per token; expert popularity ~ Zipf(s) over a
// seeded random permutation (hot experts are not neighbours), s = 0 uniform.
std::vector<int32_t> Route(int64_t tokens, int64_t e, int64_t k, double s, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> perm(e);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  std::vector<double> p(e);
  for (int64_t i = 0; i < e; ++i) p[i] = 1.0 / std::pow(static_cast<double>(i + 1), s);
  std::vector<int32_t> ids;
  for (int64_t t = 0; t < tokens; ++t) {
    std::vector<double> w = p;
    for (int64_t j = 0; j < k; ++j) {
      std::discrete_distribution<int> pick(w.begin(), w.end());
      const int r = pick(rng);
      w[r] = 0;
      ids.push_back(perm[r]);
    }
  }
  return ids;
}

absl::Status LoadHeld(Backend* be, const std::vector<float>& src, int64_t rows, int64_t cols,
                      int64_t r0, int64_t r1, int64_t c0, int64_t c1, HeldExpert* held,
                      WeightRef* ref) {
  std::vector<float> block;
  for (int64_t r = r0; r < r1; ++r)
    for (int64_t c = c0; c < c1; ++c) block.push_back(src[r * cols + c]);
  (void)rows;
  ASSIGN_OR_RETURN(DeviceBuffer buf, be->Allocate(std::max<uint64_t>(block.size() * 4, 64)));
  RETURN_IF_ERROR(be->CopyToDevice(buf.data(), block.data(), block.size() * 4));
  *ref = WeightRef{buf.data(), models::DType::kF32, r1 - r0, c1 - c0};
  held->buffers.push_back(std::move(buf));
  return absl::OkStatus();
}

struct Ranks {
  std::shared_ptr<InProcessGroup> group;
  std::vector<std::unique_ptr<RankState>> r;
};

absl::StatusOr<Ranks> MakeRanks(const BenchOptions& o, int d, MoeParallelism mode,
                                const Experts& x, int64_t e, absl::Mutex* serialize) {
  Ranks ranks;
  ranks.group = InProcessGroup::Create(d);
  for (int i = 0; i < d; ++i) {
    auto r = std::make_unique<RankState>();
    r->comm = ranks.group->Join(i);
    r->topology = r->comm->topology();
    BackendOptions bo;
    bo.threads = 1;
    ASSIGN_OR_RETURN(r->backend, CreateBackend(bo));
    ModelDims dims;
    dims.hidden = o.hidden;
    dims.q_width = dims.k_width = dims.v_width = o.hidden;
    dims.experts = e;
    dims.top_k = o.top_k;
    dims.max_intermediate = o.intermediate;
    dims.vocab = 1;
    r->ws = std::make_unique<Workspace>(r->backend.get(), dims);
    r->owner.resize(e);
    for (int j = 0; j < d; ++j) {
      const ShardRange own = EvenShard(e, d, j);
      for (int64_t k = own.begin; k < own.end; ++k) r->owner[k] = j;
    }
    r->experts.resize(e);
    for (int64_t k = 0; k < e; ++k) {
      ShardRange cols{0, o.intermediate};
      if (mode == MoeParallelism::kShard) cols = EvenShard(o.intermediate, d, i);
      if (mode == MoeParallelism::kExpert && r->owner[k] != i) continue;
      HeldExpert& h = r->experts[k];
      Backend* be = r->backend.get();
      RETURN_IF_ERROR(LoadHeld(be, x.gate[k], o.intermediate, o.hidden, cols.begin, cols.end, 0,
                               o.hidden, &h, &h.w.gate));
      RETURN_IF_ERROR(LoadHeld(be, x.up[k], o.intermediate, o.hidden, cols.begin, cols.end, 0,
                               o.hidden, &h, &h.w.up));
      RETURN_IF_ERROR(LoadHeld(be, x.down[k], o.hidden, o.intermediate, 0, o.hidden, cols.begin,
                               cols.end, &h, &h.w.down));
    }
    r->serialize_compute = serialize;
    ranks.r.push_back(std::move(r));
  }
  return ranks;
}

absl::Status Stage(Ranks& ranks, const std::vector<float>& x, const std::vector<int32_t>& ids,
                   const std::vector<float>& w, int64_t tokens) {
  for (auto& r : ranks.r) {
    RETURN_IF_ERROR(r->ws->Prepare(WorkspaceDims{tokens, 1, 1}));
    RETURN_IF_ERROR(r->backend->CopyToDevice(r->ws->f(Buf::kNormed), x.data(), x.size() * 4));
    RETURN_IF_ERROR(
        r->backend->CopyToDevice(r->ws->i32(Buf::kTopkIds), ids.data(), ids.size() * 4));
    RETURN_IF_ERROR(r->backend->CopyToDevice(r->ws->f(Buf::kTopkWeights), w.data(), w.size() * 4));
    r->host_ids = ids;
  }
  return absl::OkStatus();
}

struct Measured {
  double compute_max_ms = 0, compute_mean_ms = 0, collective_ms = 0, work_imbalance = 0,
         time_imbalance = 0;
  double step_ms() const { return compute_max_ms + collective_ms; }
};

// Best of `reps` of the serialised step: per-device compute alone.
absl::StatusOr<Measured> TimeCompute(const BenchOptions& o, Ranks& ranks, MoeParallelism mode,
                                     const LayerStep& s) {
  const int d = static_cast<int>(ranks.r.size());
  RankThreads threads(d);
  Measured best;
  best.compute_max_ms = 1e30;
  for (int64_t rep = 0; rep <= o.reps; ++rep) {  // rep 0 warms up
    for (auto& r : ranks.r) {
      r->compute_ns = 0;
      r->work = 0;
    }
    for (const absl::Status& st : threads.Run([&](int i) {
           return mode == MoeParallelism::kShard ? ShardStep(*ranks.r[i], s)
                                                 : ExpertParallelStep(*ranks.r[i], s);
         })) {
      RETURN_IF_ERROR(st);
    }
    if (rep == 0) continue;
    double mx = 0, sum = 0, wmx = 0, wsum = 0;
    for (auto& r : ranks.r) {
      mx = std::max(mx, r->compute_ns / 1e6);
      sum += r->compute_ns / 1e6;
      wmx = std::max<double>(wmx, r->work.load());
      wsum += r->work.load();
    }
    if (mx < best.compute_max_ms) {
      best.compute_max_ms = mx;
      best.compute_mean_ms = sum / d;
      best.time_imbalance = mx / (sum / d);
      best.work_imbalance = wsum > 0 ? wmx / (wsum / d) : 1.0;
    }
  }
  return best;
}

// counts[s][t]: the (token, expert) rows source s sends to t under expert
// parallelism (tokens EvenShard over sources, experts over owners).
std::vector<std::vector<int64_t>> DispatchCounts(const BenchOptions& o,
                                                 const std::vector<int32_t>& ids,
                                                 const std::vector<int32_t>& owner,
                                                 int64_t tokens) {
  const int d = static_cast<int>(o.devices);
  std::vector<std::vector<int64_t>> counts(d, std::vector<int64_t>(d, 0));
  for (int src = 0; src < d; ++src) {
    const ShardRange rows = EvenShard(tokens, d, src);
    for (int64_t t = rows.begin; t < rows.end; ++t)
      for (int64_t j = 0; j < o.top_k; ++j) counts[src][owner[ids[t * o.top_k + j]]]++;
  }
  return counts;
}

// Bytes the busiest device receives in one step's collectives (what a
// link-bandwidth model would charge): MoEShard's ring all-reduce receives
// 2 (D-1)/D of the [tokens, hidden] output; expert parallelism receives its
// experts' rows from the other devices, its tokens' results back, and the
// other devices' output rows (all-gather).
double MaxRecvBytes(const BenchOptions& o, MoeParallelism mode, const std::vector<int32_t>& ids,
                    const std::vector<int32_t>& owner, int64_t tokens) {
  const int d = static_cast<int>(o.devices);
  const double row = o.hidden * 4.0;
  if (mode == MoeParallelism::kShard) return 2.0 * (d - 1) / d * tokens * row;
  const auto counts = DispatchCounts(o, ids, owner, tokens);
  double worst = 0;
  for (int i = 0; i < d; ++i) {
    double recv = 0;
    for (int t = 0; t < d; ++t) {
      if (t == i) continue;
      recv += (counts[t][i] + counts[i][t]) * row;  // rows in + results back
    }
    recv += (d - 1) * ((tokens + d - 1) / d) * row;  // all-gather
    worst = std::max(worst, recv);
  }
  return worst;
}

// The step's collectives alone, on the in-process backend (best of reps).
absl::StatusOr<double> TimeCollectives(const BenchOptions& o, MoeParallelism mode,
                                       const std::vector<int32_t>& ids,
                                       const std::vector<int32_t>& owner, int64_t tokens) {
  const int d = static_cast<int>(o.devices);
  const int64_t row = o.hidden * 4;
  const std::vector<std::vector<int64_t>> counts = DispatchCounts(o, ids, owner, tokens);
  std::shared_ptr<InProcessGroup> group = InProcessGroup::Create(d);
  std::vector<std::unique_ptr<Collectives>> comm;
  for (int i = 0; i < d; ++i) comm.push_back(group->Join(i));
  RankThreads threads(d);
  std::vector<double> took(d);
  double best = 1e30;
  for (int64_t rep = 0; rep <= o.reps; ++rep) {
    for (const absl::Status& st : threads.Run([&](int i) -> absl::Status {
           RETURN_IF_ERROR(comm[i]->Barrier());
           const absl::Time start = absl::Now();
           if (mode == MoeParallelism::kShard) {
             std::vector<float> buf(tokens * o.hidden, 1.0f);
             RETURN_IF_ERROR(comm[i]->AllReduceSum(buf.data(), buf.size()));
           } else {
             std::vector<int64_t> send(d), recv(d);
             int64_t ns = 0, nr = 0;
             for (int t = 0; t < d; ++t) {
               send[t] = counts[i][t] * row;
               recv[t] = counts[t][i] * row;
               ns += send[t];
               nr += recv[t];
             }
             std::vector<char> a(ns + 1), b(nr + 1);
             RETURN_IF_ERROR(comm[i]->AllToAllV(a.data(), send.data(), b.data(), recv.data()));
             RETURN_IF_ERROR(comm[i]->AllToAllV(b.data(), recv.data(), a.data(), send.data()));
             const int64_t block = (tokens + d - 1) / d * row;
             std::vector<char> mine(block), all(block * d);
             RETURN_IF_ERROR(comm[i]->AllGather(mine.data(), all.data(), block));
           }
           took[i] = absl::ToDoubleMilliseconds(absl::Now() - start);
           return absl::OkStatus();
         })) {
      RETURN_IF_ERROR(st);
    }
    if (rep > 0) best = std::min(best, *std::max_element(took.begin(), took.end()));
  }
  return best;
}

// ---- Decode (--decode) ----

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
}  // namespace expertd::engine::parallel

int main(int argc, char** argv) {
  expertd::engine::parallel::BenchOptions o;
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
  st = expertd::engine::parallel::Main(o);
  if (!st.ok()) {
    std::fprintf(stderr, "moe_parallel_bench: %s\n", st.ToString().c_str());
    return 1;
  }
  return 0;
}
