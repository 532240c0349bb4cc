#include "models/tokenizer/fast_split.h"

#include <string>

#include "models/tokenizer/unicode.h"

namespace expertd::models {
namespace {

constexpr unsigned char kL = 1, kN = 2, kWS = 4, kCRLF = 8;

const char kGpt2[] =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
const char kLlama3[] =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char kQwen2[] =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

unsigned char Classify(char32_t c) {
  if (c < 128) {
    if ((c | 0x20) >= 'a' && (c | 0x20) <= 'z') return kL;
    if (c >= '0' && c <= '9') return kN;
    if (c == '\r' || c == '\n') return kWS | kCRLF;
    if (c == ' ' || (c >= 0x09 && c <= 0x0D)) return kWS;
    return 0;
  }
  if (unicode::IsWhiteSpace(c)) return kWS;
  uint32_t bit = 1u << unicode::GetCategory(c);
  if (bit & unicode::kMaskL) return kL;
  if (bit & unicode::kMaskN) return kN;
  return 0;
}

// Case folding for the contraction letters under (?i): ASCII, plus U+017F (ſ)
// which folds to 's'.
char32_t Fold(char32_t c, bool icase) {
  if (!icase) return c;
  if (c >= 'A' && c <= 'Z') return c + 32;
  if (c == 0x17F) return 's';
  return c;
}

}  // namespace

std::unique_ptr<FastSplitter> FastSplitter::ForPattern(absl::string_view pattern) {
  if (pattern == kGpt2) return std::make_unique<FastSplitter>(Flavor{false, false, -1, false});
  if (pattern == kLlama3) return std::make_unique<FastSplitter>(Flavor{true, true, 3, true});
  if (pattern == kQwen2) return std::make_unique<FastSplitter>(Flavor{true, true, 1, true});
  return nullptr;
}

// Returns the end of the match at i (i when nothing matches). The alternatives
// are tried in the pattern's order, as a backtracking engine would.
size_t FastSplitter::MatchAt(const char32_t* cp, const unsigned char* cls, size_t n,
                             size_t i) const {
  auto run = [&](size_t j, unsigned char mask) {
    while (j < n && (cls[j] & mask)) ++j;
    return j;
  };
  auto is_punct = [&](size_t j) { return j < n && (cls[j] & (kL | kN | kWS)) == 0; };
  const unsigned char c = cls[i];
  // 's|'t|'re|'ve|'m|'ll|'d
  if (cp[i] == '\'' && i + 1 < n) {
    char32_t a = Fold(cp[i + 1], f_.icase_contractions);
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return i + 2;
    if (i + 2 < n) {
      char32_t b = Fold(cp[i + 2], f_.icase_contractions);
      if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return i + 3;
    }
  }
  // Letters, with one optional leading char.
  bool prefix_ok = f_.any_letter_prefix ? (c & (kL | kN | kCRLF)) == 0 : cp[i] == ' ';
  if (prefix_ok && i + 1 < n && (cls[i + 1] & kL)) return run(i + 1, kL);
  if (c & kL) return run(i, kL);
  // Numbers.
  if (f_.max_digits < 0) {
    if (cp[i] == ' ' && i + 1 < n && (cls[i + 1] & kN)) return run(i + 1, kN);
    if (c & kN) return run(i, kN);
  } else if (c & kN) {
    size_t j = i;
    while (j < n && j - i < static_cast<size_t>(f_.max_digits) && (cls[j] & kN)) ++j;
    return j;
  }
  // ' ?[^\s\p{L}\p{N}]+' (then '[\r\n]*').
  size_t p = i;
  if (cp[i] == ' ' && is_punct(i + 1)) p = i + 1;
  if (is_punct(p)) {
    size_t j = p;
    while (is_punct(j)) ++j;
    return f_.newline_rules ? run(j, kCRLF) : j;
  }
  if (!(c & kWS)) return i;
  const size_t k = run(i, kWS);
  // '\s*[\r\n]+': ends after the last CR/LF of the whitespace run.
  if (f_.newline_rules) {
    for (size_t m = k; m > i; --m) {
      if (cls[m - 1] & kCRLF) return m;
    }
  }
  // '\s+(?!\S)' then '\s+'.
  if (k == n || k - i < 2) return k;
  return k - 1;
}

void FastSplitter::FindAll(absl::string_view text,
                           std::vector<std::pair<size_t, size_t>>* out) const {
  std::vector<char32_t> cps;
  std::vector<unsigned char> cls;
  std::vector<uint32_t> offs;
  cps.reserve(text.size());
  cls.reserve(text.size());
  offs.reserve(text.size() + 1);
  for (size_t i = 0; i < text.size();) {
    size_t len = 1;
    unsigned char b = static_cast<unsigned char>(text[i]);
    char32_t c = b < 0x80 ? b : unicode::DecodeUtf8(text.data() + i, text.size() - i, &len);
    offs.push_back(static_cast<uint32_t>(i));
    cps.push_back(c);
    cls.push_back(Classify(c));
    i += len;
  }
  offs.push_back(static_cast<uint32_t>(text.size()));
  const size_t n = cps.size();
  for (size_t pos = 0; pos < n;) {
    size_t end = MatchAt(cps.data(), cls.data(), n, pos);
    if (end > pos) {
      out->push_back({offs[pos], offs[end]});
      pos = end;
    } else {
      ++pos;
    }
  }
}

}  // namespace expertd::models
