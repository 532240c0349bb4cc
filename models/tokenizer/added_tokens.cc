#include "models/tokenizer/added_tokens.h"

#include <algorithm>

#include "models/tokenizer/unicode.h"

namespace expertd::models {
namespace {

char32_t LastChar(absl::string_view s) {
  size_t i = s.size() - 1;
  while (i > 0 && (static_cast<unsigned char>(s[i]) & 0xC0) == 0x80) --i;
  size_t len;
  return unicode::DecodeUtf8(s.data() + i, s.size() - i, &len);
}

bool IsWordChar(char32_t c) {
  uint32_t mask = unicode::kMaskL | unicode::kMaskN;
  return c == '_' || ((mask >> unicode::GetCategory(c)) & 1);
}

}  // namespace

void AddedTokenMatcher::Add(std::string pattern, const AddedToken& token) {
  if (pattern.empty()) return;
  first_byte_[static_cast<unsigned char>(pattern[0])] = true;
  int32_t node = 0;
  for (unsigned char b : pattern) {
    uint64_t key = (static_cast<uint64_t>(node) << 8) | b;
    auto it = edges_.find(key);
    if (it == edges_.end()) {
      int32_t child = static_cast<int32_t>(terminal_.size());
      terminal_.push_back(-1);
      it = edges_.emplace(key, child).first;
    }
    node = it->second;
  }
  // Like HF's leftmost-longest Aho-Corasick, the first pattern added wins a tie.
  if (terminal_[node] < 0) {
    entries_.push_back({std::move(pattern), token});
    terminal_[node] = static_cast<int32_t>(entries_.size() - 1);
  }
}

int AddedTokenMatcher::LongestAt(absl::string_view text, size_t pos) const {
  if (!first_byte_[static_cast<unsigned char>(text[pos])]) return -1;
  int best = -1;
  int32_t node = 0;
  for (size_t i = pos; i < text.size(); ++i) {
    auto it = edges_.find((static_cast<uint64_t>(node) << 8) | static_cast<unsigned char>(text[i]));
    if (it == edges_.end()) break;
    node = it->second;
    if (terminal_[node] >= 0) best = terminal_[node];
  }
  return best;
}

void AddedTokenMatcher::Split(absl::string_view text, std::vector<Segment>* out) const {
  size_t search_offset = 0;
  for (size_t pos = 0; pos < text.size();) {
    int idx = entries_.empty() ? -1 : LongestAt(text, pos);
    if (idx < 0) {
      ++pos;
      continue;
    }
    const Entry& e = entries_[idx];
    size_t start = pos, stop = pos + e.pattern.size();
    if (e.token.single_word) {
      bool start_space = start == 0 || !IsWordChar(LastChar(text.substr(0, start)));
      size_t len;
      bool stop_space = stop == text.size() || !IsWordChar(unicode::DecodeUtf8(
                                                   text.data() + stop, text.size() - stop, &len));
      if (!start_space || !stop_space) {
        pos = stop;  // HF iterates non-overlapping matches: skip the rejected one
        continue;
      }
    }
    if (e.token.lstrip) {
      size_t s = start;
      while (s > search_offset) {
        size_t p = s - 1;
        while (p > 0 && (static_cast<unsigned char>(text[p]) & 0xC0) == 0x80) --p;
        size_t len;
        if (!unicode::IsWhiteSpace(unicode::DecodeUtf8(text.data() + p, text.size() - p, &len)))
          break;
        s = p;
      }
      start = s;
    }
    if (e.token.rstrip) {
      while (stop < text.size()) {
        size_t len;
        if (!unicode::IsWhiteSpace(
                unicode::DecodeUtf8(text.data() + stop, text.size() - stop, &len)))
          break;
        stop += len;
      }
    }
    if (start > search_offset) out->push_back({-1, search_offset, start});
    out->push_back({e.token.id, start, stop});
    search_offset = stop;
    pos = stop;
  }
  if (search_offset < text.size()) out->push_back({-1, search_offset, text.size()});
}

}  // namespace expertd::models
