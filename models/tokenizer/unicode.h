// Unicode helpers for the tokenizer: UTF-8 coding, general categories,
// White_Space, normalization forms and lowercasing, from the generated tables
// in unicode_tables.cc (see gen_unicode_tables.py for the Unicode version).
//
// Thread-safe: everything here is a pure function over constant tables.
#ifndef EXPERTD_MODELS_TOKENIZER_UNICODE_H_
#define EXPERTD_MODELS_TOKENIZER_UNICODE_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"
#include "models/tokenizer/unicode_tables.h"

namespace expertd::models::unicode {

// General categories, in the order of the generated table.
enum Category : uint8_t {
  kLu,
  kLl,
  kLt,
  kLm,
  kLo,
  kMn,
  kMc,
  kMe,
  kNd,
  kNl,
  kNo,
  kPc,
  kPd,
  kPs,
  kPe,
  kPi,
  kPf,
  kPo,
  kSm,
  kSc,
  kSk,
  kSo,
  kZs,
  kZl,
  kZp,
  kCc,
  kCf,
  kCs,
  kCo,
  kCn,
  kNumCategories
};

// Category masks for \p{L}, \p{N}, ... (bit i set = category i included).
constexpr uint32_t Bit(Category c) { return 1u << c; }
constexpr uint32_t kMaskL = Bit(kLu) | Bit(kLl) | Bit(kLt) | Bit(kLm) | Bit(kLo);
constexpr uint32_t kMaskM = Bit(kMn) | Bit(kMc) | Bit(kMe);
constexpr uint32_t kMaskN = Bit(kNd) | Bit(kNl) | Bit(kNo);
constexpr uint32_t kMaskP =
    Bit(kPc) | Bit(kPd) | Bit(kPs) | Bit(kPe) | Bit(kPi) | Bit(kPf) | Bit(kPo);
constexpr uint32_t kMaskS = Bit(kSm) | Bit(kSc) | Bit(kSk) | Bit(kSo);
constexpr uint32_t kMaskZ = Bit(kZs) | Bit(kZl) | Bit(kZp);
constexpr uint32_t kMaskC = Bit(kCc) | Bit(kCf) | Bit(kCs) | Bit(kCo) | Bit(kCn);

inline Category GetCategory(char32_t cp) {
  if (cp >= 0x110000) return kCn;
  using namespace unicode_tables;  // NOLINT
  return static_cast<Category>(kCategoryStage2[kCategoryStage1[cp >> 7] * 128u + (cp & 127u)]);
}
inline uint8_t CombiningClass(char32_t cp) {
  if (cp >= 0x110000) return 0;
  using namespace unicode_tables;  // NOLINT
  return kCccStage2[kCccStage1[cp >> 7] * 128u + (cp & 127u)];
}

// Oniguruma's \w: Alphabetic, marks, Nd, Pc and Join_Control (ZWNJ, ZWJ).
inline bool IsWordChar(char32_t cp) {
  if (cp >= 0x110000) return false;
  using namespace unicode_tables;  // NOLINT
  return (kFlagsStage2[kFlagsStage1[cp >> 7] * 128u + (cp & 127u)] & 1) != 0;
}

inline uint8_t Flags(char32_t cp) {
  if (cp >= 0x110000) return 4;
  using namespace unicode_tables;  // NOLINT
  return kFlagsStage2[kFlagsStage1[cp >> 7] * 128u + (cp & 127u)];
}
// A combining mark that HF's StripAccents removes (its tables are Unicode 9.0).
inline bool IsStrippableMark(char32_t cp) { return (Flags(cp) & 2) != 0; }
// BertNormalizer's "other" (Cc, Cf, Co, Cs) and nonspacing marks (Mn, Unicode 9.0).
inline bool IsBertOther(char32_t cp) { return (Flags(cp) & 4) != 0; }
inline bool IsNonspacingMarkV9(char32_t cp) { return (Flags(cp) & 8) != 0; }

// The Unicode White_Space property (what regex \s and Rust's char::is_whitespace use).
bool IsWhiteSpace(char32_t cp);

// Decodes one code point from VALID UTF-8 at p (n > 0 bytes left); *len gets its size.
inline char32_t DecodeUtf8(const char* p, size_t n, size_t* len) {
  const auto* s = reinterpret_cast<const unsigned char*>(p);
  unsigned char c = s[0];
  if (c < 0x80) {
    *len = 1;
    return c;
  }
  if (c < 0xE0 && n >= 2) {
    *len = 2;
    return ((c & 0x1Fu) << 6) | (s[1] & 0x3Fu);
  }
  if (c < 0xF0 && n >= 3) {
    *len = 3;
    return ((c & 0x0Fu) << 12) | ((s[1] & 0x3Fu) << 6) | (s[2] & 0x3Fu);
  }
  if (n >= 4) {
    *len = 4;
    return ((c & 0x07u) << 18) | ((s[1] & 0x3Fu) << 12) | ((s[2] & 0x3Fu) << 6) | (s[3] & 0x3Fu);
  }
  *len = 1;
  return 0xFFFD;
}

// Appends the UTF-8 encoding of cp (must be a scalar value) to *out.
void AppendUtf8(char32_t cp, std::string* out);

// Length of the UTF-8 sequence that starts with byte c (1 for invalid leads).
inline size_t Utf8SeqLen(unsigned char c) { return c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4; }

// Length of the longest prefix of s that is well-formed UTF-8.
size_t ValidUtf8Prefix(absl::string_view s);

// Replaces every maximal invalid subsequence with U+FFFD, exactly like Rust's
// String::from_utf8_lossy and the WHATWG TextDecoder. Returns s unchanged when
// it is already valid.
std::string SanitizeUtf8(absl::string_view s);

// Normalization forms (UAX #15). Input must be valid UTF-8.
enum class NormalForm { kNFC, kNFD, kNFKC, kNFKD };
std::string Normalize(absl::string_view s, NormalForm form);

// Full lowercase mapping (Rust's str::to_lowercase, without the final-sigma rule).
std::string ToLower(absl::string_view s);

}  // namespace expertd::models::unicode

#endif  // EXPERTD_MODELS_TOKENIZER_UNICODE_H_
