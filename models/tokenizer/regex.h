// A small backtracking regular-expression engine for the patterns found in
// Hugging Face tokenizer.json files (Split pre-tokenizers, Replace normalizers).
//
// Semantics follow Oniguruma (what HF `tokenizers` uses): leftmost-first
// alternation, greedy quantifiers with backtracking, code-point matching on
// UTF-8 text. Supported syntax:
//   literals, '.', '^', '$', escapes \t \n \r \f \v \xHH \x{H..} \uHHHH and
//   escaped punctuation; classes [...] / [^...] with ranges; \s \S \d \D \w \W;
//   \p{X} / \P{X} / \pX for general categories (L, Lu, ..., N, Nd, ..., P, S, M,
//   Z, C and their long names); groups (...), (?:...), (?i:...), (?i);
//   lookahead (?=...) (?!...); quantifiers ? * + {n} {n,} {n,m} and lazy forms.
// Not supported (compile error naming it): lookbehind, backreferences,
// possessive quantifiers, quantified groups other than '?'.
//
// Thread-safe after Compile(): matching only reads the compiled program.
#ifndef EXPERTD_MODELS_TOKENIZER_REGEX_H_
#define EXPERTD_MODELS_TOKENIZER_REGEX_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace expertd::models {

class FastSplitter;

class Regex {
 public:
  // With allow_fast, the well-known HF pre-tokenizer patterns get a
  // hand-written matcher (fast_split.h) with identical results.
  static absl::StatusOr<std::unique_ptr<Regex>> Compile(absl::string_view pattern,
                                                        bool allow_fast = true);
  ~Regex();

  // Appends the byte ranges [start, end) of all non-empty, non-overlapping
  // matches in `text` (valid UTF-8), scanning left to right.
  void FindAll(absl::string_view text, std::vector<std::pair<size_t, size_t>>* out) const;

  const std::string& pattern() const { return pattern_; }

  // Implementation types, public only so the .cc helpers can name them.
  struct CharSet {
    std::vector<std::pair<char32_t, char32_t>> ranges;
    uint32_t cats = 0;  // general-category mask (unicode::Bit)
    uint8_t props = 0;  // kSpace | kNotSpace | kWord | kNotWord
    bool negated = false;
    uint64_t ascii[2] = {0, 0};  // precomputed membership for code points < 128
    bool MatchSlow(char32_t c) const;
    bool Match(char32_t c) const {
      return c < 128 ? ((ascii[c >> 6] >> (c & 63)) & 1) != 0 : MatchSlow(c);
    }
  };
  enum Prop : uint8_t { kSpace = 1, kNotSpace = 2, kWord = 4, kNotWord = 8 };
  struct Item {
    enum Kind { kSet, kGroup, kLookahead, kNegLookahead, kStart, kEnd } kind;
    int index = 0;         // into sets_ (kSet) or alts_ (groups, lookaheads)
    int min = 1, max = 1;  // max < 0: unbounded
    bool greedy = true;
  };
  struct Seq {
    std::vector<Item> items;
    // Top-level alternatives only: a superset of the ASCII code points a match
    // can start with (all ones when unknown). Lets MatchAt skip alternatives.
    uint64_t first_ascii[2] = {~uint64_t{0}, ~uint64_t{0}};
  };
  struct Alt {
    std::vector<Seq> seqs;
  };

 private:
  friend class RegexParser;
  friend class RegexMatcher;
  Regex() = default;

  std::string pattern_;
  std::unique_ptr<FastSplitter> fast_;  // null unless a known pattern
  std::vector<CharSet> sets_;
  std::vector<Alt> alts_;  // alts_[0] is the whole pattern
};

}  // namespace expertd::models

#endif  // EXPERTD_MODELS_TOKENIZER_REGEX_H_
