#include "client/bench/summary.h"

#include "gtest/gtest.h"

namespace expertd::bench {
namespace {

RequestRecord Ok(int64_t index, double start, std::vector<double> times,
                 std::vector<int32_t> tokens, double end, int64_t input) {
  RequestRecord r;
  r.index = index;
  r.start_s = start;
  r.message_times_s = std::move(times);
  r.message_tokens = std::move(tokens);
  for (int32_t n : r.message_tokens) r.output_tokens += n;
  r.server_output_tokens = r.output_tokens;
  r.end_s = end;
  r.input_tokens = input;
  r.outcome = kOutcomeOk;
  return r;
}

RunResult SampleRun() {
  RunResult run;
  RequestRecord warm = Ok(0, 0.0, {0.5}, {1}, 1.05, 99);
  warm.warmup = true;
  run.records.push_back(warm);
  // A: TTFT 100 ms, ITLs 100 and 200 ms (the last message carries 2 tokens),
  // E2E 500 ms, TPOT (500 - 100) / 3.
  run.records.push_back(Ok(1, 1.0, {1.1, 1.2, 1.4}, {1, 1, 2}, 1.5, 10));
  // B: one token, TTFT 50 ms, E2E 100 ms; the server claims 2 tokens.
  RequestRecord b = Ok(2, 1.2, {1.25}, {1}, 1.3, 5);
  b.server_output_tokens = 2;
  run.records.push_back(b);
  RequestRecord c;
  c.index = 3;
  c.start_s = 1.3;
  c.end_s = 1.31;
  c.outcome = "RESOURCE_EXHAUSTED";
  run.records.push_back(c);
  run.issued = 3;
  run.warmup_issued = 1;
  run.measure_start_s = 1.0;
  run.measure_end_s = 1.5;
  return run;
}

TEST(SummaryTest, CountsThroughputsAndLatencies) {
  BenchSummary s = SummarizeRun(SampleRun(), SloOptions(), {50, 99});
  EXPECT_EQ(s.issued, 3);
  EXPECT_EQ(s.completed, 2);
  EXPECT_EQ(s.failed, 1);
  EXPECT_EQ(s.warmup_requests, 1);
  EXPECT_EQ(s.outcomes.at("ok"), 2);
  EXPECT_EQ(s.outcomes.at("RESOURCE_EXHAUSTED"), 1);
  EXPECT_DOUBLE_EQ(s.duration_s, 0.5);
  EXPECT_EQ(s.total_input_tokens, 15);
  EXPECT_EQ(s.total_output_tokens, 5);
  EXPECT_DOUBLE_EQ(s.request_throughput, 4);
  EXPECT_DOUBLE_EQ(s.output_throughput, 10);
  EXPECT_DOUBLE_EQ(s.total_token_throughput, 40);
  EXPECT_EQ(s.ttft_ms.count, 2u);
  EXPECT_NEAR(s.ttft_ms.mean, 75, 1e-9);
  EXPECT_EQ(s.tpot_ms.count, 1u);  // B has a single token
  EXPECT_NEAR(s.tpot_ms.mean, 400.0 / 3, 1e-9);
  EXPECT_EQ(s.itl_ms.count, 2u);  // one sample per message, not per token
  EXPECT_NEAR(s.itl_ms.min, 100, 1e-9);
  EXPECT_NEAR(s.itl_ms.max, 200, 1e-9);
  EXPECT_EQ(s.e2el_ms.count, 2u);
  EXPECT_NEAR(s.e2el_ms.max, 500, 1e-9);
  EXPECT_EQ(s.usage_mismatches, 1);
  EXPECT_FALSE(s.has_goodput);
  // A spans [1.0, 1.5]; B [1.2, 1.3]; C starts when B ends: peak 2.
  EXPECT_EQ(s.max_concurrent_requests, 2);
  EXPECT_DOUBLE_EQ(s.max_output_tokens_per_s, 5);
}

TEST(SummaryTest, GoodputCountsRequestsMeetingEverySlo) {
  SloOptions slo;
  slo.ttft_ms = 80;  // A (100 ms) misses, B (50 ms) meets
  BenchSummary s = SummarizeRun(SampleRun(), slo, {99});
  EXPECT_TRUE(s.has_goodput);
  EXPECT_EQ(s.good_requests, 1);
  EXPECT_DOUBLE_EQ(s.request_goodput, 2);
  slo = SloOptions();
  slo.tpot_ms = 200;  // A 133 ms meets; B has one token: TPOT 0
  EXPECT_EQ(SummarizeRun(SampleRun(), slo, {99}).good_requests, 2);
  slo.e2el_ms = 400;  // A 500 ms misses
  EXPECT_EQ(SummarizeRun(SampleRun(), slo, {99}).good_requests, 1);
}

TEST(SummaryTest, NothingMeasuredIsAllZero) {
  RunResult run;
  BenchSummary s = SummarizeRun(run, SloOptions(), {99});
  EXPECT_EQ(s.completed, 0);
  EXPECT_EQ(s.duration_s, 0);
  EXPECT_EQ(s.request_throughput, 0);
  EXPECT_EQ(s.ttft_ms.count, 0u);
}

TEST(SummaryTest, TokensPerSecondBucketsAreOneSecondWide) {
  RunResult run;
  run.records.push_back(Ok(0, 0.0, {0.2, 0.9, 1.1, 1.2, 1.3, 2.5}, {1, 1, 1, 1, 2, 1}, 2.6, 1));
  run.issued = 1;
  run.measure_end_s = 2.6;
  EXPECT_DOUBLE_EQ(SummarizeRun(run, SloOptions(), {99}).max_output_tokens_per_s,
                   4);  // [1, 2): 1 + 1 + 2
}

}  // namespace
}  // namespace expertd::bench
