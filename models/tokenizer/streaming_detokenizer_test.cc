// Property tests of StreamingDetokenizer on every oracle tokenizer: the deltas
// concatenate to the full decode, every emitted prefix is a prefix of it (so no
// delta holds a U+FFFD that the full decode does not), and deltas are whole
// UTF-8 characters.
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "models/tokenizer/testdata_util.h"
#include "models/tokenizer/tokenizer.h"

namespace expertd::models {
namespace {

bool ValidUtf8(const std::string& s) {
  for (size_t i = 0; i < s.size();) {
    unsigned char c = s[i];
    size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    for (size_t k = 1; k < n; ++k) {
      if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return false;
    }
    i += n;
  }
  return true;
}

// Streams `ids` and checks the properties; returns the number of deltas.
void CheckStream(const Tokenizer& tok, const std::vector<int32_t>& ids, bool skip,
                 const std::string& what) {
  std::string full = tok.Decode(ids, skip).value();
  StreamingDetokenizer stream(&tok, skip);
  std::string so_far;
  for (size_t i = 0; i < ids.size(); ++i) {
    auto delta = stream.Push(ids[i]);
    ASSERT_TRUE(delta.ok()) << delta.status();
    ASSERT_TRUE(ValidUtf8(*delta)) << what << " token " << i;
    so_far += *delta;
    ASSERT_EQ(full.compare(0, so_far.size(), so_far), 0)
        << what << ": emitted text is not a prefix of the full decode after token " << i;
  }
  so_far += stream.Flush();
  EXPECT_EQ(so_far, full) << what;
}

class StreamingTest : public ::testing::TestWithParam<std::string> {};

TEST_P(StreamingTest, RandomIdSequences) {
  auto tok = testdata::Load(GetParam());
  ASSERT_TRUE(tok.ok()) << tok.status();
  std::mt19937 rng(42);
  const int32_t n = (*tok)->vocab_size();
  std::vector<int32_t> specials;
  for (const auto& s : (*tok)->special_tokens()) specials.push_back(s.id);
  for (int trial = 0; trial < 150; ++trial) {
    std::vector<int32_t> ids;
    int len = 1 + rng() % 60;
    while (static_cast<int>(ids.size()) < len) {
      int kind = rng() % 10;
      int32_t id = kind < 4 ? static_cast<int32_t>(rng() % 300)  // byte / byte-fallback tokens
                   : kind == 4 && !specials.empty() ? specials[rng() % specials.size()]
                                                    : static_cast<int32_t>(rng() % n);
      if ((*tok)->IsValidId(id)) ids.push_back(id);
    }
    CheckStream(**tok, ids, trial % 2 == 0, GetParam() + " trial " + std::to_string(trial));
    if (HasFatalFailure()) return;
  }
}

TEST_P(StreamingTest, CorpusTextsHaveNoSpuriousReplacementChars) {
  auto tok = testdata::Load(GetParam());
  ASSERT_TRUE(tok.ok()) << tok.status();
  auto corpus = testdata::ReadJsonl(testdata::Dir() + "/corpus.jsonl");
  ASSERT_TRUE(corpus.ok());
  int checked = 0;
  for (const auto& e : *corpus) {
    auto ids = (*tok)->Encode(testdata::CorpusInput(e), true);
    ASSERT_TRUE(ids.ok());
    CheckStream(**tok, *ids, false, GetParam() + " " + e["name"].get<std::string>());
    if (HasFatalFailure()) return;
    ++checked;
  }
  EXPECT_GT(checked, 100);
}

TEST(StreamingDetokenizerTest, HoldsBackIncompleteCharacters) {
  auto tok = testdata::Load("llama3");
  ASSERT_TRUE(tok.ok());
  // "😀" is several byte-level tokens in Llama-3 when preceded by text that
  // stops it from being one token; find its ids and check nothing is emitted
  // until the character is complete.
  std::vector<int32_t> ids = (*tok)->Encode("\xF0\x9F\x98\x80\xF0\x9F\xA7\xAC", false).value();
  ASSERT_GT(ids.size(), 1u);
  StreamingDetokenizer stream(tok->get(), false);
  std::string out;
  for (int32_t id : ids) {
    std::string d = stream.Push(id).value();
    EXPECT_EQ(d.find("\xEF\xBF\xBD"), std::string::npos);
    out += d;
  }
  out += stream.Flush();
  EXPECT_EQ(out, "\xF0\x9F\x98\x80\xF0\x9F\xA7\xAC");
  EXPECT_EQ(stream.Push(-5).status().code(), absl::StatusCode::kInvalidArgument);
}

INSTANTIATE_TEST_SUITE_P(AllTokenizers, StreamingTest,
                         ::testing::ValuesIn(testdata::TokenizerNames()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.param;
                         });

}  // namespace
}  // namespace expertd::models
