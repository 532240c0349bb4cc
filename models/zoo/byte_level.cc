#include "models/zoo/byte_level.h"

#include <array>

namespace expertd::models::zoo {
namespace {

std::string Utf8(uint32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else if (cp < 0x800) {
    s += static_cast<char>(0xc0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3f));
  } else {
    s += static_cast<char>(0xe0 | (cp >> 12));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    s += static_cast<char>(0x80 | (cp & 0x3f));
  }
  return s;
}

std::array<std::string, 256> BuildTable() {
  std::array<std::string, 256> table;
  uint32_t next = 256;
  for (uint32_t b = 0; b < 256; ++b) {
    const bool printable =
        (b >= '!' && b <= '~') || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
    table[b] = Utf8(printable ? b : next++);
  }
  return table;
}

enum class Cls { kLetter, kNumber, kSpace, kOther };

Cls Classify(unsigned char c) {
  if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c >= 0x80) return Cls::kLetter;
  if (c >= '0' && c <= '9') return Cls::kNumber;
  if (c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v') return Cls::kSpace;
  return Cls::kOther;
}

// Length of a contraction ('s 't 're 've 'm 'll 'd) at the start of `s`, or 0.
size_t Contraction(absl::string_view s) {
  if (s.size() < 2 || s[0] != '\'') return 0;
  for (absl::string_view c : {"'s", "'t", "'m", "'d", "'re", "'ve", "'ll"}) {
    if (s.substr(0, c.size()) == c) return c.size();
  }
  return 0;
}

size_t RunOf(absl::string_view s, size_t from, Cls cls) {
  size_t j = from;
  while (j < s.size() && Classify(s[j]) == cls) ++j;
  return j;
}

}  // namespace

const std::string& ByteToUnicode(uint8_t b) {
  static const std::array<std::string, 256> table = BuildTable();
  return table[b];
}

std::string ToByteLevel(absl::string_view bytes) {
  std::string out;
  for (unsigned char c : bytes) out += ByteToUnicode(c);
  return out;
}

std::vector<std::string> SplitGpt2(absl::string_view s) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i < s.size()) {
    size_t end;
    const Cls c = Classify(s[i]);
    if (size_t n = Contraction(s.substr(i)); n > 0) {
      end = i + n;
    } else if (s[i] == ' ' && i + 1 < s.size() && Classify(s[i + 1]) != Cls::kSpace) {
      end = RunOf(s, i + 1, Classify(s[i + 1]));  // " ?\p{L}+" and friends
    } else if (c != Cls::kSpace) {
      end = RunOf(s, i, c);
    } else {
      end = RunOf(s, i, Cls::kSpace);
      // \s+(?!\S): leave the last space for the next word, unless at the end.
      if (end < s.size() && end - i > 1) --end;
    }
    out.emplace_back(s.substr(i, end - i));
    i = end;
  }
  return out;
}

}  // namespace expertd::models::zoo
