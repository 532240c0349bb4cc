#include "client/bench/workload.h"

#include <cstdio>
#include <fstream>
#include <map>

#include "gtest/gtest.h"

namespace expertd::bench {
namespace {

TEST(LengthDistributionTest, ParsesTheThreeForms) {
  Rng rng(1);
  auto fixed = LengthDistribution::Parse("128");
  ASSERT_TRUE(fixed.ok());
  EXPECT_EQ(fixed->Sample(&rng), 128);
  auto uniform = LengthDistribution::Parse("uniform:3,5");
  ASSERT_TRUE(uniform.ok());
  std::map<int64_t, int> seen;
  for (int i = 0; i < 300; ++i) ++seen[uniform->Sample(&rng)];
  EXPECT_EQ(seen.size(), 3u);
  EXPECT_EQ(seen.begin()->first, 3);
  EXPECT_EQ(seen.rbegin()->first, 5);
  EXPECT_DOUBLE_EQ(uniform->mean(), 4);
  auto normal = LengthDistribution::Parse("normal:4,10");
  ASSERT_TRUE(normal.ok());
  for (int i = 0; i < 1000; ++i) EXPECT_GE(normal->Sample(&rng), 1);  // clipped at 1
}

TEST(LengthDistributionTest, RejectsBadSpecs) {
  for (const char* bad : {"", "0", "-3", "x", "uniform:5,3", "uniform:0,3", "uniform:1",
                          "normal:0,1", "normal:10,-1", "normal:a,b", "uniform:1.5,3"}) {
    EXPECT_FALSE(LengthDistribution::Parse(bad).ok()) << bad;
  }
}

WorkloadOptions Synthetic(uint64_t seed) {
  WorkloadOptions o;
  o.input_len = *LengthDistribution::Parse("uniform:5,40");
  o.output_len = *LengthDistribution::Parse("normal:20,5");
  o.vocab_size = 50;
  o.excluded_ids = {0, 1, 2};
  o.max_context = 1000;
  o.seed = seed;
  return o;
}

TEST(WorkloadTest, SyntheticPromptsAvoidSpecialTokensAndFollowTheLengths) {
  Workload w(Synthetic(1));
  for (int i = 0; i < 200; ++i) {
    PlannedRequest r = w.Next();
    EXPECT_EQ(r.index, i);
    EXPECT_GE(r.prompt.token_ids.size(), 5u);
    EXPECT_LE(r.prompt.token_ids.size(), 40u);
    EXPECT_EQ(r.input_tokens, static_cast<int64_t>(r.prompt.token_ids.size()));
    EXPECT_GE(r.max_new_tokens, 1);
    for (uint32_t id : r.prompt.token_ids) {
      EXPECT_GE(id, 3u);
      EXPECT_LT(id, 50u);
    }
    EXPECT_EQ(r.prompt_hash, PromptHash(r.prompt));
  }
}

TEST(WorkloadTest, SameSeedSamePlanOtherSeedOtherPlan) {
  Workload a(Synthetic(7)), b(Synthetic(7)), c(Synthetic(8));
  bool differs = false;
  for (int i = 0; i < 50; ++i) {
    PlannedRequest x = a.Next(), y = b.Next(), z = c.Next();
    EXPECT_EQ(x.prompt.token_ids, y.prompt.token_ids);
    EXPECT_EQ(x.max_new_tokens, y.max_new_tokens);
    EXPECT_EQ(x.sampling_seed, y.sampling_seed);
    differs = differs || x.prompt_hash != z.prompt_hash;
  }
  EXPECT_TRUE(differs);
}

TEST(WorkloadTest, RequestsAreCutToFitTheContext) {
  WorkloadOptions o = Synthetic(2);
  o.input_len = LengthDistribution::Fixed(100);
  o.output_len = LengthDistribution::Fixed(30);
  o.max_context = 64;
  Workload w(o);
  PlannedRequest r = w.Next();
  EXPECT_EQ(r.max_new_tokens, 30);
  EXPECT_EQ(r.prompt.token_ids.size(), 34u);
}

std::string WriteFile(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + "/" + name;
  std::ofstream(path) << text;
  return path;
}

TEST(WorkloadTest, JsonlPromptsInSeededOrderCoveringEveryLinePerPass) {
  const std::string path = WriteFile("prompts.jsonl",
                                     "{\"text\": \"hello\"}\n"
                                     "\n"
                                     "{\"token_ids\": [4, 5, 6], \"max_new_tokens\": 3}\n"
                                     "{\"text\": \"world\", \"max_new_tokens\": 9}\n");
  auto prompts = LoadJsonlPrompts(path);
  ASSERT_TRUE(prompts.ok()) << prompts.status();
  ASSERT_EQ(prompts->size(), 3u);
  EXPECT_EQ((*prompts)[1].token_ids, (std::vector<uint32_t>{4, 5, 6}));
  EXPECT_EQ((*prompts)[2].max_new_tokens, 9);
  WorkloadOptions o;
  o.dataset = *prompts;
  o.output_len = LengthDistribution::Fixed(17);
  o.seed = 3;
  Workload w(o);
  for (int pass = 0; pass < 4; ++pass) {
    std::map<uint64_t, int> seen;
    for (int i = 0; i < 3; ++i) {
      PlannedRequest r = w.Next();
      ++seen[r.prompt_hash];
      if (r.prompt.text == "hello") EXPECT_EQ(r.max_new_tokens, 17);
      if (r.prompt.text == "hello") EXPECT_EQ(r.input_tokens, -1);  // known from the server's usage
      if (!r.prompt.token_ids.empty()) EXPECT_EQ(r.max_new_tokens, 3);
      if (r.prompt.text == "world") EXPECT_EQ(r.max_new_tokens, 9);
    }
    EXPECT_EQ(seen.size(), 3u) << "pass " << pass;
  }
}

TEST(WorkloadTest, JsonlErrorsNameTheLine) {
  struct Case {
    const char* text;
    const char* want;
  } cases[] = {
      {"{\"text\": \"a\"}\nnot json\n", ":2: not a JSON object"},
      {"{\"prompt\": \"a\"}\n", ":1: needs"},
      {"{\"token_ids\": [1, -2]}\n", "uint32"},
      {"{\"token_ids\": []}\n", "non-empty array"},
      {"{\"text\": \"a\", \"max_new_tokens\": 0}\n", "max_new_tokens"},
      {"\n\n", "no prompts"},
  };
  for (const Case& c : cases) {
    auto p = LoadJsonlPrompts(WriteFile("bad.jsonl", c.text));
    ASSERT_FALSE(p.ok()) << c.text;
    EXPECT_NE(p.status().message().find(c.want), std::string::npos) << p.status();
  }
  EXPECT_FALSE(LoadJsonlPrompts(::testing::TempDir() + "/missing.jsonl").ok());
}

}  // namespace
}  // namespace expertd::bench
