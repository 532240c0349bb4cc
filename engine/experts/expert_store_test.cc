// The expert store against its contract, without a forward pass: every
// Acquire returns exactly the checkpoint's bytes, under random budgets,
// policies, prefetchers and thread counts, with prefetches racing demands.
#include "engine/experts/expert_store.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <random>

#include "engine/backend/cpu/cpu_backend.h"
#include "engine/experts/pack/pack_builder.h"
#include "engine/experts/testing/provider_exerciser.h"
#include "engine/experts/testing/test_model.h"
#include "engine/experts/trace/cache_sim.h"
#include "engine/experts/trace/routing_trace.h"
#include "gtest/gtest.h"

namespace expertd::engine {
namespace {

std::string TempDir(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir ? dir : "/tmp") + "/" + name;
}

struct Fixture {
  explicit Fixture(TestModelOptions model = {}, uint64_t device_limit = 0)
      : weights(MakeTestModel(model)), backend(CpuBackendOptions{1, device_limit}) {}
  ExpertProviderContext Context() {
    return ExpertProviderContext{&backend, &weights->config(), weights.get()};
  }
  absl::StatusOr<std::unique_ptr<ExpertStore>> Store(ExpertStoreOptions o) {
    if (o.pack_dir.empty()) o.pack_dir = TempDir("pack");
    return ExpertStore::Create(Context(), o);
  }
  std::shared_ptr<InMemoryWeightSource> weights;
  CpuBackend backend;
};

void ExpectConsistent(const ExpertStoreStats& s) {
  for (const ExpertLayerCounters& c : s.layers) {
    EXPECT_EQ(c.requests, c.hits + c.prefetch_hits + c.misses) << "layer " << c.layer;
    EXPECT_LE(c.prefetch_used + c.prefetch_wasted, c.prefetch_issued) << "layer " << c.layer;
    EXPECT_EQ(c.bytes_host_to_device % s.expert_bytes, 0u);
    EXPECT_LE(c.predicted_correct, c.predicted);
  }
  EXPECT_LE(s.device_resident, s.device_slots);
  EXPECT_LE(s.host_resident, s.host_slots);
}

TEST(ExpertStoreTest, PropertyRandomConfigurationsDeliverExactBytes) {
  std::mt19937 rng(2024);
  for (int trial = 0; trial < 24; ++trial) {
    TestModelOptions m;
    m.dtype = trial % 3 == 0 ? models::DType::kF32 : models::DType::kBF16;
    m.num_experts = 4 + rng() % 8;
    m.top_k = 1 + rng() % 3;
    m.seed = trial;
    Fixture f(m);
    const int64_t total = 3 * m.num_experts;
    ExpertStoreOptions o;
    o.pack_dir = TempDir("prop" + std::to_string(trial));
    o.device_cache_experts = 2 + rng() % (total - 1);
    o.host_cache_bytes = (rng() % 3) * (rng() % total) * 4096 * 4;
    o.policy = rng() % 2 ? PolicyKind::kLru : PolicyKind::kLfu;
    o.prefetch = static_cast<PrefetchKind>(rng() % 3);  // none, all, speculative
    o.pin_hot_fraction = rng() % 2 ? 0.25 : 0;
    o.pin_refresh_steps = 3;
    o.io_threads = 1 + rng() % 4;
    o.direct_io = rng() % 2;
    auto store = f.Store(o);
    ASSERT_TRUE(store.ok()) << store.status();
    ProviderExerciser driver(&f.backend, f.weights.get());
    ExerciseOptions d;
    d.steps = 12;
    d.rows = 1 + rng() % 5;
    d.route_by_router = rng() % 2;
    d.zipf_s = rng() % 2 ? 1.2 : 0;
    d.seed = trial;
    ExpertStore* checked = store->get();
    d.check = [checked] { return checked->CheckInvariants(); };
    absl::Status s = driver.Run(store->get(), d);
    ASSERT_TRUE(s.ok()) << "trial " << trial << ": " << s;
    ExpertStoreStats st = (*store)->stats();
    ExpectConsistent(st);
    EXPECT_EQ(st.total.requests, driver.acquires());
    EXPECT_EQ(st.steps, 12);
  }
}

TEST(ExpertStoreTest, TwoSlotsServeALayerNeedingEveryExpertInWaves) {
  TestModelOptions m;
  m.num_experts = 8;
  m.top_k = 4;
  Fixture f(m);
  ExpertStoreOptions o;
  o.device_cache_experts = 2;
  o.prefetch = PrefetchKind::kAll;  // prefetches must never starve the waves
  auto store = f.Store(o);
  ASSERT_TRUE(store.ok()) << store.status();
  ProviderExerciser driver(&f.backend, f.weights.get());
  ExerciseOptions d;
  d.steps = 4;
  d.rows = 32;  // every expert of every layer, every step
  ExpertStore* checked = store->get();
  d.check = [checked] { return checked->CheckInvariants(); };
  absl::Status run = driver.Run(store->get(), d);
  ASSERT_TRUE(run.ok()) << run;
  ExpertStoreStats s = (*store)->stats();
  ExpectConsistent(s);
  EXPECT_EQ(s.total.requests, 4 * 3 * 8);
  EXPECT_LE(s.device_resident, 2);
}

TEST(ExpertStoreTest, EverythingResidentMeansOnlyColdMissesAndNoStall) {
  Fixture f;
  ExpertStoreOptions o;  // no budget: room for every expert
  auto store = f.Store(o);
  ASSERT_TRUE(store.ok());
  ProviderExerciser driver(&f.backend, f.weights.get());
  ExerciseOptions d;
  d.steps = 30;
  d.rows = 4;
  ASSERT_TRUE(driver.Run(store->get(), d).ok());
  ExpertStoreStats warm = (*store)->stats();
  EXPECT_EQ(warm.total.misses, warm.total.disk_reads);
  EXPECT_LE(warm.total.misses, 3 * 8);
  EXPECT_EQ(warm.total.evictions, 0);
  ASSERT_TRUE(driver.Run(store->get(), d).ok());
  ExpertStoreStats s = (*store)->stats();
  EXPECT_EQ(s.total.misses, warm.total.misses);      // all hits now
  EXPECT_EQ(s.total.stall_ns, warm.total.stall_ns);  // and no waiting
}

// Every reading moves time forward 1 ms, so a waiting Acquire (two readings)
// adds exactly 1 ms of stall and a non-waiting one adds none.
class TickingClock final : public Clock {
 public:
  int64_t NowNanos() const override { return now_.fetch_add(1000000) + 1000000; }
  absl::Time Now() const override { return absl::FromUnixNanos(now_.load()); }  // does not tick

