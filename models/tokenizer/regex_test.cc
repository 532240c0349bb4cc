#include "models/tokenizer/regex.h"

#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace expertd::models {
namespace {

const char kLlama3[] =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

std::vector<std::string> Split(const std::string& pattern, const std::string& text) {
  auto re = Regex::Compile(pattern);
  EXPECT_TRUE(re.ok()) << re.status();
  if (!re.ok()) return {};
  std::vector<std::pair<size_t, size_t>> m;
  (*re)->FindAll(text, &m);
  std::vector<std::string> out;
  for (const auto& r : m) out.push_back(text.substr(r.first, r.second - r.first));
  return out;
}

using V = std::vector<std::string>;

TEST(RegexTest, Llama3Pattern) {
  EXPECT_EQ(Split(kLlama3, "Hello world"), (V{"Hello", " world"}));
  EXPECT_EQ(Split(kLlama3, "I'm HE'S"), (V{"I", "'m", " HE", "'S"}));
  EXPECT_EQ(Split(kLlama3, "1234567"), (V{"123", "456", "7"}));
  EXPECT_EQ(Split(kLlama3, "a   b"), (V{"a", "  ", " b"}));
  EXPECT_EQ(Split(kLlama3, "x\n\n  y"), (V{"x", "\n\n", " ", " y"}));
  EXPECT_EQ(Split(kLlama3, "f(x);\n"), (V{"f", "(x", ");\n"}));
  EXPECT_EQ(Split(kLlama3, "trailing   "), (V{"trailing", "   "}));
  EXPECT_EQ(Split(kLlama3, "\xE4\xB8\xAD\xE6\x96\x87 ok"), (V{"\xE4\xB8\xAD\xE6\x96\x87", " ok"}));
}

TEST(RegexTest, CaseInsensitiveGroupIncludesLongS) {
  EXPECT_EQ(Split("(?i:'s)", "'s 'S '\xC5\xBF 't"), (V{"'s", "'S", "'\xC5\xBF"}));
}

TEST(RegexTest, ClassesRangesAndQuantifiers) {
  EXPECT_EQ(Split("[A-Za-z]+", "ab1CD"), (V{"ab", "CD"}));
  EXPECT_EQ(Split("[^a-c]+", "abxyzc"), (V{"xyz"}));
  EXPECT_EQ(Split("[\\-.]", "a-b.c"), (V{"-", "."}));
  EXPECT_EQ(Split("a{2}", "aaaaa"), (V{"aa", "aa"}));
  EXPECT_EQ(Split("a{2,}", "a aaa"), (V{"aaa"}));
  EXPECT_EQ(Split("a+?", "aaa"), (V{"a", "a", "a"}));
  EXPECT_EQ(Split("\\p{N}", "x\xD9\xA3y"), (V{"\xD9\xA3"}));  // Arabic-Indic three
  EXPECT_EQ(Split("[\\u4e00-\\u9fa5]+", "ab\xE4\xB8\xAD\xE6\x96\x87z"),
            (V{"\xE4\xB8\xAD\xE6\x96\x87"}));
  EXPECT_EQ(Split("\\s+(?!\\S)", "a  b"), (V{" "}));
  EXPECT_EQ(Split("b(?=c)", "bbc"), (V{"b"}));
  EXPECT_EQ(Split("^a|b$", "aab"), (V{"a", "b"}));
  EXPECT_EQ(Split("x(?:ab)?y", "xy xaby"), (V{"xy", "xaby"}));
}

TEST(RegexTest, UnsupportedSyntaxIsAnErrorNamingIt) {
  auto r = Regex::Compile("(?<=a)b");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("unsupported"), std::string::npos) << r.status();
  r = Regex::Compile("\\p{Greek}");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("Greek"), std::string::npos) << r.status();
  EXPECT_FALSE(Regex::Compile("(ab)+").ok());
  EXPECT_FALSE(Regex::Compile("a++").ok());
  EXPECT_FALSE(Regex::Compile("(a").ok());
  EXPECT_FALSE(Regex::Compile("a)").ok());
  EXPECT_FALSE(Regex::Compile("[a-").ok());
  EXPECT_FALSE(Regex::Compile("\\1").ok());
}

// The hand-written matchers (fast_split.cc) must agree with the general engine.
TEST(RegexTest, FastSplittersMatchGeneralEngine) {
  const char* kPatterns[] = {
      R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)",
      kLlama3,
      R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)",
  };
  const char* kPool[] = {"a",        "Z",
                         "\xC3\xA9", "\xE4\xB8\xAD",
                         "1",        "\xD9\xA3",
                         "\xC2\xBD", " ",
                         " ",        "  ",
                         "\t",       "\n",
                         "\r",       "\r\n",
                         "\xC2\xA0", "\xE3\x80\x80",
                         "'",        "'s",
                         "'S",       "'re",
                         "'LL",      "'\xC5\xBF",
                         ".",        "(",
                         ")",        "-",
                         "_",        "\xF0\x9F\x98\x80",
                         "\xCC\x81", "\xE2\x80\x8B",
                         "\x0B",     "\x1C"};
  std::mt19937 rng(7);
  for (const char* pattern : kPatterns) {
    auto fast = Regex::Compile(pattern, true);
    auto slow = Regex::Compile(pattern, false);
    ASSERT_TRUE(fast.ok() && slow.ok());
    for (int trial = 0; trial < 3000; ++trial) {
      std::string text;
      int len = rng() % 24;
      for (int i = 0; i < len; ++i) text += kPool[rng() % (sizeof(kPool) / sizeof(kPool[0]))];
      std::vector<std::pair<size_t, size_t>> a, b;
      (*fast)->FindAll(text, &a);
      (*slow)->FindAll(text, &b);
      ASSERT_EQ(a, b) << "pattern " << pattern << " text [" << text << "]";
    }
  }
}

}  // namespace
}  // namespace expertd::models
