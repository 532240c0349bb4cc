#include "engine/parallel/moe_parallel_bench_lib.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "base/status_macros.h"
#include "engine/backend/backend_factory.h"
#include "engine/parallel/rank_threads.h"

namespace expertd::engine::parallel::bench {

std::vector<double> ParseList(const std::string& text) {
  std::vector<double> out;
  for (absl::string_view p : absl::StrSplit(text, ',')) {
    double v;
    if (absl::SimpleAtod(p, &v)) out.push_back(v);
  }
  return out;
}

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

namespace {

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

}  // namespace

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

absl::StatusOr<Measured> TimeCompute(const BenchOptions& o, Ranks& ranks, MoeParallelism mode,
                                     const LayerStep& s) {
  const int d = static_cast<int>(ranks.r.size());
  RankThreads threads(d);
  // Each device's share is its best over the reps: the shares run one at a
  // time, so the best is the share with the least outside interference, and
  // the step (the slowest device) is not inflated by one device's unlucky rep.
  std::vector<double> best_ms(d, 1e30);
  Measured m;
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
    double wmx = 0, wsum = 0;
    for (int i = 0; i < d; ++i) {
      best_ms[i] = std::min(best_ms[i], ranks.r[i]->compute_ns / 1e6);
      wmx = std::max<double>(wmx, ranks.r[i]->work.load());
      wsum += ranks.r[i]->work.load();
    }
    m.work_imbalance = wsum > 0 ? wmx / (wsum / d) : 1.0;  // the same every rep
  }
  double sum = 0;
  for (double t : best_ms) {
    m.compute_max_ms = std::max(m.compute_max_ms, t);
    sum += t;
  }
  m.compute_mean_ms = sum / d;
  m.time_imbalance = m.compute_max_ms / m.compute_mean_ms;
  return m;
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

}  // namespace expertd::engine::parallel::bench
