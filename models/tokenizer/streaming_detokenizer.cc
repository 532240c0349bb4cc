// StreamingDetokenizer (declared in tokenizer.h).
//
// Each Push decodes a small window of recent ids and returns the part of that
// decode beyond what was already returned, minus a tail that a later token
// could still change: trailing U+FFFD (an incomplete UTF-8 sequence in the
// byte-level decoder), the text of trailing byte-fallback tokens (a later
// byte token can turn a valid group into U+FFFDs) and, with BPEDecoder, the
// last token's text (its suffix decodes differently once it is not last). Once
// everything else is final the window is cut to its last few ids, which stay as
// context so that first-token rules of the decoder (Strip, Metaspace) do not
// apply to new text.
#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "models/tokenizer/tokenizer.h"

namespace expertd::models {
namespace {

constexpr size_t kMaxWindow = 16;
constexpr size_t kContext = 4;
constexpr char kReplacement[] = "\xEF\xBF\xBD";

bool IsByteToken(const std::string* t) {
  return t != nullptr && t->size() == 6 && (*t)[0] == '<' && (*t)[1] == '0' && (*t)[2] == 'x' &&
         (*t)[5] == '>';
}

size_t CommonPrefix(const std::string& a, const std::string& b) {
  size_t n = std::min(a.size(), b.size()), i = 0;
  while (i < n && a[i] == b[i]) ++i;
  return i;
}

}  // namespace

StreamingDetokenizer::StreamingDetokenizer(const Tokenizer* tokenizer, bool skip_special_tokens)
    : tok_(tokenizer), skip_special_(skip_special_tokens) {}

absl::StatusOr<std::string> StreamingDetokenizer::Push(int32_t id) {
  if (!tok_->IsValidId(id)) {
    return absl::InvalidArgumentError(absl::StrCat("token id ", id, " is not in the vocabulary"));
  }
  if (skip_special_ && tok_->IsSpecial(id)) return std::string();
  window_.push_back(id);
  return Advance(false);
}

std::string StreamingDetokenizer::Flush() {
  std::string rest = Advance(true);
  window_.clear();
  emitted_ = 0;
  return rest;
}

// Drops all but the last kContext ids, provided the text still held back
// (text past emitted_) is also the tail of the shorter window's decode.
void StreamingDetokenizer::Slide(const std::string& text) {
  std::vector<int32_t> tail(window_.end() - kContext, window_.end());
  std::string tail_text = tok_->DecodeUnchecked(tail, skip_special_);
  size_t held = text.size() - std::min(emitted_, text.size());
  if (held > tail_text.size() ||
      tail_text.compare(tail_text.size() - held, held, text, text.size() - held, held) != 0) {
    return;
  }
  window_ = std::move(tail);
  emitted_ = tail_text.size() - held;
}

std::string StreamingDetokenizer::Advance(bool final) {
  std::string text = tok_->DecodeUnchecked(window_, skip_special_);
  size_t stable = text.size();
  if (!final) {
    if (tok_->decoder_has_byte_fallback()) {
      size_t k = window_.size();
      while (k > 0 && IsByteToken(tok_->IdToToken(window_[k - 1]))) --k;
      if (k < window_.size()) {
        std::string head =
            tok_->DecodeUnchecked(absl::MakeConstSpan(window_).subspan(0, k), skip_special_);
        stable = CommonPrefix(head, text);
      }
    }
    if (tok_->decoder_has_last_token_rule() && !window_.empty()) {
      // Decode once more with the last token repeated, so it is not last.
      std::vector<int32_t> probe = window_;
      probe.push_back(window_.back());
      stable = std::min(stable, CommonPrefix(text, tok_->DecodeUnchecked(probe, skip_special_)));
    }
    while (stable >= 3 && text.compare(stable - 3, 3, kReplacement) == 0) stable -= 3;
  }
  // Never return a partial character (the window's text is valid UTF-8).
  while (stable > 0 && stable < text.size() &&
         (static_cast<unsigned char>(text[stable]) & 0xC0) == 0x80) {
    --stable;
  }
  std::string delta;
  if (stable > emitted_) {
    delta = text.substr(emitted_, stable - emitted_);
    emitted_ = stable;
  }
  // Slide once everything is emitted, or (BPEDecoder) all but the last token.
  if (!final && window_.size() > kMaxWindow &&
      (emitted_ == text.size() || tok_->decoder_has_last_token_rule())) {
    Slide(text);
  }
  return delta;
}

}  // namespace expertd::models
