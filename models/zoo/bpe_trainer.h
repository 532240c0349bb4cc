// A small, deterministic byte-level BPE trainer (the algorithm of Sennrich et
// al. and Hugging Face's BpeTrainer, without frequency cutoffs): split the
// text with the GPT-2 pre-tokenizer, map bytes through the ByteLevel alphabet,
// start from all 256 byte tokens, then repeatedly merge the most frequent
// adjacent pair (ties broken by the pair's strings, lexicographically) until
// the vocabulary reaches the requested size.
#ifndef EXPERTD_MODELS_ZOO_BPE_TRAINER_H_
#define EXPERTD_MODELS_ZOO_BPE_TRAINER_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace expertd::models::zoo {

struct BpeVocab {
  // Token strings in the ByteLevel alphabet; index = rank. The first 256 are
  // the single bytes 0..255, then one token per vocabulary-growing merge.
  std::vector<std::string> tokens;
  // Merges in priority order, each producing a token in `tokens`.
  std::vector<std::pair<std::string, std::string>> merges;
};

// Trains until tokens.size() == vocab_size (>= 256). FailedPrecondition if
// the text runs out of pairs first (the error says how many it reached).
absl::StatusOr<BpeVocab> TrainByteLevelBpe(absl::string_view text, size_t vocab_size);

}  // namespace expertd::models::zoo

#endif  // EXPERTD_MODELS_ZOO_BPE_TRAINER_H_
