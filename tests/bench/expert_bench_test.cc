// expert-bench against the real daemon on the default zoo model (and a tiny
// zoo DeepSeek-V3 served offloaded): each test starts expertd on free ports,
// runs the expert-bench binary for a second or two and checks its result
// files.
#include <signal.h>

#include <fstream>
#include <functional>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/expertd.grpc.pb.h"
#include "tests/bench/bench_files.h"
#include "tests/testing/expertd_process.h"
#include "tests/testing/subprocess.h"

namespace expertd::testing {
namespace {

constexpr char kModel[] = "tests/data/zoo_default";
// zoo deepseek_v3, tiny preset at 3 layers (tests/data/BUILD).
constexpr char kDeepseekModel[] = "tests/data/zoo_deepseek_v3";

// Polls `done` until it holds or `timeout` passes (then false: the caller
// fails the test rather than waiting forever).
bool WaitFor(const std::function<bool()>& done, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (!done()) {
    if (absl::Now() >= deadline) return false;
    absl::SleepFor(absl::Milliseconds(10));
  }
  return true;
}

struct BenchRun {
  int exit_code = -1;
  std::string output;
  std::string base;  // <out_dir>/<label>
};

class ExpertBenchTest : public ::testing::Test {
 protected:
  void StartDaemon(std::vector<std::string> flags, const std::string& model = kModel) {
    flags.insert(flags.end(),
                 {"--threads=2", "--shutdown_grace_seconds=2", "--metrics_listen=127.0.0.1:0"});
    absl::Status s = daemon_.Start(model, flags, ::testing::TempDir());
    ASSERT_TRUE(s.ok()) << s;
    ASSERT_TRUE(daemon_.WaitUntilServing(absl::Seconds(60))) << daemon_.Output();
    metrics_url_ = absl::StrCat("http://127.0.0.1:", daemon_.MetricsPort(), "/metrics");
  }
  void TearDown() override {
    if (!daemon_.process().running()) return;
    daemon_.process().Signal(SIGTERM);
    EXPECT_EQ(daemon_.process().Wait(absl::Seconds(30)), 0) << daemon_.Output();
  }

  // Starts expert-bench against the daemon with `flags`, writing into a
  // fresh directory; `label` names the files.
  void StartBench(Subprocess* bench, const std::string& label,
                  const std::vector<std::string>& flags, BenchRun* run) {
    const std::string dir = absl::StrCat(::testing::TempDir(), "/bench_", label);
    run->base = dir + "/" + label;
    std::vector<std::string> argv = {RunfilePath("client/expert-bench"),
                                     "--server=" + daemon_.address(),
                                     "--out_dir=" + dir,
                                     "--label=" + label,
                                     "--progress_interval_s=0",
                                     "--connect_timeout_s=20"};
    argv.insert(argv.end(), flags.begin(), flags.end());
    ASSERT_TRUE(bench->Start(argv, dir + ".log"));
  }

  BenchRun Bench(const std::string& label, const std::vector<std::string>& flags) {
    Subprocess bench;
    BenchRun run;
    StartBench(&bench, label, flags, &run);
    run.exit_code = bench.Wait(absl::Seconds(120));
    run.output = bench.Output();
    return run;
  }

