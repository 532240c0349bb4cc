#include "engine/experts/trace/routing_trace.h"

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <thread>

#include "engine/experts/trace/synthetic_trace.h"
#include "gtest/gtest.h"

namespace expertd::engine {
namespace {

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir ? dir : "/tmp") + "/" + name;
}

RoutingTraceHeader Header() { return RoutingTraceHeader{3, 8, 2, 4096, "tiny"}; }

TEST(RoutingTraceTest, WriteReadRoundTrip) {
  const std::string path = TempPath("rt.jsonl");
  {
    auto w = RoutingTraceWriter::Create(path, Header());
    ASSERT_TRUE(w.ok()) << w.status();
    ASSERT_TRUE((*w)->Append({0, 0, {1, 2, 3, 1}}).ok());
    ASSERT_TRUE((*w)->Append({0, 2, {7, 0}}).ok());
    ASSERT_TRUE((*w)->Append({1, 0, {}}).ok());
  }
  auto t = ReadRoutingTrace(path);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->header.num_layers, 3);
  EXPECT_EQ(t->header.expert_bytes, 4096u);
  EXPECT_EQ(t->header.model, "tiny");
  ASSERT_EQ(t->records.size(), 3u);
  EXPECT_EQ(t->records[0].ids, (std::vector<int32_t>{1, 2, 3, 1}));
  EXPECT_EQ(t->records[0].num_tokens(2), 2);
  EXPECT_EQ(t->records[1].layer, 2);
  EXPECT_TRUE(t->records[2].ids.empty());
  std::vector<ExpertKey> want = {{0, 1}, {0, 2}, {0, 3}, {2, 0}, {2, 7}};
  EXPECT_EQ(TraceAccesses(*t), want);
}

TEST(RoutingTraceTest, TheDocumentedLineFormat) {
  EXPECT_EQ(FormatRoutingRecord({5, 1, {3, 0, 2, 1}}, 2),
            R"({"step":5,"layer":1,"experts":[[3,0],[2,1]]})");
  auto t = ParseRoutingTrace(
      "{\"format\":\"expertd.routing_trace\",\"version\":1,\"num_layers\":2,\"num_experts\":4,"
      "\"top_k\":1}\n"
      "{\"step\":0,\"layer\":1,\"experts\":[[3],[2]]}\n");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->header.expert_bytes, 0u);
  EXPECT_EQ(t->records[0].ids, (std::vector<int32_t>{3, 2}));
}

TEST(RoutingTraceTest, WriterRejectsInvalidRecords) {
  auto w = RoutingTraceWriter::Create(TempPath("bad.jsonl"), Header());
  ASSERT_TRUE(w.ok());
  EXPECT_FALSE((*w)->Append({0, 3, {1, 2}}).ok());  // layer out of range
  EXPECT_FALSE((*w)->Append({0, 0, {1, 8}}).ok());  // id out of range
  EXPECT_FALSE((*w)->Append({0, 0, {1}}).ok());     // not whole tokens
  ASSERT_TRUE((*w)->Append({4, 0, {1, 2}}).ok());
  EXPECT_FALSE((*w)->Append({3, 0, {1, 2}}).ok());  // step went back
  EXPECT_FALSE(RoutingTraceWriter::Create(TempPath("nodir/x.jsonl"), Header()).ok());
}

TEST(RoutingTraceTest, ParseErrorsNameTheLine) {
  const std::string h =
      "{\"format\":\"expertd.routing_trace\",\"version\":1,\"num_layers\":2,\"num_experts\":4,"
      "\"top_k\":2}\n";
  struct Case {
    std::string text, want;
  } cases[] = {
      {"", "no header"},
      {"{\"format\":\"other\"}\n", "line 1"},
      {"{\"format\":\"expertd.routing_trace\",\"version\":2,\"num_layers\":2,\"num_experts\":4,"
       "\"top_k\":2}",
       "version"},
      {h + "{\"step\":0,\"layer\":0,\"experts\":[[1,2]]}\nnot json\n", "line 3: not valid JSON"},
      {h + "{\"step\":0,\"layer\":0,\"experts\":[[1]]}\n", "line 2: each token needs 2"},
      {h + "{\"step\":0,\"layer\":0,\"experts\":[[1,4]]}\n", "line 2: expert id 4"},
      {h + "{\"step\":1,\"layer\":0,\"experts\":[]}\n{\"step\":0,\"layer\":0,\"experts\":[]}\n",
       "line 3: step 0"},
      {"\n" + h, "must be the first line"},
  };
  for (const Case& c : cases) {
    auto t = ParseRoutingTrace(c.text);
    ASSERT_FALSE(t.ok()) << c.text;
    EXPECT_NE(t.status().message().find(c.want), std::string::npos)
        << t.status() << " want " << c.want;
  }
  EXPECT_EQ(ReadRoutingTrace(TempPath("missing.jsonl")).status().code(),
            absl::StatusCode::kNotFound);
}

TEST(RoutingTraceTest, ConcurrentAppendsKeepWholeLines) {
  const std::string path = TempPath("conc.jsonl");
  {
    auto w = RoutingTraceWriter::Create(path, Header());
    ASSERT_TRUE(w.ok());
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t) {
      threads.emplace_back([&, t] {
        for (int i = 0; i < 50; ++i) ASSERT_TRUE((*w)->Append({0, t % 3, {t, (t + 1) % 8}}).ok());
      });
    }
    for (auto& t : threads) t.join();
  }
  auto t = ReadRoutingTrace(path);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->records.size(), 200u);
}

TEST(SyntheticTraceTest, DeterministicSkewedAndSkipsDenseLayers) {
  SyntheticTraceOptions o;
  o.num_layers = 3;
  o.is_moe_layer = {true, false, true};
  o.num_experts = 8;
  o.top_k = 2;
  o.steps = 300;
  o.tokens_per_step = 2;
  o.zipf_s = 1.5;
  RoutingTrace a = GenerateSyntheticTrace(o), b = GenerateSyntheticTrace(o);
  ASSERT_EQ(a.records.size(), 600u);
  std::vector<int> counts(8);
  for (size_t i = 0; i < a.records.size(); ++i) {
    EXPECT_EQ(a.records[i].ids, b.records[i].ids);
    EXPECT_NE(a.records[i].layer, 1);
    ASSERT_TRUE(ValidateRoutingRecord(a.header, a.records[i], 0).ok());
    ASSERT_NE(a.records[i].ids[0], a.records[i].ids[1]);  // distinct per token
    if (a.records[i].layer == 0) {
      for (int32_t id : a.records[i].ids) ++counts[id];
    }
  }
  std::sort(counts.begin(), counts.end());
  EXPECT_GT(counts[7], 3 * counts[0]);  // skewed
}

}  // namespace
}  // namespace expertd::engine
