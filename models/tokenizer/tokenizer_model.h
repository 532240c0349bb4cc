// The `model` of a tokenizer.json: maps one pre-token to ids. Implemented by
// BpeModel (bpe.h) and WordPieceModel (wordpiece.h).
#ifndef EXPERTD_MODELS_TOKENIZER_TOKENIZER_MODEL_H_
#define EXPERTD_MODELS_TOKENIZER_TOKENIZER_MODEL_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace expertd::models {

class TokenizerModel {
 public:
  virtual ~TokenizerModel() = default;
  // Appends the ids of one pre-token (an empty piece yields nothing).
  // Thread-safe.
  virtual void Encode(absl::string_view piece, std::vector<int32_t>* ids) const = 0;
  // -1 when absent.
  virtual int32_t TokenToId(absl::string_view token) const = 0;
  // nullptr when absent.
  virtual const std::string* IdToToken(int32_t id) const = 0;
  // One past the largest id in the vocab.
  virtual int32_t id_end() const = 0;
  // -1 when the model has no unknown token.
  virtual int32_t unk_id() const = 0;
};

}  // namespace expertd::models

#endif  // EXPERTD_MODELS_TOKENIZER_TOKENIZER_MODEL_H_