  ExpertdProcess daemon_;
  std::string metrics_url_;
};

TEST_F(ExpertBenchTest, ClosedLoopResultIsCompleteAndConsistent) {
  const std::string token_file = ::testing::TempDir() + "/admin_token";
  std::ofstream(token_file) << "bench-test-admin-token-0123456789\n";
  StartDaemon({"--admin_token_file=" + token_file});
  BenchRun run =
      Bench("closed", {"--concurrency=4", "--num_requests=16", "--warmup_requests=3",
                       "--input_len=uniform:8,24", "--output_len=uniform:4,16", "--ignore_eos",
                       "--save_detailed", "--slo_ttft_ms=10000", "--slo_tpot_ms=10000",
                       "--metrics_url=" + metrics_url_, "--admin_token_file=" + token_file});
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("Serving Benchmark Result"), std::string::npos) << run.output;
  nlohmann::json j = ReadJson(run.base + ".json");
  std::vector<CsvRow> rows = ReadCsv(run.base + ".csv");
  ExpectConsistent(j, rows);
  EXPECT_EQ(j["issued"], 16);
  EXPECT_EQ(j["completed"], 16);
  EXPECT_EQ(j["warmup_requests"], 3);
  EXPECT_EQ(j["mode"], "concurrency");
  EXPECT_EQ(j["max_concurrency"], 4);
  EXPECT_EQ(j["request_rate"], "inf");
  EXPECT_EQ(j["model_id"], "zoo_default");
  EXPECT_LE(j["max_concurrent_requests"].get<int>(), 4);
  EXPECT_EQ(j["good_requests"], 16);  // generous SLOs
  EXPECT_EQ(j["request_goodput"], j["request_throughput"]);
  for (const CsvRow& row : rows) {
    EXPECT_EQ(row.at("outcome"), "ok");
    EXPECT_EQ(Num(row, "output_tokens"), Num(row, "max_new_tokens"));  // --ignore_eos
    EXPECT_GE(Num(row, "input_tokens"), 8);
    EXPECT_LE(Num(row, "input_tokens"), 24);
  }
  // Detailed arrays: one entry per measured request.
  for (const char* key : {"input_lens", "output_lens", "ttfts", "itls", "latencies", "errors"}) {
    EXPECT_EQ(j[key].size(), 16u) << key;
  }
  // Expert cache without offloading: /metrics answers with no lookups, so no
  // hit rate; GetExpertStats has no cache to report and says so (the offload
  // test below covers lookups).
  const auto& m = j["expert_cache"]["metrics"];
  ASSERT_EQ(m["available"], true) << m;
  EXPECT_GT(m["tokens"].get<double>(), 0);
  EXPECT_EQ(m["hits"].get<double>() + m["misses"].get<double>(), 0) << m;
  EXPECT_TRUE(m["hit_rate"].is_null()) << m;
  EXPECT_NE(run.output.find("n/a (no expert lookups)"), std::string::npos) << run.output;
  const auto& a = j["expert_cache"]["admin"];
  ASSERT_EQ(a["available"], false) << a;
  EXPECT_TRUE(
      absl::StartsWith(a["reason"].get<std::string>(), "GetExpertStats: FAILED_PRECONDITION"))
      << a;
  EXPECT_NE(run.output.find("unavailable: GetExpertStats"), std::string::npos) << run.output;
}

// Against a daemon that offloads experts (a device cache of a quarter of
// them, misses read from the pack): both sources count lookups and report
// the hit rate they imply, and the table prints it.
TEST_F(ExpertBenchTest, ExpertCacheReportWithOffloadHasHitsAndMisses) {
  const std::string token_file = ::testing::TempDir() + "/admin_token";
  std::ofstream(token_file) << "bench-test-admin-token-0123456789\n";
  StartDaemon({"--admin_token_file=" + token_file, "--expert_offload", "--expert_cache_bytes=6MiB",
               "--expert_pack_dir=" + ::testing::TempDir() + "/pack"});
  BenchRun run =
      Bench("offload",
            {"--concurrency=2", "--num_requests=6", "--input_len=16", "--output_len=8",
             "--ignore_eos", "--metrics_url=" + metrics_url_, "--admin_token_file=" + token_file});
  ASSERT_EQ(run.exit_code, 0) << run.output;
  nlohmann::json j = ReadJson(run.base + ".json");
  ExpectConsistent(j, ReadCsv(run.base + ".csv"));
  for (const char* source : {"metrics", "admin"}) {
    const auto& c = j["expert_cache"][source];
    SCOPED_TRACE(source);
    ASSERT_EQ(c["available"], true) << c;
    const double hits = c["hits"].get<double>(), misses = c["misses"].get<double>();
    EXPECT_GT(misses, 0) << c;  // a quarter of the experts fit: some lookups miss
    EXPECT_GT(hits + misses, 0) << c;
    ASSERT_TRUE(c["hit_rate"].is_number()) << c;
    EXPECT_DOUBLE_EQ(c["hit_rate"].get<double>(), hits / (hits + misses)) << c;
    EXPECT_GT(c["tokens"].get<double>(), 0) << c;
  }
  EXPECT_EQ(run.output.find("n/a (no expert lookups)"), std::string::npos) << run.output;
}

// DeepSeek-V3's architecture (MLA, grouped sigmoid routing, a shared expert,
// a dense first layer) served with its routed experts paged through a device
// cache of a quarter of them and speculative prefetch: the benchmark runs to
// completion, lookups hit and miss, prefetches are issued, and the store's
// layers are the MoE layers 1 and 2 (the dense layer 0 has no experts).
TEST_F(ExpertBenchTest, DeepseekV3ZooModelRunsOffloadedWithPrefetch) {
  const std::string token_file = ::testing::TempDir() + "/admin_token";
  std::ofstream(token_file) << "bench-test-admin-token-0123456789\n";
  // 2 MoE layers x 16 experts of 3 x 64 x 64 bf16 values (24 KiB): 8 fit.
  StartDaemon(
      {"--admin_token_file=" + token_file, "--expert_offload", "--expert_cache_bytes=192KiB",
       "--prefetch=speculative", "--expert_pack_dir=" + ::testing::TempDir() + "/deepseek_pack"},
      kDeepseekModel);
  BenchRun run =
      Bench("deepseek",
            {"--concurrency=2", "--num_requests=8", "--input_len=uniform:8,24", "--output_len=8",
             "--ignore_eos", "--metrics_url=" + metrics_url_, "--admin_token_file=" + token_file});
  ASSERT_EQ(run.exit_code, 0) << run.output;
  nlohmann::json j = ReadJson(run.base + ".json");
  ExpectConsistent(j, ReadCsv(run.base + ".csv"));
  EXPECT_EQ(j["completed"], 8);
  EXPECT_EQ(j["failed"], 0);
  EXPECT_EQ(j["model_id"], "zoo_deepseek_v3");
  for (const char* source : {"metrics", "admin"}) {
    const auto& c = j["expert_cache"][source];
    SCOPED_TRACE(source);
    ASSERT_EQ(c["available"], true) << c;
    EXPECT_GT(c["hits"].get<double>(), 0) << c;
    EXPECT_GT(c["misses"].get<double>(), 0) << c;
    EXPECT_GT(c["prefetch_issued"].get<double>(), 0) << c;
    EXPECT_GT(c["bytes_disk_to_host"].get<double>(), 0) << c;
  }

  auto admin = v1::AdminService::NewStub(daemon_.channel());
  grpc::ClientContext ctx;
  ctx.AddMetadata("authorization", "Bearer bench-test-admin-token-0123456789");
  v1::GetExpertStatsRequest req;
  req.set_per_expert(true);
  v1::ExpertStats stats;
  ASSERT_TRUE(admin->GetExpertStats(&ctx, req, &stats).ok());
  std::set<uint32_t> layers, expert_layers;
  for (const v1::LayerExpertStats& l : stats.layers()) {
    layers.insert(l.layer());
    EXPECT_GT(l.counters().misses(), 0u) << "layer " << l.layer();
  }
  uint64_t uses = 0;
  for (const v1::ExpertPlacement& e : stats.experts()) {
    expert_layers.insert(e.layer());
    uses += e.uses();
  }
  EXPECT_EQ(layers, (std::set<uint32_t>{1, 2}));
  EXPECT_EQ(expert_layers, (std::set<uint32_t>{1, 2}));
  EXPECT_EQ(stats.experts_size(), 2 * 16);
  // Every processed token was routed to top_k = 4 experts in each MoE layer.
  EXPECT_EQ(uses, stats.tokens_processed() * 4 * 2);
}

TEST_F(ExpertBenchTest, OpenLoopPoissonFollowsItsSchedule) {
  StartDaemon({});
  BenchRun run = Bench("poisson", {"--request_rate=50", "--num_requests=30", "--input_len=16",
                                   "--output_len=8", "--ignore_eos", "--seed=3"});
  ASSERT_EQ(run.exit_code, 0) << run.output;
  nlohmann::json j = ReadJson(run.base + ".json");
  std::vector<CsvRow> rows = ReadCsv(run.base + ".csv");
  ExpectConsistent(j, rows);
  EXPECT_EQ(j["mode"], "rate");
  EXPECT_EQ(j["request_rate"], 50.0);
  EXPECT_EQ(j["burstiness"], 1.0);
  EXPECT_TRUE(j["max_concurrency"].is_null());
  EXPECT_EQ(j["completed"], 30);
  ASSERT_EQ(rows.size(), 30u);
  double previous = 0;
  for (const CsvRow& row : rows) {
    const double scheduled = Num(row, "scheduled_ms");
    EXPECT_GE(scheduled, previous);
    EXPECT_GE(Num(row, "start_ms"), scheduled - 0.01);  // never early
    previous = scheduled;
  }
  EXPECT_EQ(Num(rows[0], "scheduled_ms"), 0);
  // 29 exponential gaps of mean 20 ms: their mean is within 10..40 ms by far.
  const double mean_gap = previous / 29;
  EXPECT_GT(mean_gap, 10);
  EXPECT_LT(mean_gap, 40);
}

TEST_F(ExpertBenchTest, SameSeedSameScheduleAndPrompts) {
  StartDaemon({});
  const std::vector<std::string> flags = {"--request_rate=100",       "--burstiness=0.5",
                                          "--num_requests=12",        "--input_len=normal:20,6",
                                          "--output_len=uniform:2,6", "--ignore_eos"};
  auto with_seed = [&](const std::string& label, int seed) {
    std::vector<std::string> f = flags;
    f.push_back(absl::StrCat("--seed=", seed));
    BenchRun run = Bench(label, f);
    EXPECT_EQ(run.exit_code, 0) << run.output;
    std::vector<std::string> plan;
    for (const CsvRow& row : ReadCsv(run.base + ".csv")) {
      plan.push_back(absl::StrCat(row.at("index"), " ", row.at("scheduled_ms"), " ",
                                  row.at("input_tokens"), " ", row.at("max_new_tokens"), " ",
                                  row.at("prompt_hash")));
    }
    return plan;
  };
  const std::vector<std::string> a = with_seed("seed7a", 7), b = with_seed("seed7b", 7),
                                 c = with_seed("seed8", 8);
  ASSERT_EQ(a.size(), 12u);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
}

TEST_F(ExpertBenchTest, OverloadIsCountedAsResourceExhausted) {
  StartDaemon({"--max_queue_length=1", "--max_running_requests=1"});
  BenchRun run = Bench("overload", {"--concurrency=8", "--num_requests=24", "--input_len=8",
                                    "--output_len=24", "--ignore_eos"});
  ASSERT_EQ(run.exit_code, 0) << run.output;  // errors are counted, not fatal
  nlohmann::json j = ReadJson(run.base + ".json");
  ExpectConsistent(j, ReadCsv(run.base + ".csv"));
  EXPECT_GT(j["completed"].get<int>(), 0) << j.dump();
  ASSERT_TRUE(j["error_counts"].contains("RESOURCE_EXHAUSTED")) << j.dump();
  EXPECT_GT(j["error_counts"]["RESOURCE_EXHAUSTED"].get<int>(), 0);
  EXPECT_NE(run.output.find("RESOURCE_EXHAUSTED:"), std::string::npos) << run.output;
}

TEST_F(ExpertBenchTest, DeadlinesAreCountedNotFatal) {
  StartDaemon({});
  BenchRun run = Bench("deadline", {"--concurrency=2", "--num_requests=4", "--input_len=8",
                                    "--output_len=2000", "--ignore_eos", "--timeout_s=0.05"});
  ASSERT_EQ(run.exit_code, 0) << run.output;
  nlohmann::json j = ReadJson(run.base + ".json");
  ExpectConsistent(j, ReadCsv(run.base + ".csv"));
  EXPECT_EQ(j["error_counts"]["DEADLINE_EXCEEDED"], 4) << j.dump();
}

TEST_F(ExpertBenchTest, SigintCancelsInFlightAndWritesPartialResults) {
  StartDaemon({});
  Subprocess bench;
  BenchRun run;
  StartBench(&bench, "sigint",
             {"--concurrency=4", "--num_requests=1000", "--input_len=8", "--output_len=3000",
              "--ignore_eos"},
             &run);
  // SIGINT only once requests are in flight on the daemon, so some are
  // cancelled.
  ASSERT_TRUE(WaitFor(
      [&] { return bench.Output().find("measuring") != std::string::npos || !bench.running(); },
      absl::Seconds(60)));
  ASSERT_TRUE(bench.running()) << bench.Output();
  auto stub = v1::InferenceService::NewStub(daemon_.channel());
  ASSERT_TRUE(WaitFor(
      [&] {
        grpc::ClientContext ctx;
        v1::ServerInfo info;
        return stub->GetServerInfo(&ctx, v1::GetServerInfoRequest(), &info).ok() &&
               info.running_requests() > 0;
      },
      absl::Seconds(60)));
  bench.Signal(SIGINT);
  // 130 from expert-bench's own exit path (partial results written), not
  // death by SIGINT (which a shell also reports as 130).
  EXPECT_EQ(bench.Wait(absl::Seconds(60)), 130) << bench.Output();
  EXPECT_EQ(bench.term_signal(), 0) << "killed by signal " << bench.term_signal() << "\n"
                                    << bench.Output();
  nlohmann::json j = ReadJson(run.base + ".json");
  ASSERT_TRUE(j.is_object()) << bench.Output();
  EXPECT_EQ(j["interrupted"], true);
  ExpectConsistent(j, ReadCsv(run.base + ".csv"));
  EXPECT_GE(j["outcomes"]["cancelled"].get<int>(), 1) << j.dump();
  EXPECT_LT(j["issued"].get<int>(), 1000);
  EXPECT_NE(bench.Output().find("Interrupted:"), std::string::npos) << bench.Output();
  // The daemon freed the cancelled requests and keeps serving.
  EXPECT_EQ(daemon_.Health(""), "SERVING");
}

TEST_F(ExpertBenchTest, SweepWritesEveryPointTheCombinedJsonAndAPng) {
  StartDaemon({});
  BenchRun run = Bench("sweep", {"--sweep_concurrency=1,3", "--num_requests=6", "--input_len=8",
                                 "--output_len=6", "--ignore_eos"});
  ASSERT_EQ(run.exit_code, 0) << run.output;
  for (const char* point : {"-c1", "-c3"}) {
    nlohmann::json j = ReadJson(run.base + point + ".json");
    ExpectConsistent(j, ReadCsv(run.base + point + ".csv"));
    EXPECT_EQ(j["completed"], 6);
  }
  nlohmann::json sweep = ReadJson(run.base + "-sweep.json");
  ASSERT_EQ(sweep["points"].size(), 2u);
  EXPECT_EQ(sweep["points"][0]["max_concurrency"], 1);
  EXPECT_EQ(sweep["points"][1]["max_concurrency"], 3);
  const std::string png = ReadText(run.base + "-sweep.png");
  ASSERT_GT(png.size(), 1000u) << run.output;
  EXPECT_EQ(png.substr(0, 4), "\x89PNG");
}

TEST_F(ExpertBenchTest, JsonlPromptsWithTextAndTokenIds) {
  StartDaemon({});
  const std::string dataset = ::testing::TempDir() + "/prompts.jsonl";
  std::ofstream(dataset) << "{\"text\": \"Once upon a time\", \"max_new_tokens\": 5}\n"
                         << "{\"token_ids\": [10, 11, 12, 13], \"max_new_tokens\": 7}\n"
                         << "{\"text\": \"The small house\"}\n";
  BenchRun run = Bench("jsonl", {"--dataset=" + dataset, "--concurrency=2", "--num_requests=6",
                                 "--output_len=3", "--ignore_eos"});
  ASSERT_EQ(run.exit_code, 0) << run.output;
  nlohmann::json j = ReadJson(run.base + ".json");
  std::vector<CsvRow> rows = ReadCsv(run.base + ".csv");
  ExpectConsistent(j, rows);
  std::set<double> lengths;
  for (const CsvRow& row : rows) {
    EXPECT_GT(Num(row, "input_tokens"), 0);  // text prompts: from the server's usage
    EXPECT_EQ(Num(row, "output_tokens"), Num(row, "max_new_tokens"));
    lengths.insert(Num(row, "max_new_tokens"));
  }
  EXPECT_EQ(lengths, (std::set<double>{3, 5, 7}));  // 6 requests = two passes over 3 prompts
}

TEST_F(ExpertBenchTest, BadFlagsAndUnreachableServer) {
  Subprocess bad;
  ASSERT_TRUE(bad.Start({RunfilePath("client/expert-bench"), "--concurrency=2", "--request_rate=3"},
                        ::testing::TempDir() + "/bad_flags.log"));
  EXPECT_EQ(bad.Wait(absl::Seconds(30)), 2) << bad.Output();
  Subprocess unreachable;
  ASSERT_TRUE(unreachable.Start(
      {RunfilePath("client/expert-bench"), "--server=127.0.0.1:1", "--connect_timeout_s=0.5",
       "--out_dir=" + ::testing::TempDir() + "/unreachable"},
      ::testing::TempDir() + "/unreachable.log"));
  EXPECT_EQ(unreachable.Wait(absl::Seconds(30)), 1) << unreachable.Output();
  EXPECT_NE(unreachable.Output().find("127.0.0.1:1"), std::string::npos) << unreachable.Output();
  // Ctrl-C while still waiting for the server exits at once.
  Subprocess waiting;
  ASSERT_TRUE(
      waiting.Start({RunfilePath("client/expert-bench"), "--server=127.0.0.1:1",
                     "--connect_timeout_s=60", "--out_dir=" + ::testing::TempDir() + "/waiting"},
                    ::testing::TempDir() + "/waiting.log"));
  ASSERT_TRUE(WaitFor(
      [&] {
        return waiting.Output().find("waiting up to") != std::string::npos || !waiting.running();
      },
      absl::Seconds(60)));
  waiting.Signal(SIGINT);
  EXPECT_EQ(waiting.Wait(absl::Seconds(30)), 130) << waiting.Output();
  EXPECT_EQ(waiting.term_signal(), 0) << "killed by signal " << waiting.term_signal();
}

}  // namespace
}  // namespace expertd::testing
