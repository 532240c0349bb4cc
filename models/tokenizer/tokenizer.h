// Tokenizer: loads a Hugging Face tokenizer.json and encodes/decodes exactly as
// Hugging Face `tokenizers` does (verified against its Node binding by
// tokenizer_oracle_test). See docs/tokenizer.md for what is supported.
//
// Pipeline of Encode (HF order): added/special tokens are matched on the raw
// text; each remaining piece is normalized, normalized added tokens are
// matched, the pre-tokenizer splits it, the model (BPE) maps each pre-token to
// ids; with add_special_tokens the post-processor adds BOS/EOS etc.
//
// Thread safety: a loaded Tokenizer is immutable apart from an internally
// synchronized word cache; Encode/Decode may be called concurrently.
#ifndef EXPERTD_MODELS_TOKENIZER_TOKENIZER_H_
#define EXPERTD_MODELS_TOKENIZER_TOKENIZER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/optional.h"
#include "absl/types/span.h"
#include "nlohmann/json_fwd.hpp"

namespace expertd::models {

class Normalizer;
class PreTokenizer;
class TokenizerModel;
class Decoder;
class AddedTokenMatcher;
class PostProcessor;
struct AddedToken;

struct SpecialToken {
  int32_t id;
  std::string content;
};

class Tokenizer {
 public:
  // Errors: NotFound (no file), InvalidArgument (bad JSON, or an unsupported
  // component; the message names it, e.g. `unsupported pre_tokenizer type "X"`).
  static absl::StatusOr<std::unique_ptr<Tokenizer>> LoadFromFile(const std::string& path);
  static absl::StatusOr<std::unique_ptr<Tokenizer>> LoadFromJson(absl::string_view json);
  ~Tokenizer();

  // Encodes UTF-8 text. Invalid UTF-8 is not an error: each maximal invalid
  // subsequence is replaced by U+FFFD first (what Rust's from_utf8_lossy and
  // JavaScript's TextDecoder do), then the text is encoded as HF would encode
  // that string. add_special_tokens applies the post-processor (e.g. BOS).
  // Errors: InvalidArgument for inputs of 2 GiB or more.
  absl::StatusOr<std::vector<int32_t>> Encode(absl::string_view text,
                                              bool add_special_tokens) const;

  // Decodes ids to UTF-8 text (HF decode). An id that is neither in the vocab
  // nor an added token is InvalidArgument (HF silently drops it).
  absl::StatusOr<std::string> Decode(absl::Span<const int32_t> ids, bool skip_special_tokens) const;

  // One past the largest id (vocab or added token): the embedding rows needed.
  int32_t vocab_size() const { return vocab_size_; }
  // True for ids whose token is a special added token (skipped by
  // skip_special_tokens).
  bool IsSpecial(int32_t id) const;
  // True if id decodes to something (is in the vocab or an added token).
  bool IsValidId(int32_t id) const;
  // The token string for id, or nullptr.
  const std::string* IdToToken(int32_t id) const;
  // -1 when absent.
  int32_t TokenToId(absl::string_view token) const;
  // Special added tokens in id order.
  std::vector<SpecialToken> special_tokens() const;

  // Best-effort well-known ids: bos from the post-processor template or a known
  // name (<s>, <|begin_of_text|>, ...), eos/pad by known names, unk from the
  // model. The checkpoint's generation config may name others.
  absl::optional<int32_t> bos_id() const { return bos_; }
  absl::optional<int32_t> eos_id() const { return eos_; }
  absl::optional<int32_t> pad_id() const { return pad_; }
  absl::optional<int32_t> unk_id() const { return unk_; }

 private:
  friend class StreamingDetokenizer;
  Tokenizer();
  // Whether the decoder groups byte-fallback tokens (StreamingDetokenizer).
  bool decoder_has_byte_fallback() const;
  // Whether the decoder treats the last token specially (StreamingDetokenizer).
  bool decoder_has_last_token_rule() const;
  // Decode of ids already checked with IsValidId.
  std::string DecodeUnchecked(absl::Span<const int32_t> ids, bool skip_special_tokens) const;
  absl::Status ParseComponents(const nlohmann::json& j);
  void SetAddedTokens(const std::vector<AddedToken>& added);
  absl::Status EncodeText(absl::string_view text, bool at_start, std::vector<int32_t>* ids) const;
  void DeriveWellKnownIds();

  // Constant after construction.
  std::unique_ptr<Normalizer> normalizer_;
  std::unique_ptr<PreTokenizer> pre_tokenizer_;
  std::unique_ptr<TokenizerModel> model_;
  std::unique_ptr<PostProcessor> post_processor_;
  std::unique_ptr<Decoder> decoder_;
  std::unique_ptr<AddedTokenMatcher> raw_matcher_;         // non-normalized added tokens
  std::unique_ptr<AddedTokenMatcher> normalized_matcher_;  // normalized added tokens
  std::vector<std::string> added_content_;                 // by id; empty if not an added token
  absl::flat_hash_map<std::string, int32_t> added_by_content_;
  std::vector<bool> is_added_;
  std::vector<bool> is_special_;
  int32_t vocab_size_ = 0;
  absl::optional<int32_t> bos_, eos_, pad_, unk_;
};

// Incremental detokenizer for one generated sequence. Push() returns the new
// text each token adds, such that (1) the concatenation of all Push() results
// and Flush() equals tokenizer.Decode(all ids, skip_special_tokens); (2) a
// delta never ends inside a UTF-8 character, and all text returned so far is a
// prefix of that full decode; (3) text that a later token could still change
// (an incomplete UTF-8 sequence, a pending group of byte-fallback tokens, the
// last token under a BPEDecoder) is held back instead of being emitted, so no
// delta carries a U+FFFD that a later token would have completed.
//
// Not thread-safe (one per sequence). The tokenizer must outlive it. Cost per
// Push is a decode of a small window of recent tokens (plus whatever is held
// back, e.g. a long run of byte-fallback tokens).
//
//   StreamingDetokenizer stream(tokenizer, /*skip_special_tokens=*/true);
//   for (int32_t id : generated) send(stream.Push(id).value());
//   send(stream.Flush());
class StreamingDetokenizer {
 public:
  StreamingDetokenizer(const Tokenizer* tokenizer, bool skip_special_tokens);

  // Returns the text that became final with this token (possibly empty).
  // Invalid ids are InvalidArgument and leave the state unchanged.
  absl::StatusOr<std::string> Push(int32_t id);
  // Ends the sequence: returns whatever is still held back and resets the
  // object for a new sequence.
  std::string Flush();

 private:
  std::string Advance(bool final);
  void Slide(const std::string& text);

  const Tokenizer* tok_;
  bool skip_special_;
  std::vector<int32_t> window_;  // recent ids: context plus ids not yet final
  size_t emitted_ = 0;           // bytes of Decode(window_) already returned
};

}  // namespace expertd::models

#endif  // EXPERTD_MODELS_TOKENIZER_TOKENIZER_H_
