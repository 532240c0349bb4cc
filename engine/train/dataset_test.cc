#include "engine/train/dataset.h"

#include <cstdlib>
#include <memory>
#include <set>
#include <string>

#include "base/env.h"
#include "base/memory_env.h"
#include "engine/train/data_stream.h"
#include "gtest/gtest.h"
#include "models/tokenizer/tokenizer.h"

namespace expertd::train {
namespace {

using Json = nlohmann::ordered_json;

const char kTokenizer[] = "tests/data/zoo/default_qwen3_moe/tokenizer.json";

class DatasetTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto tok = models::Tokenizer::LoadFromFile(kTokenizer);
    ASSERT_TRUE(tok.ok()) << tok.status();
    tokenizer_ = *std::move(tok);
    options_.tokenizer = tokenizer_.get();
    options_.vocab_size = 2048;
    options_.eos_token_id = 2;
    options_.max_seq_len = 64;
  }

  absl::StatusOr<Dataset> Load(const std::string& contents) {
    EXPECT_TRUE(WriteFileAtomically(&env_, "data.jsonl", contents).ok());
    return LoadDataset(&env_, "data.jsonl", options_);
  }

  std::vector<int32_t> Ids(const std::string& text, bool special) {
    return *tokenizer_->Encode(text, special);
  }

  MemoryEnv env_;
  std::unique_ptr<models::Tokenizer> tokenizer_;
  DatasetOptions options_;
};

TEST_F(DatasetTest, TextLearnsEveryTokenAndEndsWithEos) {
  auto data = Load("{\"text\": \"hello world\"}\n\n");
  ASSERT_TRUE(data.ok()) << data.status();
  ASSERT_EQ(data->examples.size(), 1u);
  std::vector<int32_t> want = Ids("hello world", true);
  want.push_back(2);
  EXPECT_EQ(data->examples[0].input_ids, want);
  EXPECT_EQ(data->examples[0].labels, want);
  EXPECT_EQ(data->lines, 1);
  EXPECT_EQ(data->tokens, static_cast<int64_t>(want.size()));
}

TEST_F(DatasetTest, PromptCompletionMasksThePrompt) {
  auto data = Load(R"({"prompt": "Q: 2+2?", "completion": " A: 4"})");
  ASSERT_TRUE(data.ok()) << data.status();
  const Example& ex = data->examples[0];
  const std::vector<int32_t> prompt = Ids("Q: 2+2?", true), answer = Ids(" A: 4", false);
  ASSERT_EQ(ex.input_ids.size(), prompt.size() + answer.size() + 1);
  for (size_t i = 0; i < ex.labels.size(); ++i) {
    if (i < prompt.size()) {
      EXPECT_EQ(ex.labels[i], kIgnoreIndex) << i;
    } else {
      EXPECT_EQ(ex.labels[i], ex.input_ids[i]) << i;
    }
  }
  EXPECT_EQ(ex.input_ids.back(), 2);
}

TEST_F(DatasetTest, TokenIdsAreTakenAsGiven) {
  auto data = Load("{\"token_ids\": [5, 6, 7]}\n");
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(data->examples[0].input_ids, (std::vector<int32_t>{5, 6, 7}));
  EXPECT_EQ(data->examples[0].labels, (std::vector<int32_t>{5, 6, 7}));
}

TEST_F(DatasetTest, ReportsTheFirstBadLinesWithNumbersAndReasons) {
  auto data = Load(
      "{\"text\": \"fine\"}\n"
      "not json\n"
      "{\"token_ids\": [1, 99999]}\n"
      "\n"
      "{\"prompt\": \"only a prompt\"}\n"
      "[1, 2]\n"
      "{\"text\": \"a\", \"token_ids\": [1, 2]}\n"
      "{\"messages\": []}\n"
      "{\"token_ids\": [1]}\n");
  ASSERT_FALSE(data.ok());
  EXPECT_EQ(data.status().code(), absl::StatusCode::kInvalidArgument);
  const std::string m(data.status().message());
  EXPECT_NE(m.find("7 bad lines of 8"), std::string::npos) << m;
  EXPECT_NE(m.find("line 2: not valid JSON"), std::string::npos) << m;
  EXPECT_NE(m.find("line 3: token_ids[1] = 99999 is not a token id (0..2047)"), std::string::npos)
      << m;
  EXPECT_NE(m.find("line 5: prompt and completion must both be strings"), std::string::npos) << m;
  EXPECT_NE(m.find("line 6: not a JSON object"), std::string::npos) << m;
  EXPECT_NE(m.find("line 7: needs exactly one of"), std::string::npos) << m;
  // Only the first five are spelled out.
  EXPECT_EQ(m.find("line 8:"), std::string::npos) << m;
  EXPECT_EQ(m.find("line 9:"), std::string::npos) << m;
}

