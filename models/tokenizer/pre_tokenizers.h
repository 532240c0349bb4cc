// Pre-tokenizers of tokenizer.json ("pre_tokenizer"): ByteLevel, Split,
// Sequence, Metaspace, Digits, Whitespace, WhitespaceSplit, Punctuation and
// BertPreTokenizer.
//
// ByteLevel's byte-to-unicode alphabet is not applied here: when the chain ends
// with ByteLevel, ParsePreTokenizer reports byte_level = true and the BPE model
// maps bytes itself (which saves building the mapped strings).
#ifndef EXPERTD_MODELS_TOKENIZER_PRE_TOKENIZERS_H_
#define EXPERTD_MODELS_TOKENIZER_PRE_TOKENIZERS_H_

#include <deque>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"

namespace expertd::models {

struct PreToken {
  absl::string_view text;
  // True when the piece starts at offset 0 of the caller's input (Metaspace
  // prepend_scheme "first" only prepends there).
  bool at_start = false;
};

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Splits or rewrites *pieces. Rewritten text is owned by *arena, which must
  // outlive the pieces. Thread-safe (const, stateless).
  virtual void PreTokenize(std::vector<PreToken>* pieces, std::deque<std::string>* arena) const = 0;
};

// How a Split keeps its matches (HF SplitDelimiterBehavior).
enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

// Splits one piece at `matches` (byte ranges inside piece.text) and appends the
// non-empty results to *out.
void SplitPiece(const PreToken& piece, const std::vector<std::pair<size_t, size_t>>& matches,
                SplitBehavior behavior, bool invert, std::vector<PreToken>* out);

// Null JSON yields nullptr. *byte_level is set when the chain ends with ByteLevel.
// Unknown types are InvalidArgument errors naming the type.
absl::StatusOr<std::unique_ptr<PreTokenizer>> ParsePreTokenizer(const nlohmann::json& j,
                                                                bool* byte_level);

}  // namespace expertd::models

#endif  // EXPERTD_MODELS_TOKENIZER_PRE_TOKENIZERS_H_
