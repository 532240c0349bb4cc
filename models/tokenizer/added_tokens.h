// Added-token matching: finds added/special tokens in text before the model
// runs, with HF AddedVocabulary semantics (leftmost-longest matching, then the
// single_word / lstrip / rstrip options of each token).
#ifndef EXPERTD_MODELS_TOKENIZER_ADDED_TOKENS_H_
#define EXPERTD_MODELS_TOKENIZER_ADDED_TOKENS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"

namespace expertd::models {

struct AddedToken {
  int32_t id = 0;
  std::string content;
  bool special = false;
  bool single_word = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = false;
};

// A piece of input: either a matched token (id >= 0) or text to tokenize.
struct Segment {
  int32_t id;         // -1 for text
  size_t begin, end;  // byte range in the matched string
};

class AddedTokenMatcher {
 public:
  // `pattern` is what `token` looks like in the searched text: its content,
  // or the normalized content for normalized tokens. Empty patterns are ignored.
  void Add(std::string pattern, const AddedToken& token);
  bool empty() const { return entries_.empty(); }

  // Splits `text` into token and text segments covering it (empty text
  // segments are omitted). Thread-safe (const).
  void Split(absl::string_view text, std::vector<Segment>* out) const;

 private:
  struct Entry {
    std::string pattern;
    AddedToken token;
  };
  // Longest entry matching at text[pos], or -1.
  int LongestAt(absl::string_view text, size_t pos) const;

  std::vector<Entry> entries_;
  // Byte trie over the patterns: node 0 is the root; edges keyed by
  // (node << 8 | byte); terminal_[node] is the entry ending there or -1.
  absl::flat_hash_map<uint64_t, int32_t> edges_;
  std::vector<int32_t> terminal_ = {-1};
  bool first_byte_[256] = {};
};

}  // namespace expertd::models

#endif  // EXPERTD_MODELS_TOKENIZER_ADDED_TOKENS_H_