TEST_F(DatasetTest, RefusesTextWithoutTokenizerAndEmptyFiles) {
  options_.tokenizer = nullptr;
  auto data = Load("{\"text\": \"hello\"}\n");
  ASSERT_FALSE(data.ok());
  EXPECT_NE(data.status().message().find("line 1: text needs a tokenizer"), std::string::npos);
  EXPECT_FALSE(Load("\n\n").ok());
  EXPECT_EQ(LoadDataset(&env_, "missing.jsonl", options_).status().code(),
            absl::StatusCode::kNotFound);
}

TEST_F(DatasetTest, TruncatesToMaxSeqLenAndRefusesWhatLeavesNothingToLearn) {
  options_.max_seq_len = 4;
  auto data = Load("{\"token_ids\": [1, 2, 3, 4, 5, 6]}\n");
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(data->examples[0].input_ids, (std::vector<int32_t>{1, 2, 3, 4}));
  EXPECT_EQ(data->truncated, 1);
  auto long_prompt = Load(R"({"prompt": "a b c d e f g h i j", "completion": "k"})");
  ASSERT_FALSE(long_prompt.ok());
  EXPECT_NE(long_prompt.status().message().find("nothing to learn within max_seq_len 4"),
            std::string::npos)
      << long_prompt.status();
}

// A ChatML renderer standing in for a model's template (the real templates
// are tested where the server wires ChatFormatter in).
absl::StatusOr<std::string> ChatMl(const Json& messages, bool add_generation_prompt) {
  std::string out;
  for (const Json& m : messages) {
    out += "<|im_start|>" + m["role"].get<std::string>() + "\n" + m["content"].get<std::string>() +
           "<|im_end|>\n";
  }
  if (add_generation_prompt) out += "<|im_start|>assistant\n";
  return out;
}

std::string LearnedText(const models::Tokenizer& tok, const Example& ex) {
  std::vector<int32_t> learned;
  for (size_t i = 0; i < ex.labels.size(); ++i) {
    if (ex.labels[i] != kIgnoreIndex) learned.push_back(ex.input_ids[i]);
  }
  return *tok.Decode(learned, false);
}

TEST_F(DatasetTest, MessagesLearnOnlyAssistantTurns) {
  options_.chat = ChatMl;
  options_.stop_strings = {"<|im_end|>"};
  options_.max_seq_len = 512;
  auto data = Load(
      R"({"messages": [{"role": "system", "content": "Be brief."},)"
      R"( {"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"},)"
      R"( {"role": "user", "content": "Bye"}, {"role": "assistant", "content": "Goodbye."}]})");
  ASSERT_TRUE(data.ok()) << data.status();
  const Example& ex = data->examples[0];
  EXPECT_EQ(LearnedText(*tokenizer_, ex), "Hello!<|im_end|>Goodbye.<|im_end|>");
  EXPECT_EQ(*tokenizer_->Decode(ex.input_ids, false),
            *ChatMl(Json::parse(R"([{"role": "system", "content": "Be brief."},
                {"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"},
                {"role": "user", "content": "Bye"}, {"role": "assistant", "content": "Goodbye."}])"),
                    false));
}

TEST_F(DatasetTest, MessagesNeedATemplateAndAnAssistantTurn) {
  auto no_template = Load(R"({"messages": [{"role": "assistant", "content": "x"}]})");
  ASSERT_FALSE(no_template.ok());
  EXPECT_NE(no_template.status().message().find("need a chat template"), std::string::npos);
  options_.chat = ChatMl;
  auto no_assistant = Load(R"({"messages": [{"role": "user", "content": "x"}]})");
  ASSERT_FALSE(no_assistant.ok());
  EXPECT_NE(no_assistant.status().message().find("no assistant turn"), std::string::npos);
}

TEST_F(DatasetTest, TemplateThatRewritesContentIsRefused) {
  options_.chat = [](const Json& messages, bool gen) -> absl::StatusOr<std::string> {
    std::string out;
    for (const Json& m : messages) out += m["role"].get<std::string>() + ": [redacted]\n";
    return gen ? out + "assistant: " : out;
  };
  auto data = Load(R"({"messages": [{"role": "user", "content": "a"},)"
                   R"( {"role": "assistant", "content": "b"}]})");
  ASSERT_FALSE(data.ok());
  EXPECT_NE(data.status().message().find("line 1: the chat template"), std::string::npos)
      << data.status();
}

