// Unit tests of the public Tokenizer API beyond the oracle comparison: load
// errors, the invalid-UTF-8 policy, special tokens, bad ids, concurrency.
#include "models/tokenizer/tokenizer.h"

#include <random>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "models/tokenizer/testdata_util.h"
#include "models/tokenizer/unicode.h"
#include "nlohmann/json.hpp"

namespace expertd::models {
namespace {

nlohmann::json Llama2Json() {
  auto text = testdata::TokenizerJson("llama2");
  EXPECT_TRUE(text.ok()) << text.status();
  return nlohmann::json::parse(*text);
}

void ExpectLoadErrorNaming(nlohmann::json j, const std::string& key, nlohmann::json value,
                           const std::string& must_contain) {
  j[key] = std::move(value);
  auto tok = Tokenizer::LoadFromJson(j.dump());
  ASSERT_FALSE(tok.ok()) << key;
  EXPECT_EQ(tok.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(tok.status().message().find(must_contain), std::string::npos) << tok.status();
}

TEST(TokenizerTest, UnknownComponentsAreClearLoadErrors) {
  nlohmann::json base = Llama2Json();
  ExpectLoadErrorNaming(base, "normalizer",
                        {{"type", "Precompiled"}, {"precompiled_charsmap", "x"}},
                        "unsupported normalizer type \"Precompiled\"");
  ExpectLoadErrorNaming(base, "pre_tokenizer", {{"type", "FancySplit"}},
                        "unsupported pre_tokenizer type \"FancySplit\"");
  ExpectLoadErrorNaming(base, "decoder", {{"type", "CTC"}}, "unsupported decoder type \"CTC\"");
  ExpectLoadErrorNaming(base, "post_processor", {{"type", "Bogus"}},
                        "unsupported post_processor type \"Bogus\"");
  nlohmann::json seq = {{"type", "Sequence"},
                        {"normalizers", {{{"type", "NFC"}}, {{"type", "Nope"}}}}};
  ExpectLoadErrorNaming(base, "normalizer", seq, "\"Nope\"");
  nlohmann::json model = base["model"];
  model["type"] = "Unigram";
  ExpectLoadErrorNaming(base, "model", model, "unsupported model type \"Unigram\"");
  nlohmann::json split = {{"type", "Split"},
                          {"pattern", {{"Regex", "(?<=x)y"}}},
                          {"behavior", "Isolated"},
                          {"invert", false}};
  ExpectLoadErrorNaming(base, "pre_tokenizer", split, "lookbehind");
}

TEST(TokenizerTest, BadFilesAndJson) {
  EXPECT_EQ(Tokenizer::LoadFromFile("/nonexistent/tokenizer.json").status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(Tokenizer::LoadFromJson("{not json").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Tokenizer::LoadFromJson("{}").status().code(), absl::StatusCode::kInvalidArgument);
  auto bad_vocab =
      Tokenizer::LoadFromJson(R"({"model": {"type": "BPE", "vocab": [], "merges": []}})");
  EXPECT_FALSE(bad_vocab.ok());
  auto huge_id = Tokenizer::LoadFromJson(
      R"({"model": {"type": "BPE", "vocab": {"a": 2000000000}, "merges": []}})");
  ASSERT_FALSE(huge_id.ok());
  EXPECT_NE(huge_id.status().message().find("out of range"), std::string::npos) << huge_id.status();
  auto bad_merge = Tokenizer::LoadFromJson(
      R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": ["a b"]}})");
  ASSERT_FALSE(bad_merge.ok());
  EXPECT_NE(bad_merge.status().message().find("a b"), std::string::npos) << bad_merge.status();
  auto tiny = Tokenizer::LoadFromJson(
      R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": [["a", "b"]]},
          "added_tokens": [{"id": 3, "content": "<x>", "special": true}]})");
  ASSERT_TRUE(tiny.ok()) << tiny.status();
  EXPECT_EQ((*tiny)->Encode("ab<x>ba", false).value(), (std::vector<int32_t>{2, 3, 1, 0}));
  EXPECT_EQ((*tiny)->Decode({2, 3, 1}, false).value(), "ab <x> b");  // no decoder: joined by spaces
}

TEST(TokenizerTest, InvalidUtf8IsEncodedAsReplacementCharacters) {
  for (const std::string name : {"llama3", "llama2"}) {
    auto tok = testdata::Load(name);
    ASSERT_TRUE(tok.ok()) << tok.status();
    auto raw = (*tok)->Encode("abc\xC3(def \xE4\xB8", false);
    auto replaced = (*tok)->Encode("abc\xEF\xBF\xBD(def \xEF\xBF\xBD", false);
    ASSERT_TRUE(raw.ok() && replaced.ok());
    EXPECT_EQ(*raw, *replaced) << name;
    EXPECT_FALSE(raw->empty());
  }
}

TEST(TokenizerTest, SpecialTokensAndWellKnownIds) {
  auto llama2 = testdata::Load("llama2");
  ASSERT_TRUE(llama2.ok());
  const Tokenizer& t = **llama2;
  EXPECT_EQ(t.vocab_size(), 32000);
  EXPECT_EQ(t.bos_id(), absl::optional<int32_t>(1));
  EXPECT_EQ(t.eos_id(), absl::optional<int32_t>(2));
  EXPECT_EQ(t.unk_id(), absl::optional<int32_t>(0));
  EXPECT_TRUE(t.IsSpecial(1));
  EXPECT_FALSE(t.IsSpecial(500));
  std::vector<SpecialToken> specials = t.special_tokens();
  ASSERT_EQ(specials.size(), 3u);
  EXPECT_EQ(specials[1].content, "<s>");
  auto with = t.Encode("Hello", true);
  auto without = t.Encode("Hello", false);
  ASSERT_TRUE(with.ok() && without.ok());
  EXPECT_EQ(with->front(), 1);
  EXPECT_EQ(with->size(), without->size() + 1);
  // Special-token text in the input is matched before the model.
  auto in_text = t.Encode("<s>Hello", false);
  ASSERT_TRUE(in_text.ok());
  EXPECT_EQ(in_text->front(), 1);

  auto llama3 = testdata::Load("llama3");
  ASSERT_TRUE(llama3.ok());
  EXPECT_EQ((*llama3)->bos_id(), absl::optional<int32_t>(128000));
  EXPECT_EQ((*llama3)->eos_id(), absl::optional<int32_t>(128001));
  EXPECT_EQ((*llama3)->vocab_size(), 128256);
  EXPECT_EQ((*llama3)->special_tokens().size(), 256u);
  EXPECT_EQ((*llama3)->TokenToId("<|eot_id|>"), 128009);
}

TEST(TokenizerTest, DecodeRejectsUnknownIds) {
  auto tok = testdata::Load("gpt2");
  ASSERT_TRUE(tok.ok());
  EXPECT_EQ((*tok)->Decode({15496, 50257}, false).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*tok)->Decode({-1}, false).status().code(), absl::StatusCode::kInvalidArgument);
  auto ok = (*tok)->Decode({15496, 50256}, true);
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(*ok, "Hello");
}

TEST(TokenizerTest, RoundTripsValidText) {
  auto tok = testdata::Load("llama3");
  ASSERT_TRUE(tok.ok());
  const std::string text = "Round trip: 中文, emoji \xF0\x9F\x98\x80, tabs\t\tand  spaces\n";
  auto ids = (*tok)->Encode(text, true);
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ((*tok)->Decode(*ids, true).value(), text);
}

// Byte-level tokenizers without a normalizer are lossless on valid UTF-8, so
// Decode(Encode(bytes)) must give back the input with invalid sequences replaced.
TEST(TokenizerTest, RandomBytesRoundTripThroughReplacement) {
  std::mt19937 rng(3);
  const char* pieces[] = {"a",
                          " ",
                          "  ",
                          "\n",
                          "\t",
                          "\xC3\xA9",
                          "\xE4\xB8\xAD",
                          "\xF0\x9F\x98\x80",
                          "1",
                          "'s",
                          "<|",
                          "|>",
                          "\xFF",
                          "\xC3",
                          "\xE4\xB8",
                          "\x80",
                          "\xED\xA0\x80",
                          "<|endoftext|>",
                          "\r\n",
                          "."};
  for (const std::string name : {"llama3", "gpt2", "deepseek_v3"}) {
    auto tok = testdata::Load(name);
    ASSERT_TRUE(tok.ok()) << tok.status();
    for (int trial = 0; trial < 300; ++trial) {
      std::string in;
      for (int i = rng() % 30; i > 0; --i)
        in += pieces[rng() % (sizeof(pieces) / sizeof(pieces[0]))];
      auto ids = (*tok)->Encode(in, false);
      ASSERT_TRUE(ids.ok());
      auto out = (*tok)->Decode(*ids, false);
      ASSERT_TRUE(out.ok());
      EXPECT_EQ(*out, unicode::SanitizeUtf8(in)) << name;
      auto again = (*tok)->Encode(*out, false);
      ASSERT_TRUE(again.ok());
      EXPECT_EQ(*again, *ids) << name << " [" << in << "]";
      EXPECT_EQ(out->find("\xFF"), std::string::npos);
    }
  }
}

TEST(TokenizerTest, ConcurrentEncodeMatchesSerial) {
  auto tok = testdata::Load("llama3");
  ASSERT_TRUE(tok.ok());
  auto text = testdata::BenchmarkText(64 << 10);
  ASSERT_TRUE(text.ok());
  std::vector<int32_t> want = (*tok)->Encode(*text, false).value();
  std::vector<std::vector<int32_t>> got(4);
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&, i] { got[i] = (*tok)->Encode(*text, false).value(); });
  }
  for (auto& th : threads) th.join();
  for (const auto& g : got) EXPECT_EQ(g, want);
}

}  // namespace
}  // namespace expertd::models
