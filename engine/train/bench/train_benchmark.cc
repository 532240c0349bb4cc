// expertd-train-bench: training speed on the CPU backend (not a test).
//
//   expertd-train-bench --model=DIR [--batch_size=4] [--seq_len=128] [--steps=5]
//                       [--threads=2] [--seed=1]
//     times full training steps (forward, backward, clipping, AdamW) on a
//     random batch; prints {"tokens_per_s", "median_step_s", ...}.
//   expertd-train-bench --adamw_params=N [--threads=2]
//     times the AdamW update over N fp32 parameters against the memory-traffic
//     bound: 28 bytes per parameter (read p, g, m, v; write p, m, v) at the
//     bandwidth of a copy measured in the same run (read + written bytes).
#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <iostream>
#include <random>
#include <vector>

#include "base/flags.h"
#include "engine/backend/cpu/cpu_features.h"
#include "engine/backend/cpu/thread_pool.h"
#include "engine/train/adamw.h"
#include "engine/train/trainer.h"
#include "nlohmann/json.hpp"

namespace expertd {
namespace {

struct Options {
  std::string model;
  int64_t batch_size = 4, seq_len = 128, steps = 5, threads = 2, seed = 1, adamw_params = 0;
};

double Seconds(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

absl::Status BenchSteps(const Options& o) {
  auto model = train::TrainModel::Load(o.model);
  if (!model.ok()) return model.status();
  train::TrainOptions topts;
  topts.threads = static_cast<int>(o.threads);
  train::Trainer trainer(model->get(), topts);
  train::TrainBatch batch{o.batch_size, o.seq_len, {}, {}};
  std::mt19937 rng(static_cast<uint32_t>(o.seed));
  std::uniform_int_distribution<int32_t> token(0, (*model)->config().vocab_size - 1);
  for (int64_t i = 0; i < o.batch_size * o.seq_len; ++i) batch.input_ids.push_back(token(rng));
  std::vector<double> times;
  float loss = 0;
  for (int64_t s = 0; s <= o.steps; ++s) {  // step 0 warms up (allocations, page faults)
    const auto t0 = std::chrono::steady_clock::now();
    auto r = trainer.Step({batch});
    const auto t1 = std::chrono::steady_clock::now();
    if (!r.ok()) return r.status();
    loss = r->loss.total;
    if (s > 0) times.push_back(Seconds(t0, t1));
  }
  const double step = Median(times);
  nlohmann::json out = {{"model", o.model},      {"batch_size", o.batch_size},
                        {"seq_len", o.seq_len},  {"threads", o.threads},
                        {"median_step_s", step}, {"tokens_per_s", o.batch_size * o.seq_len / step},
                        {"last_loss", loss},     {"step_times_s", times}};
  std::cout << out.dump() << std::endl;
  return absl::OkStatus();
}

// One STREAM-style copy of a into b; returns bytes read + written per second.
double CopyOnce(const std::vector<float>& a, std::vector<float>* b, engine::ThreadPool* pool) {
  const int64_t n = static_cast<int64_t>(a.size());
  const auto t0 = std::chrono::steady_clock::now();
  engine::ParallelFor(pool, n / 8, 1 << 13, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin * 8; i < end * 8; i += 8) {
      _mm256_storeu_ps(&(*b)[i], _mm256_loadu_ps(&a[i]));
    }
  });
  return 2.0 * n * sizeof(float) / Seconds(t0, std::chrono::steady_clock::now());
}

// Copy and AdamW alternate (7 rounds), so each round's ratio compares them
// under the same machine load; reports the median round.
absl::Status BenchAdamW(const Options& o) {
  std::unique_ptr<engine::ThreadPool> pool;
  if (o.threads > 1) pool = std::make_unique<engine::ThreadPool>(static_cast<int>(o.threads));
  const int64_t n = o.adamw_params;
  std::vector<float> p(n, 0.5f), g(n, 0.01f), m(n, 0.0f), v(n, 0.0f);
  std::vector<float> a((256ll << 20) / sizeof(float), 1.0f), b(a.size(), 0.0f);
  std::vector<double> copy_bw, params_per_s, fraction;
  for (int rep = 0; rep < 7; ++rep) {
    copy_bw.push_back(CopyOnce(a, &b, pool.get()));
    const train::AdamWConstants c = train::MakeAdamWConstants(train::AdamWOptions{}, 1e-3, rep + 1);
    const auto t0 = std::chrono::steady_clock::now();
    engine::ParallelFor(pool.get(), n, 1 << 14, [&](int64_t begin, int64_t end) {
      train::AdamWUpdate(c, &g[begin], &p[begin], &m[begin], &v[begin], end - begin);
    });
    params_per_s.push_back(n / Seconds(t0, std::chrono::steady_clock::now()));
    fraction.push_back(params_per_s.back() / (copy_bw.back() / 28.0));
  }
  nlohmann::json out = {{"params", n},
                        {"threads", o.threads},
                        {"isa", engine::cpu::CpuIsaName(engine::cpu::BestCpuIsa())},
                        {"params_per_s", Median(params_per_s)},
                        {"copy_bytes_per_s", Median(copy_bw)},
                        {"bound_params_per_s", Median(copy_bw) / 28.0},
                        {"fraction_of_bound", Median(fraction)},
                        {"fraction_per_round", fraction}};
  std::cout << out.dump() << std::endl;
  return absl::OkStatus();
}

}  // namespace
}  // namespace expertd

int main(int argc, char** argv) {
  expertd::Options o;
  expertd::FlagSet flags("expertd-train-bench --model=DIR | --adamw_params=N");
  flags.String("model", &o.model, "model directory (training-step mode)");
  flags.Int("batch_size", &o.batch_size, 1, 4096, "sequences per step");
  flags.Int("seq_len", &o.seq_len, 2, 1 << 20, "tokens per sequence");
  flags.Int("steps", &o.steps, 1, 1 << 20, "timed steps (after one warm-up step)");
  flags.Int("threads", &o.threads, 1, 1024, "CPU threads");
  flags.Int("seed", &o.seed, 0, 1ll << 31, "token sampling seed");
  flags.Int("adamw_params", &o.adamw_params, 0, 1ll << 34, "AdamW mode: parameter count");
  absl::Status st = flags.Parse(argc, argv, nullptr);
  if (flags.help_requested()) {
    std::cout << flags.Usage();
    return 0;
  }
  if (!st.ok()) {
    std::cerr << st.message() << "\n" << flags.Usage();
    return 2;
  }
  st = o.adamw_params > 0 ? expertd::BenchAdamW(o) : expertd::BenchSteps(o);
  if (!st.ok()) {
    std::cerr << "expertd-train-bench: " << st << "\n";
    return 1;
  }
  return 0;
}
