// The `pattern` of Split pre-tokenizers and Replace normalizers/decoders:
// {"String": "literal"} or {"Regex": "..."} in tokenizer.json.
#ifndef EXPERTD_MODELS_TOKENIZER_SPLIT_PATTERN_H_
#define EXPERTD_MODELS_TOKENIZER_SPLIT_PATTERN_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "models/tokenizer/regex.h"
#include "nlohmann/json.hpp"

namespace expertd::models {

class SplitPattern {
 public:
  // Parses {"String": s} or {"Regex": r}; errors name the offending value.
  static absl::StatusOr<SplitPattern> FromJson(const nlohmann::json& j);
  static SplitPattern Literal(std::string s);

  // Appends the byte ranges of the non-empty, non-overlapping matches, left to right.
  void FindAll(absl::string_view text, std::vector<std::pair<size_t, size_t>>* out) const;

  // Replaces every match with `content`.
  std::string ReplaceAll(absl::string_view text, absl::string_view content) const;

 private:
  std::string literal_;
  std::shared_ptr<const Regex> regex_;  // null for a literal
};

}  // namespace expertd::models

#endif  // EXPERTD_MODELS_TOKENIZER_SPLIT_PATTERN_H_
