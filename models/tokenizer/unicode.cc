#include "models/tokenizer/unicode.h"

#include <algorithm>
#include <vector>

#include "absl/base/call_once.h"

namespace expertd::models::unicode {
namespace {

namespace t = unicode_tables;

constexpr char32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr int kLCount = 19, kVCount = 21, kTCount = 28, kNCount = kVCount * kTCount,
              kSCount = kLCount * kNCount;

const t::DecompEntry* FindDecomp(char32_t cp) {
  const t::DecompEntry* end = t::kDecomp + t::kDecompCount;
  const t::DecompEntry* it = std::lower_bound(
      t::kDecomp, end, cp, [](const t::DecompEntry& e, char32_t c) { return e.cp < c; });
  return (it != end && it->cp == cp) ? it : nullptr;
}

void DecomposeOne(char32_t cp, bool compat, std::vector<char32_t>* out) {
  if (cp >= kSBase && cp < kSBase + kSCount) {
    int s = static_cast<int>(cp - kSBase);
    out->push_back(kLBase + s / kNCount);
    out->push_back(kVBase + (s % kNCount) / kTCount);
    if (s % kTCount) out->push_back(kTBase + s % kTCount);
    return;
  }
  if (cp < 0xC0) {
    if (!compat || cp < 0xA0) {
      out->push_back(cp);
      return;
    }
  }
  const t::DecompEntry* e = FindDecomp(cp);
  if (e == nullptr) {
    out->push_back(cp);
  } else if (compat && (e->flags & 2)) {
    const uint32_t* d = t::kDecompData + e->offset + e->canon_len;
    out->insert(out->end(), d, d + e->compat_len);
  } else if (e->flags & 1) {
    const uint32_t* d = t::kDecompData + e->offset;
    out->insert(out->end(), d, d + e->canon_len);
  } else {
    out->push_back(cp);
  }
}

// Canonical ordering: stable-sorts each run of non-starters by combining class.
void ReorderMarks(std::vector<char32_t>* cps) {
  size_t n = cps->size();
  for (size_t i = 0; i < n;) {
    if (CombiningClass((*cps)[i]) == 0) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < n && CombiningClass((*cps)[j]) != 0) ++j;
    if (j - i > 1) {
      std::stable_sort(cps->begin() + i, cps->begin() + j, [](char32_t a, char32_t b) {
        return CombiningClass(a) < CombiningClass(b);
      });
    }
    i = j;
  }
}

bool ComposePair(char32_t a, char32_t b, char32_t* out) {
  if (a >= kLBase && a < kLBase + kLCount && b >= kVBase && b < kVBase + kVCount) {
    *out = kSBase + ((a - kLBase) * kVCount + (b - kVBase)) * kTCount;
    return true;
  }
  if (a >= kSBase && a < kSBase + kSCount && (a - kSBase) % kTCount == 0 && b > kTBase &&
      b < kTBase + kTCount) {
    *out = a + (b - kTBase);
    return true;
  }
  const t::CompositionPair* end = t::kCompose + t::kComposeCount;
  const t::CompositionPair* it =
      std::lower_bound(t::kCompose, end, std::make_pair(a, b),
                       [](const t::CompositionPair& p, std::pair<char32_t, char32_t> k) {
                         return p.first < k.first || (p.first == k.first && p.second < k.second);
                       });
  if (it == end || it->first != a || it->second != b) return false;
  *out = it->composite;
  return true;
}

// The composition algorithm of UAX #15 (sample code), in place.
void Compose(std::vector<char32_t>* cps) {
  std::vector<char32_t>& v = *cps;
  if (v.empty()) return;
  size_t starter = 0;
  int last_class = CombiningClass(v[0]) == 0 ? 0 : 256;
  size_t w = 1;
  for (size_t r = 1; r < v.size(); ++r) {
    char32_t c = v[r];
    int cc = CombiningClass(c);
    char32_t composite;
    if ((last_class < cc || last_class == 0) && ComposePair(v[starter], c, &composite)) {
      v[starter] = composite;
      continue;
    }
    if (cc == 0) starter = w;
    last_class = cc;
    v[w++] = c;
  }
  v.resize(w);
}

}  // namespace

