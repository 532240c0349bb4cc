#include "models/tokenizer/wordpiece.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "models/tokenizer/bpe.h"
#include "models/tokenizer/unicode.h"

namespace expertd::models {

absl::StatusOr<std::unique_ptr<WordPieceModel>> WordPieceModel::FromJson(const nlohmann::json& j) {
  std::unique_ptr<WordPieceModel> m(new WordPieceModel());
  const auto& vocab = j.at("vocab");
  if (!vocab.is_object()) return absl::InvalidArgumentError("WordPiece vocab must be an object");
  int32_t max_id = -1;
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    const int64_t id = JsonTokenId(it.value());
    if (id < 0 || id >= kMaxTokenId) {
      return absl::InvalidArgumentError(
          absl::StrCat("vocab id ", it.value().dump(), " is out of range [0, ", kMaxTokenId, ")"));
    }
    m->vocab_[it.key()] = static_cast<int32_t>(id);
    max_id = std::max<int32_t>(max_id, static_cast<int32_t>(id));
  }
  m->id_to_token_.resize(max_id + 1);
  m->id_present_.resize(max_id + 1);
  for (const auto& kv : m->vocab_) {
    m->id_to_token_[kv.second] = kv.first;
    m->id_present_[kv.second] = true;
  }
  m->prefix_ = j.value("continuing_subword_prefix", std::string("##"));
  // A count from the file: a float or negative number would be undefined
  // behaviour in nlohmann's get<size_t>().
  m->max_chars_ = 100;
  if (auto it = j.find("max_input_chars_per_word"); it != j.end()) {
    if (it->is_number_unsigned()) {
      m->max_chars_ = it->get<uint64_t>();
    } else if (it->is_number_integer() && it->get<int64_t>() >= 0) {
      m->max_chars_ = static_cast<uint64_t>(it->get<int64_t>());
    } else {
      return absl::InvalidArgumentError(
          "WordPiece max_input_chars_per_word: expected a non-negative integer");
    }
  }
  std::string unk = j.value("unk_token", std::string("[UNK]"));
  m->unk_id_ = m->TokenToId(unk);
  if (m->unk_id_ < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("WordPiece unk_token \"", unk, "\" is not in the vocab"));
  }
  return m;
}

int32_t WordPieceModel::TokenToId(absl::string_view token) const {
  auto it = vocab_.find(token);
  return it == vocab_.end() ? -1 : it->second;
}

const std::string* WordPieceModel::IdToToken(int32_t id) const {
  if (id < 0 || id >= id_end() || !id_present_[id]) return nullptr;
  return &id_to_token_[id];
}

// Mirrors HF WordPiece::tokenize.
void WordPieceModel::Encode(absl::string_view word, std::vector<int32_t>* ids) const {
  if (word.empty()) return;
  size_t chars = 0;
  for (unsigned char c : word) chars += (c & 0xC0) != 0x80;
  if (chars > max_chars_) {
    ids->push_back(unk_id_);
    return;
  }
  const size_t first = ids->size();
  std::string candidate;
  for (size_t start = 0; start < word.size();) {
    size_t end = word.size();
    int32_t found = -1;
    while (start < end) {
      candidate.assign(start > 0 ? prefix_ : std::string());
      candidate.append(word.data() + start, end - start);
      found = TokenToId(candidate);
      if (found >= 0) break;
      do {
        --end;  // drop the last char
      } while (end > start && (static_cast<unsigned char>(word[end]) & 0xC0) == 0x80);
    }
    if (found < 0) {
      ids->resize(first);
      ids->push_back(unk_id_);
      return;
    }
    ids->push_back(found);
    start = end;
  }
}

}  // namespace expertd::models
