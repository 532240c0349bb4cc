// The tokenizer every zoo model ships with: a GPT-2 style byte-level BPE in
// Hugging Face tokenizer.json format, its merges learned deterministically from
// the embedded English corpus (corpus.h), so any vocab size from 259 up to a
// few thousand gives the same ids for the same text.
//
// Ids: 0 "<|endoftext|>" (pad), 1 "<s>" (bos), 2 "</s>" (eos) -- added special
// tokens, also present in the BPE vocab like GPT-2's "<|endoftext|>" -- then
// the 256 byte tokens, then one token per learned merge.
//
// tokenizer.json uses only common components: normalizer null, ByteLevel
// pre-tokenizer (add_prefix_space false, use_regex true: the GPT-2 regex),
// BPE model (vocab + "a b" merges, no unk, no byte fallback), no
// post-processor (no BOS is added), ByteLevel decoder.
#ifndef EXPERTD_MODELS_ZOO_ZOO_TOKENIZER_H_
#define EXPERTD_MODELS_ZOO_ZOO_TOKENIZER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "models/zoo/bpe_trainer.h"

namespace expertd::models::zoo {

inline constexpr int32_t kZooPadId = 0;
inline constexpr int32_t kZooBosId = 1;
inline constexpr int32_t kZooEosId = 2;
inline constexpr int64_t kZooNumSpecial = 3;
inline constexpr int64_t kZooMinVocab = kZooNumSpecial + 256;

struct ZooTokenizer {
  std::vector<std::string> specials;  // ids 0 .. kZooNumSpecial-1
  BpeVocab bpe;                       // ids kZooNumSpecial ..

  int64_t vocab_size() const { return static_cast<int64_t>(specials.size() + bpe.tokens.size()); }
};

// Trains (once per size per process; thread-safe) a tokenizer of exactly
// `vocab_size` tokens. InvalidArgument below kZooMinVocab, FailedPrecondition
// above what the corpus supports (about 2900).
absl::StatusOr<ZooTokenizer> BuildZooTokenizer(int64_t vocab_size);

// The tokenizer.json text (UTF-8, deterministic).
std::string TokenizerJson(const ZooTokenizer& tokenizer);
// A tokenizer_config.json for transformers' AutoTokenizer.
std::string TokenizerConfigJson(const ZooTokenizer& tokenizer, int64_t model_max_length);

}  // namespace expertd::models::zoo

#endif  // EXPERTD_MODELS_ZOO_ZOO_TOKENIZER_H_
