// The WordPiece model of tokenizer.json ("model": {"type": "WordPiece"}):
// greedy longest-match-first sub-words with a continuing prefix ("##"); a word
// with an unmatched part, or longer than max_input_chars_per_word chars, is the
// unknown token.
#ifndef EXPERTD_MODELS_TOKENIZER_WORDPIECE_H_
#define EXPERTD_MODELS_TOKENIZER_WORDPIECE_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "models/tokenizer/tokenizer_model.h"
#include "nlohmann/json.hpp"

namespace expertd::models {

class WordPieceModel : public TokenizerModel {
 public:
  static absl::StatusOr<std::unique_ptr<WordPieceModel>> FromJson(const nlohmann::json& model);

  void Encode(absl::string_view piece, std::vector<int32_t>* ids) const override;
  int32_t TokenToId(absl::string_view token) const override;
  const std::string* IdToToken(int32_t id) const override;
  int32_t id_end() const override { return static_cast<int32_t>(id_to_token_.size()); }
  int32_t unk_id() const override { return unk_id_; }

 private:
  WordPieceModel() = default;

  // Constant after construction.
  absl::flat_hash_map<std::string, int32_t> vocab_;
  std::vector<std::string> id_to_token_;
  std::vector<bool> id_present_;
  std::string prefix_ = "##";
  size_t max_chars_ = 100;
  int32_t unk_id_ = -1;
};

}  // namespace expertd::models

#endif  // EXPERTD_MODELS_TOKENIZER_WORDPIECE_H_