 private:
  mutable std::atomic<int64_t> now_{0};
};

TEST(ExpertStoreTest, StallTimeComesFromTheInjectedClock) {
  Fixture f;
  TickingClock clock;
  ExpertStoreOptions o;
  o.clock = &clock;
  o.io_threads = 1;
  auto store = f.Store(o);
  ASSERT_TRUE(store.ok());
  ExpertStore* s = store->get();
  s->BeginStep(1);
  s->OnRouting(0, std::vector<int32_t>{2});
  ASSERT_TRUE(s->Acquire(0, 2).ok());  // a cold miss: it waited or found the load done
  s->Release(0, 2);
  s->EndStep();
  const int64_t after_miss = s->stats().total.stall_ns;
  EXPECT_TRUE(after_miss == 0 || after_miss == 1000000) << after_miss;
  s->BeginStep(1);
  s->OnRouting(0, std::vector<int32_t>{2});
  ASSERT_TRUE(s->Acquire(0, 2).ok());  // resident: no wait, no stall
  s->Release(0, 2);
  s->EndStep();
  EXPECT_EQ(s->stats().total.stall_ns, after_miss);
  EXPECT_EQ(s->stats().total.hits, 1);
}

TEST(ExpertStoreTest, HitCountsMatchTheSimulatorOnTheRecordedTrace) {
  // One token, top-1: each (step, layer) demands one expert, so the store's
  // cache is exactly the simulator's.
  for (PolicyKind policy : {PolicyKind::kLru, PolicyKind::kLfu}) {
    TestModelOptions m;
    m.top_k = 1;
    Fixture f(m);
    ExpertStoreOptions o;
    o.device_cache_experts = 5;
    o.policy = policy;
    o.routing_trace_path = TempDir(std::string("sim_") + PolicyKindName(policy) + ".jsonl");
    auto store = f.Store(o);
    ASSERT_TRUE(store.ok());
    ProviderExerciser driver(&f.backend, f.weights.get());
    ExerciseOptions d;
    d.steps = 60;
    d.zipf_s = 1.0;
    ASSERT_TRUE(driver.Run(store->get(), d).ok());
    ExpertStoreStats s = (*store)->stats();
    auto trace = ReadRoutingTrace(o.routing_trace_path);
    ASSERT_TRUE(trace.ok()) << trace.status();
    EXPECT_EQ(trace->records.size(), 60u * 3);
    EXPECT_EQ(trace->header.top_k, 1);
    CacheSimOptions sim;
    sim.capacity = 5;
    sim.policy.kind = policy;
    CacheSimResult r = SimulatePolicy(TraceAccesses(*trace), sim);
    EXPECT_EQ(s.total.hits, r.hits) << PolicyKindName(policy);
    EXPECT_EQ(s.total.requests, r.accesses);
  }
}

TEST(ExpertStoreTest, SpeculativePrefetchGuessesRightWhenTheRouterDecides) {
  Fixture f;
  ExpertStoreOptions o;
  o.device_cache_experts = 8;
  o.prefetch = PrefetchKind::kSpeculative;
  auto store = f.Store(o);
  ASSERT_TRUE(store.ok());
  ProviderExerciser driver(&f.backend, f.weights.get());
  ExerciseOptions d;
  d.steps = 20;
  d.route_by_router = true;  // same hidden state for every layer: the guess is exact
  ASSERT_TRUE(driver.Run(store->get(), d).ok());
  ExpertStoreStats s = (*store)->stats();
  ExpectConsistent(s);
  EXPECT_GT(s.total.predicted, 0);
  EXPECT_EQ(s.total.predicted_correct, s.total.predicted);
  EXPECT_GT(s.total.prefetch_used, 0);
  EXPECT_EQ(s.total.prefetch_wasted, 0);
  // Layer 0 has no predecessor: only it misses after the first steps.
  EXPECT_EQ(s.layers[0].predicted, 0);
}

TEST(ExpertStoreTest, PregateUsesTheCheckpointsPregateWeights) {
  TestModelOptions m;
  m.pregates = true;
  Fixture f(m);
  ExpertStoreOptions o;
  o.device_cache_experts = 6;
  o.prefetch = PrefetchKind::kPregate;
  auto store = f.Store(o);
  ASSERT_TRUE(store.ok()) << store.status();
  ProviderExerciser driver(&f.backend, f.weights.get());
  ExerciseOptions d;
  d.steps = 10;
  d.route_by_router = true;
  ASSERT_TRUE(driver.Run(store->get(), d).ok());
  ExpertStoreStats s = (*store)->stats();
  ExpectConsistent(s);
  EXPECT_GT(s.total.predicted, 0);
  // Random pre-gates are not the routers: some guesses are wrong, and
  // results are still exact (the driver checked every byte).
  EXPECT_LT(s.total.predicted_correct, s.total.predicted);
  // Without pre-gate tensors the mode is refused, naming a tensor.
  Fixture plain;
  auto refused = plain.Store(o);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(refused.status().message().find("pregate.weight"), std::string::npos);
}

TEST(ExpertStoreTest, HostTierServesRepeatMissesWithoutDisk) {
  Fixture f;
  ExpertStoreOptions o;
  o.device_cache_experts = 2;
  o.host_cache_bytes = 1 << 30;  // everything
  auto store = f.Store(o);
  ASSERT_TRUE(store.ok());
  ProviderExerciser driver(&f.backend, f.weights.get());
  ExerciseOptions d;
  d.steps = 40;
  d.rows = 3;
  ASSERT_TRUE(driver.Run(store->get(), d).ok());
  ExpertStoreStats s = (*store)->stats();
  EXPECT_LE(s.total.disk_reads, 3 * 8);  // each expert read from disk once
  EXPECT_GT(s.total.host_hits, 0);
  EXPECT_EQ(s.total.bytes_disk_to_host, static_cast<uint64_t>(s.total.disk_reads) * s.slot_bytes);
  EXPECT_EQ(s.total.bytes_host_to_device,
            static_cast<uint64_t>(s.total.disk_reads + s.total.host_hits) * s.expert_bytes);
}

TEST(ExpertStoreTest, BudgetsAndTheirErrors) {
  Fixture f({}, /*device_limit=*/1 << 20);
  ExpertStoreOptions o;
  o.device_cache_bytes = 12000;  // one 8 KiB slot: too small
  auto small = f.Store(o);
  EXPECT_EQ(small.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(small.status().message().find("at least 2"), std::string::npos) << small.status();
  o.device_cache_bytes = 0;
  o.device_cache_fraction = 0.05;  // of 1 MiB free: 6 slots of 8 KiB
  auto fraction = f.Store(o);
  ASSERT_TRUE(fraction.ok()) << fraction.status();
  EXPECT_EQ((*fraction)->stats().slot_bytes, 8192u);
  EXPECT_EQ((*fraction)->stats().device_slots, 1048576 / 20 / 8192);
  Fixture unlimited;
  EXPECT_EQ(unlimited.Store(o).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ExpertStoreTest, CorruptPackIsRebuiltAtOpenAndRepairedAtRead) {
  Fixture f;
  ExpertStoreOptions o;
  o.pack_dir = TempDir("corrupt_store");
  o.device_cache_experts = 2;
  std::remove((o.pack_dir + "/experts.pack").c_str());
  std::string path;
  {
    auto store = f.Store(o);
    ASSERT_TRUE(store.ok());
    EXPECT_TRUE((*store)->stats().pack_built);
    path = (*store)->stats().pack_path;
  }
  {
    auto again = f.Store(o);  // valid pack: reused
    ASSERT_TRUE(again.ok());
    EXPECT_FALSE((*again)->stats().pack_built);
  }
  ASSERT_EQ(truncate(path.c_str(), 5000), 0);
  auto rebuilt = f.Store(o);
  ASSERT_TRUE(rebuilt.ok()) << rebuilt.status();
  EXPECT_TRUE((*rebuilt)->stats().pack_built);
  // Corrupt one payload byte of every expert under the open store: each read
  // fails its CRC, is rebuilt from the checkpoint, served, and written back.
  const PackLayout& l = (*rebuilt)->layout();
  const PackHeader h = MakePackHeader(l, 0);
  int fd = open(path.c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  for (size_t i = 0; i < l.num_entries(); ++i) {
    const char junk = 0x5a;
    ASSERT_EQ(pwrite(fd, &junk, 1, h.data_offset + i * l.slot_bytes + 7), 1);
  }
  close(fd);
  ProviderExerciser driver(&f.backend, f.weights.get());
  ExerciseOptions d;
  d.steps = 6;
  d.rows = 8;                                       // most experts of every layer
  ASSERT_TRUE(driver.Run(rebuilt->get(), d).ok());  // every byte checked
  const int64_t repairs = (*rebuilt)->stats().pack_repairs;
  EXPECT_GT(repairs, 0);
  EXPECT_LE(repairs, static_cast<int64_t>(l.num_entries()));
  // The pack is whole again: a fresh store reads it without repairs.
  auto fresh = f.Store(o);
  ASSERT_TRUE(fresh.ok());
  ASSERT_TRUE(driver.Run(fresh->get(), d).ok());
  ExpertStoreStats s = (*fresh)->stats();
  EXPECT_GT(s.total.disk_reads, 0);
  EXPECT_EQ(s.pack_repairs, 0) << "repaired slots were not written back";
}

TEST(ExpertStoreTest, StalePackIsRebuiltWhenTheSourceChanges) {
  ExpertStoreOptions o;
  o.pack_dir = TempDir("stale_store");
  TestModelOptions m;
  Fixture a(m);
  ASSERT_TRUE(a.Store(o).ok());
  m.seed = 99;  // same shapes, other weights
  Fixture b(m);
  auto store = b.Store(o);
  ASSERT_TRUE(store.ok());
  EXPECT_TRUE((*store)->stats().pack_built);
  ProviderExerciser driver(&b.backend, b.weights.get());
  EXPECT_TRUE(driver.Run(store->get(), ExerciseOptions{}).ok());
}

TEST(PackBuilderTest, UnwritableModelDirFallsBackToTheCacheDir) {
  Fixture f;
  const std::string not_a_dir = TempDir("model_is_a_file");
  {
    std::FILE* fp = std::fopen(not_a_dir.c_str(), "w");
    std::fclose(fp);
  }
  PackLocationOptions where{"", not_a_dir, TempDir("cache")};
  auto pack = OpenOrBuildExpertPack(*f.weights, where, {});
  ASSERT_TRUE(pack.ok()) << pack.status();
  EXPECT_TRUE(pack->built);
  EXPECT_EQ(pack->reader->path().rfind(TempDir("cache") + "/", 0), 0u) << pack->reader->path();
  // Nowhere to write: a clear error naming both places.
  PackLocationOptions nowhere{"", not_a_dir, not_a_dir + "/cache"};
  auto none = OpenOrBuildExpertPack(*f.weights, nowhere, {});
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("--expert_pack_dir"), std::string::npos) << none.status();
  EXPECT_EQ(ExpertPackCandidates({"/x", "/m", "/c"}, 1),
            std::vector<std::string>{"/x/experts.pack"});
}

}  // namespace
}  // namespace expertd::engine
