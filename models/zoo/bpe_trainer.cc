#include "models/zoo/bpe_trainer.h"

#include <cstdint>
#include <map>
#include <unordered_map>

#include "absl/strings/str_cat.h"
#include "models/zoo/byte_level.h"

namespace expertd::models::zoo {
namespace {

struct Word {
  std::vector<int> symbols;
  int64_t count;
};

uint64_t PairKey(int a, int b) {
  return (static_cast<uint64_t>(a) << 32) | static_cast<uint32_t>(b);
}

std::vector<Word> CountWords(absl::string_view text) {
  std::map<std::string, int64_t> freq;  // ordered: deterministic word order
  for (const std::string& piece : SplitGpt2(text)) ++freq[piece];
  std::vector<Word> words;
  for (const auto& [piece, count] : freq) {
    Word w{{}, count};
    for (unsigned char c : piece) w.symbols.push_back(c);
    if (w.symbols.size() > 1) words.push_back(std::move(w));
  }
  return words;
}

// The most frequent adjacent pair; ties go to the smallest (left, right)
// strings. Returns false when no pair remains.
bool BestPair(const std::vector<Word>& words, const std::vector<std::string>& tokens, int* left,
              int* right) {
  std::unordered_map<uint64_t, int64_t> counts;
  for (const Word& w : words) {
    for (size_t i = 0; i + 1 < w.symbols.size(); ++i)
      counts[PairKey(w.symbols[i], w.symbols[i + 1])] += w.count;
  }
  int64_t best = 0;
  for (const auto& [key, count] : counts) {
    const int a = static_cast<int>(key >> 32), b = static_cast<int>(key & 0xffffffffu);
    if (count > best || (count == best && std::make_pair(tokens[a], tokens[b]) <
                                              std::make_pair(tokens[*left], tokens[*right]))) {
      best = count;
      *left = a;
      *right = b;
    }
  }
  return best > 0;
}

void ApplyMerge(int left, int right, int merged, std::vector<Word>* words) {
  std::vector<Word> kept;
  for (Word& w : *words) {
    std::vector<int> out;
    for (size_t i = 0; i < w.symbols.size(); ++i) {
      if (i + 1 < w.symbols.size() && w.symbols[i] == left && w.symbols[i + 1] == right) {
        out.push_back(merged);
        ++i;
      } else {
        out.push_back(w.symbols[i]);
      }
    }
    w.symbols = std::move(out);
    if (w.symbols.size() > 1) kept.push_back(std::move(w));  // single symbols are done
  }
  *words = std::move(kept);
}

}  // namespace

absl::StatusOr<BpeVocab> TrainByteLevelBpe(absl::string_view text, size_t vocab_size) {
  if (vocab_size < 256)
    return absl::InvalidArgumentError("a byte-level vocabulary needs at least 256 tokens");
  BpeVocab v;
  // Symbols are byte-level strings; `tokens` doubles as the symbol table.
  std::map<std::string, int> id_of;
  for (int b = 0; b < 256; ++b) {
    v.tokens.push_back(ByteToUnicode(static_cast<uint8_t>(b)));
    id_of[v.tokens.back()] = b;
  }
  std::vector<Word> words = CountWords(text);
  while (v.tokens.size() < vocab_size) {
    int left = 0, right = 0;
    if (!BestPair(words, v.tokens, &left, &right)) {
      return absl::FailedPreconditionError(
          absl::StrCat("the training text supports only ", v.tokens.size(),
                       " BPE tokens, fewer than the ", vocab_size, " requested"));
    }
    std::string merged = v.tokens[left] + v.tokens[right];
    auto [it, added] = id_of.emplace(merged, static_cast<int>(v.tokens.size()));
    if (added) v.tokens.push_back(merged);
    v.merges.emplace_back(v.tokens[left], v.tokens[right]);
    ApplyMerge(left, right, it->second, &words);
  }
  return v;
}

}  // namespace expertd::models::zoo
