// Unicode data tables, generated into unicode_tables.cc by gen_unicode_tables.py
// from the Unicode Character Database (versions in kUnicodeVersion): categories
// as in HF's regex engines (16.0), normalization data as in HF's normalizers
// (code points assigned by 9.0; others have no decomposition and class 0).
// Use the functions in unicode.h rather than these arrays directly.
#ifndef EXPERTD_MODELS_TOKENIZER_UNICODE_TABLES_H_
#define EXPERTD_MODELS_TOKENIZER_UNICODE_TABLES_H_

#include <cstddef>
#include <cstdint>

namespace expertd::models::unicode_tables {

// Two-level lookup: value(cp) = kXStage2[kXStage1[cp >> 7] * 128 + (cp & 127)].
extern const uint16_t kCategoryStage1[];
extern const uint8_t kCategoryStage2[];  // index into the Category enum in unicode.h
extern const uint16_t kCccStage1[];
extern const uint8_t kCccStage2[];  // canonical combining class
extern const uint16_t kFlagsStage1[];
// Bit 0: Oniguruma's \w (Alphabetic, M, Nd, Pc, Join_Control). Bit 1: a mark
// (M) that HF's StripAccents removes (assigned by Unicode 9.0). Bit 2: category
// Cc, Cf, Co or Cs (BertNormalizer's "other"). Bit 3: Mn as of Unicode 9.0.
extern const uint8_t kFlagsStage2[];

// Full (recursive) decompositions of one code point, sorted by cp. The canonical
// one is kDecompData[offset, offset+canon_len) when flags & 1; the compatibility
// one follows it, kDecompData[offset+canon_len, +compat_len) when flags & 2.
struct DecompEntry {
  uint32_t cp;
  uint32_t offset;
  uint8_t canon_len;
  uint8_t compat_len;
  uint8_t flags;
};
extern const uint32_t kDecompData[];
extern const DecompEntry kDecomp[];
extern const size_t kDecompCount;

// Primary composites, sorted by (first, second). Hangul is algorithmic.
struct CompositionPair {
  uint32_t first;
  uint32_t second;
  uint32_t composite;
};
extern const CompositionPair kCompose[];
extern const size_t kComposeCount;

// Full lowercase mappings for code points whose lowercase differs, sorted by cp.
struct CaseEntry {
  uint32_t cp;
  uint32_t offset;
  uint8_t len;
};
extern const uint32_t kLowerData[];
extern const CaseEntry kLower[];
extern const size_t kLowerCount;

extern const char kUnicodeVersion[];

}  // namespace expertd::models::unicode_tables

#endif  // EXPERTD_MODELS_TOKENIZER_UNICODE_TABLES_H_
