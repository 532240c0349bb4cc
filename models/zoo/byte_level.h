// GPT-2 style byte-level helpers for training a BPE tokenizer.
//
// ByteToUnicode: the GPT-2 / Hugging Face ByteLevel map from each byte to a
// printable code point (printable Latin-1 bytes map to themselves, the other
// 68 bytes to U+0100..U+0143, e.g. ' ' -> 'Ġ', '\n' -> 'Ċ'), returned as UTF-8.
//
// SplitGpt2: splits text the way the GPT-2 pre-tokenizer regex
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// does, for ASCII text (every byte >= 0x80 is treated as a letter). It is
// used only to train merges on the zoo's embedded English corpus; the serving
// tokenizer (models/tokenizer) implements the full Unicode regex.
#ifndef EXPERTD_MODELS_ZOO_BYTE_LEVEL_H_
#define EXPERTD_MODELS_ZOO_BYTE_LEVEL_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace expertd::models::zoo {

// UTF-8 of the code point standing for byte `b`.
const std::string& ByteToUnicode(uint8_t b);
// Every byte of `bytes` mapped through ByteToUnicode, concatenated.
std::string ToByteLevel(absl::string_view bytes);

std::vector<std::string> SplitGpt2(absl::string_view text);

}  // namespace expertd::models::zoo

#endif  // EXPERTD_MODELS_ZOO_BYTE_LEVEL_H_