Example Ids(std::vector<int32_t> ids) { return Example{ids, ids}; }

TEST(PackExamplesTest, PacksInOrderAndMasksTheFirstTokenAfterABoundary) {
  const std::vector<Example> rows =
      PackExamples({Ids({1, 2, 3}), Ids({4, 5}), Ids({6, 7, 8, 9}), Ids({10, 11})}, 6);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].input_ids, (std::vector<int32_t>{1, 2, 3, 4, 5}));
  EXPECT_EQ(rows[0].labels, (std::vector<int32_t>{1, 2, 3, kIgnoreIndex, 5}));
  EXPECT_EQ(rows[1].input_ids, (std::vector<int32_t>{6, 7, 8, 9, 10, 11}));
  EXPECT_EQ(rows[1].labels, (std::vector<int32_t>{6, 7, 8, 9, kIgnoreIndex, 11}));
}

TEST(EpochOrderTest, IsAPermutationFixedBySeedAndEpoch) {
  const std::vector<int64_t> a = EpochOrder(100, 7, 0);
  EXPECT_EQ(std::set<int64_t>(a.begin(), a.end()).size(), 100u);
  EXPECT_EQ(a, EpochOrder(100, 7, 0));
  EXPECT_NE(a, EpochOrder(100, 7, 1));
  EXPECT_NE(a, EpochOrder(100, 8, 0));
  // Pinned values: the order must not change across builds and platforms,
  // or resumed jobs would read different data.
  EXPECT_EQ(EpochOrder(8, 42, 3), (std::vector<int64_t>{6, 2, 1, 5, 0, 7, 3, 4}));
}

TEST(DataStreamTest, StepsCoverEveryRowOncePerEpochAndTheCursorResumes) {
  std::vector<Example> examples;
  for (int32_t i = 0; i < 7; ++i) examples.push_back(Ids({i, i + 100, i + 200}));
  DataStreamOptions o;
  o.max_seq_len = 3;  // one example per row
  o.rows_per_micro_batch = 2;
  o.micro_batches_per_step = 2;
  o.seed = 3;
  o.pad_id = 0;
  DataStream stream(examples, o);
  ASSERT_EQ(stream.rows(), 7);
  ASSERT_EQ(stream.steps_per_epoch(), 2);
  DataCursor cursor;
  std::multiset<int32_t> seen;
  std::vector<std::vector<TrainBatch>> steps;
  for (int s = 0; s < 4; ++s) {
    steps.push_back(stream.NextStep(&cursor));
    for (const TrainBatch& b : steps.back()) {
      EXPECT_EQ(b.seq_len, 3);
      for (int64_t r = 0; r < b.batch; ++r) seen.insert(b.input_ids[r * 3]);
    }
  }
  EXPECT_EQ(cursor, (DataCursor{2, 0}));
  EXPECT_EQ(seen.size(), 14u);
  for (int32_t i = 0; i < 7; ++i) EXPECT_EQ(seen.count(i), 2u) << i;
  EXPECT_EQ(steps[1].size(), 2u);  // 3 rows left: a micro-batch of 2 and one of 1
  EXPECT_EQ(steps[1][1].batch, 1);
  // Restarting from a saved cursor gives the same batches.
  DataCursor saved{1, 0};
  const std::vector<TrainBatch> again = stream.NextStep(&saved);
  ASSERT_EQ(again.size(), steps[2].size());
  for (size_t m = 0; m < again.size(); ++m) {
    EXPECT_EQ(again[m].input_ids, steps[2][m].input_ids);
  }
}

TEST(DataStreamTest, PadsShortRowsWithIgnoredLabels) {
  DataStreamOptions o;
  o.max_seq_len = 4;
  o.rows_per_micro_batch = 2;
  o.pad_id = 9;
  DataStream stream({Ids({1, 2, 3, 4}), Ids({5, 6})}, o);
  const std::vector<TrainBatch> all = stream.AllInOrder();
  ASSERT_EQ(all.size(), 1u);
  EXPECT_EQ(all[0].input_ids, (std::vector<int32_t>{1, 2, 3, 4, 5, 6, 9, 9}));
  EXPECT_EQ(all[0].labels, (std::vector<int32_t>{1, 2, 3, 4, 5, 6, kIgnoreIndex, kIgnoreIndex}));
}

}  // namespace
}  // namespace expertd::train