bool IsWhiteSpace(char32_t c) {
  if (c < 0x80) return c == ' ' || (c >= 0x09 && c <= 0x0D);
  return c == 0x85 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 ||
         c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

void AppendUtf8(char32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

namespace {
// Length of the valid sequence at s[i] (0 if invalid); *bad gets the length of
// the maximal invalid subpart when invalid.
size_t ValidSeqAt(const unsigned char* s, size_t n, size_t i, size_t* bad) {
  unsigned char c = s[i];
  if (c < 0x80) return 1;
  size_t need;
  unsigned char lo = 0x80, hi = 0xBF;
  if (c >= 0xC2 && c <= 0xDF) {
    need = 1;
  } else if (c >= 0xE0 && c <= 0xEF) {
    need = 2;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    need = 3;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;
  } else {
    *bad = 1;
    return 0;
  }
  size_t k = 1;
  for (; k <= need; ++k) {
    if (i + k >= n) break;
    unsigned char b = s[i + k];
    if (k == 1 ? (b < lo || b > hi) : (b < 0x80 || b > 0xBF)) break;
  }
  if (k == need + 1) return need + 1;
  *bad = k;
  return 0;
}
}  // namespace

size_t ValidUtf8Prefix(absl::string_view sv) {
  const auto* s = reinterpret_cast<const unsigned char*>(sv.data());
  size_t n = sv.size(), i = 0, bad = 0;
  while (i < n) {
    if (s[i] < 0x80) {
      ++i;
      continue;
    }
    size_t len = ValidSeqAt(s, n, i, &bad);
    if (len == 0) return i;
    i += len;
  }
  return n;
}

std::string SanitizeUtf8(absl::string_view sv) {
  size_t i = ValidUtf8Prefix(sv);
  if (i == sv.size()) return std::string(sv);
  const auto* s = reinterpret_cast<const unsigned char*>(sv.data());
  size_t n = sv.size();
  std::string out(sv.substr(0, i));
  while (i < n) {
    size_t bad = 0;
    size_t len = ValidSeqAt(s, n, i, &bad);
    if (len) {
      out.append(sv.data() + i, len);
      i += len;
    } else {
      out.append("\xEF\xBF\xBD");
      i += bad;
    }
  }
  return out;
}

namespace {

// Code points that a normalization form may change or that may change their
// neighbours: nonzero combining class, a decomposition of the form's kind, or
// (composing forms) the second element of a composition. Everything else is
// "inert": it is left alone and blocks composition across it, so a text is
// normalized by normalizing only the runs around non-inert code points.
class InertTable {
 public:
  explicit InertTable(NormalForm form) : bits_((0x110000 + 63) / 64, 0) {
    bool compat = form == NormalForm::kNFKC || form == NormalForm::kNFKD;
    bool compose = form == NormalForm::kNFC || form == NormalForm::kNFKC;
    for (char32_t c = 0; c < 0x110000; ++c) {
      if (CombiningClass(c) != 0) Mark(c);
    }
    for (size_t i = 0; i < t::kDecompCount; ++i) {
      const t::DecompEntry& e = t::kDecomp[i];
      if ((e.flags & 1) || (compat && (e.flags & 2))) Mark(e.cp);
    }
    if (compose) {
      for (size_t i = 0; i < t::kComposeCount; ++i) Mark(t::kCompose[i].second);
      for (char32_t c = kVBase; c < kVBase + kVCount; ++c) Mark(c);
      for (char32_t c = kTBase + 1; c < kTBase + kTCount; ++c) Mark(c);
    } else {
      for (char32_t c = kSBase; c < kSBase + kSCount; ++c) Mark(c);
    }
  }
  bool NonInert(char32_t c) const { return c < 0x110000 && ((bits_[c >> 6] >> (c & 63)) & 1); }

 private:
  void Mark(char32_t c) { bits_[c >> 6] |= uint64_t{1} << (c & 63); }
  std::vector<uint64_t> bits_;
};

const InertTable& Inert(NormalForm form) {
  static const InertTable* tables[4] = {};
  static absl::once_flag once[4];
  int k = static_cast<int>(form);
  absl::call_once(once[k], [k, form] { tables[k] = new InertTable(form); });
  return *tables[k];
}

void NormalizeRun(absl::string_view s, bool compat, bool compose, std::string* out) {
  std::vector<char32_t> cps;
  cps.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    size_t len;
    char32_t cp = DecodeUtf8(s.data() + i, s.size() - i, &len);
    DecomposeOne(cp, compat, &cps);
    i += len;
  }
  ReorderMarks(&cps);
  if (compose) Compose(&cps);
  for (char32_t cp : cps) AppendUtf8(cp, out);
}

}  // namespace

std::string Normalize(absl::string_view s, NormalForm form) {
  bool compat = form == NormalForm::kNFKC || form == NormalForm::kNFKD;
  bool compose = form == NormalForm::kNFC || form == NormalForm::kNFKC;
  // Code points below U+00A0 (lead bytes < 0xC2) are inert in every form.
  size_t first = 0;
  while (first < s.size() && static_cast<unsigned char>(s[first]) < 0xC2) ++first;
  if (first == s.size()) return std::string(s);
  const InertTable& inert = Inert(form);
  std::string out;
  out.reserve(s.size() + s.size() / 8);
  size_t copied = 0;                              // s[0, copied) is in out
  size_t last_inert = first > 0 ? first - 1 : 0;  // start of the last inert code point
  size_t i = first;
  while (i < s.size()) {
    size_t len;
    char32_t c = DecodeUtf8(s.data() + i, s.size() - i, &len);
    if (!inert.NonInert(c)) {
      last_inert = i;
      i += len;
      continue;
    }
    // A run of non-inert code points, with the inert starter before it.
    size_t begin = std::max(last_inert, copied);
    size_t end = i + len;
    while (end < s.size()) {
      size_t l2;
      char32_t c2 = DecodeUtf8(s.data() + end, s.size() - end, &l2);
      if (!inert.NonInert(c2)) break;
      end += l2;
    }
    out.append(s.data() + copied, begin - copied);
    NormalizeRun(s.substr(begin, end - begin), compat, compose, &out);
    copied = end;
    i = end;
    last_inert = end;
  }
  out.append(s.data() + copied, s.size() - copied);
  return out;
}

std::string ToLower(absl::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      out.push_back(static_cast<char>(c >= 'A' && c <= 'Z' ? c + 32 : c));
      ++i;
      continue;
    }
    size_t len;
    char32_t cp = DecodeUtf8(s.data() + i, s.size() - i, &len);
    i += len;
    const t::CaseEntry* end = t::kLower + t::kLowerCount;
    const t::CaseEntry* it = std::lower_bound(
        t::kLower, end, cp, [](const t::CaseEntry& e, char32_t x) { return e.cp < x; });
    if (it != end && it->cp == cp) {
      for (int k = 0; k < it->len; ++k) AppendUtf8(t::kLowerData[it->offset + k], &out);
    } else {
      AppendUtf8(cp, &out);
    }
  }
  return out;
}

}  // namespace expertd::models::unicode
