// Hand-written matchers for the pre-tokenizer regexes that nearly every
// byte-level BPE tokenizer.json uses (GPT-2 / OLMoE, Llama-3, Qwen2/Qwen3).
// Regex::Compile selects one when the pattern text is exactly one of these;
// regex_test checks them against the general engine on random strings.
#ifndef EXPERTD_MODELS_TOKENIZER_FAST_SPLIT_H_
#define EXPERTD_MODELS_TOKENIZER_FAST_SPLIT_H_

#include <cstddef>
#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"

namespace expertd::models {

class FastSplitter {
 public:
  // nullptr when `pattern` is not one of the known patterns.
  static std::unique_ptr<FastSplitter> ForPattern(absl::string_view pattern);

  // Same contract as Regex::FindAll.
  void FindAll(absl::string_view text, std::vector<std::pair<size_t, size_t>>* out) const;

  struct Flavor {
    bool icase_contractions;  // (?i:'s|...) rather than 's|...
    bool any_letter_prefix;   // [^\r\n\p{L}\p{N}]?\p{L}+ rather than ' ?\p{L}+'
    int max_digits;           // \p{N}{1,max}; -1: ' ?\p{N}+'
    bool newline_rules;       // ' ?[^\s\p{L}\p{N}]+[\r\n]*' and '\s*[\r\n]+'
  };
  explicit FastSplitter(Flavor f) : f_(f) {}

 private:
  size_t MatchAt(const char32_t* cp, const unsigned char* cls, size_t n, size_t i) const;
  Flavor f_;
};

}  // namespace expertd::models

#endif  // EXPERTD_MODELS_TOKENIZER_FAST_SPLIT_H_
