#include "models/zoo/bpe_trainer.h"

#include <map>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "models/zoo/byte_level.h"
#include "models/zoo/corpus.h"
#include "models/zoo/zoo_tokenizer.h"
#include "nlohmann/json.hpp"

namespace expertd::models::zoo {
namespace {

using Pieces = std::vector<std::string>;

TEST(ByteLevelTest, MapsBytesLikeGpt2) {
  EXPECT_EQ(ByteToUnicode(' '), "\xc4\xa0");   // U+0120 'Ġ'
  EXPECT_EQ(ByteToUnicode('\n'), "\xc4\x8a");  // U+010A 'Ċ'
  EXPECT_EQ(ByteToUnicode(0), "\xc4\x80");     // U+0100
  EXPECT_EQ(ByteToUnicode('a'), "a");
  EXPECT_EQ(ByteToUnicode(0xad), "\xc5\x83");  // U+0143, the last remapped byte
  EXPECT_EQ(ByteToUnicode(0xe9), "\xc3\xa9");  // printable Latin-1 maps to itself
  std::map<std::string, int> seen;
  for (int b = 0; b < 256; ++b) EXPECT_EQ(seen[ByteToUnicode(static_cast<uint8_t>(b))]++, 0) << b;
  EXPECT_EQ(ToByteLevel("a b"),
            "a\xc4\xa0"
            "b");
}

TEST(ByteLevelTest, SplitsLikeTheGpt2Regex) {
  EXPECT_EQ(SplitGpt2("Hello world"), (Pieces{"Hello", " world"}));
  EXPECT_EQ(SplitGpt2("don't stop"), (Pieces{"don", "'t", " stop"}));
  EXPECT_EQ(SplitGpt2("we'll see"), (Pieces{"we", "'ll", " see"}));
  EXPECT_EQ(SplitGpt2("It costs 4.20!"), (Pieces{"It", " costs", " 4", ".", "20", "!"}));
  EXPECT_EQ(SplitGpt2("a  b"), (Pieces{"a", " ", " b"}));
  EXPECT_EQ(SplitGpt2("end.  "), (Pieces{"end", ".", "  "}));
  EXPECT_EQ(SplitGpt2("x\n\ny"), (Pieces{"x", "\n", "\n", "y"}));
  EXPECT_EQ(SplitGpt2("x\n\n y"), (Pieces{"x", "\n\n", " y"}));
  EXPECT_EQ(SplitGpt2("say \"hi\""), (Pieces{"say", " \"", "hi", "\""}));
  EXPECT_EQ(SplitGpt2("'hello"), (Pieces{"'", "hello"}));
  EXPECT_EQ(SplitGpt2(""), Pieces{});
}

TEST(BpeTrainerTest, LearnsTheMostFrequentPairsFirst) {
  auto v = TrainByteLevelBpe("ab ab ab ab cd cd", 259);
  ASSERT_TRUE(v.ok()) << v.status();
  ASSERT_EQ(v->tokens.size(), 259u);
  ASSERT_EQ(v->merges.size(), 3u);
  // Counts: "Ġa"(3) "ab"(4) "Ġab"... the first merge is the most frequent pair, "a b".
  EXPECT_EQ(v->merges[0], std::make_pair(std::string("a"), std::string("b")));
  EXPECT_EQ(v->tokens[256], "ab");
  EXPECT_EQ(v->merges[1], std::make_pair(std::string("\xc4\xa0"), std::string("ab")));
  EXPECT_EQ(v->tokens[257],
            "\xc4\xa0"
            "ab");
}

TEST(BpeTrainerTest, IsDeterministicAndReportsExhaustion) {
  auto a = TrainByteLevelBpe(TrainingCorpus(), 600);
  auto b = TrainByteLevelBpe(TrainingCorpus(), 600);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->tokens, b->tokens);
  EXPECT_EQ(a->merges, b->merges);
  auto small = TrainByteLevelBpe("abc", 1000);
  EXPECT_EQ(small.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_FALSE(TrainByteLevelBpe("abc", 10).ok());
}

// Applies the merges by rank to one pre-token (the BPE algorithm of
// Hugging Face's BPE model), returning token strings.
using Ranks = std::map<std::pair<std::string, std::string>, size_t>;

Ranks MergeRanks(const BpeVocab& v) {
  Ranks rank;
  for (size_t i = 0; i < v.merges.size(); ++i) rank.emplace(v.merges[i], i);
  return rank;
}

std::vector<std::string> Encode(const Ranks& rank, const std::string& piece) {
  std::vector<std::string> syms;
  for (unsigned char c : piece) syms.push_back(ByteToUnicode(c));
  while (syms.size() > 1) {
    size_t best = SIZE_MAX, at = 0;
    for (size_t i = 0; i + 1 < syms.size(); ++i) {
      auto it = rank.find({syms[i], syms[i + 1]});
      if (it != rank.end() && it->second < best) best = it->second, at = i;
    }
    if (best == SIZE_MAX) break;
    syms[at] += syms[at + 1];
    syms.erase(syms.begin() + at + 1);
  }
  return syms;
}

TEST(ZooTokenizerTest, CommonEnglishWordsAreSingleTokens) {
  auto t = BuildZooTokenizer(2048);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->vocab_size(), 2048);
  const Ranks ranks = MergeRanks(t->bpe);
  for (const char* word : {" the", " and", " of", " morning", " world", "The", " is"}) {
    EXPECT_EQ(Encode(ranks, word).size(), 1u) << word;
  }
  // The corpus compresses to well over 3 bytes per token.
  size_t tokens = 0;
  for (const std::string& piece : SplitGpt2(TrainingCorpus()))
    tokens += Encode(ranks, piece).size();
  EXPECT_GT(static_cast<double>(TrainingCorpus().size()) / tokens, 3.0);
}

TEST(ZooTokenizerTest, TokenizerJsonHasTheHuggingFaceStructure) {
  auto t = BuildZooTokenizer(700);
  ASSERT_TRUE(t.ok()) << t.status();
  nlohmann::json j = nlohmann::json::parse(TokenizerJson(*t), nullptr, false);
  ASSERT_FALSE(j.is_discarded());
  EXPECT_EQ(j["version"], "1.0");
  EXPECT_TRUE(j["normalizer"].is_null());
  EXPECT_TRUE(j["post_processor"].is_null());
  EXPECT_EQ(j["pre_tokenizer"]["type"], "ByteLevel");
  EXPECT_EQ(j["pre_tokenizer"]["use_regex"], true);
  EXPECT_EQ(j["pre_tokenizer"]["add_prefix_space"], false);
  EXPECT_EQ(j["decoder"]["type"], "ByteLevel");
  const nlohmann::json& model = j["model"];
  EXPECT_EQ(model["type"], "BPE");
  EXPECT_EQ(model["byte_fallback"], false);
  EXPECT_TRUE(model["unk_token"].is_null());
  // Vocab: ids exactly 0..699, specials where the config expects them.
  const nlohmann::json& vocab = model["vocab"];
  ASSERT_EQ(vocab.size(), 700u);
  std::vector<int> seen(700, 0);
  for (const auto& [token, id] : vocab.items()) ++seen.at(id.get<int>());
  for (int c : seen) EXPECT_EQ(c, 1);
  EXPECT_EQ(vocab["<|endoftext|>"], kZooPadId);
  EXPECT_EQ(vocab["<s>"], kZooBosId);
  EXPECT_EQ(vocab["</s>"], kZooEosId);
  EXPECT_EQ(vocab["\xc4\xa0"], kZooNumSpecial + ' ');
  ASSERT_EQ(j["added_tokens"].size(), 3u);
  for (const nlohmann::json& a : j["added_tokens"]) {
    EXPECT_EQ(vocab[a["content"].get<std::string>()], a["id"]);
    EXPECT_EQ(a["special"], true);
  }
  // Every merge joins two vocab tokens into a vocab token.
  ASSERT_EQ(model["merges"].size(), t->bpe.merges.size());
  for (const nlohmann::json& m : model["merges"]) {
    const std::string s = m.get<std::string>();
    const size_t sp = s.find(' ');
    ASSERT_NE(sp, std::string::npos) << s;
    EXPECT_TRUE(vocab.contains(s.substr(0, sp))) << s;
    EXPECT_TRUE(vocab.contains(s.substr(sp + 1))) << s;
    EXPECT_TRUE(vocab.contains(s.substr(0, sp) + s.substr(sp + 1))) << s;
  }
  EXPECT_EQ(TokenizerJson(*t), TokenizerJson(*BuildZooTokenizer(700)));
}

TEST(ZooTokenizerTest, RejectsImpossibleSizes) {
  EXPECT_EQ(BuildZooTokenizer(258).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(BuildZooTokenizer(100000).status().code(), absl::StatusCode::kFailedPrecondition);
  nlohmann::json cfg = nlohmann::json::parse(TokenizerConfigJson(*BuildZooTokenizer(300), 512));
  EXPECT_EQ(cfg["eos_token"], "</s>");
  EXPECT_EQ(cfg["model_max_length"], 512);
}

}  // namespace
}  // namespace expertd::models::zoo
