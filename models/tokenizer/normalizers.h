// Normalizers of tokenizer.json ("normalizer"): NFC, NFD, NFKC, NFKD,
// Lowercase, Prepend, Replace, Strip, StripAccents, BertNormalizer and Sequence.
#ifndef EXPERTD_MODELS_TOKENIZER_NORMALIZERS_H_
#define EXPERTD_MODELS_TOKENIZER_NORMALIZERS_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace expertd::models {

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  // Rewrites *text (valid UTF-8) in place. Thread-safe (const, stateless).
  virtual void Normalize(std::string* text) const = 0;
};

// Builds the normalizer described by `j`; null JSON or an empty Sequence
// yields nullptr (no normalizer). An unknown "type" is an InvalidArgument error
// naming it.
absl::StatusOr<std::unique_ptr<Normalizer>> ParseNormalizer(const nlohmann::json& j);

}  // namespace expertd::models

#endif  // EXPERTD_MODELS_TOKENIZER_NORMALIZERS_H_
