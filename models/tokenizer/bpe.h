// The BPE model of tokenizer.json ("model": {"type": "BPE", ...}): vocab,
// ranked merges, byte-level alphabet, byte_fallback, unk/fuse_unk,
// continuing_subword_prefix / end_of_word_suffix, ignore_merges.
//
// Thread-safe: Encode is const; the word cache is internally synchronized.
#ifndef EXPERTD_MODELS_TOKENIZER_BPE_H_
#define EXPERTD_MODELS_TOKENIZER_BPE_H_

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/inlined_vector.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "models/tokenizer/tokenizer_model.h"
#include "nlohmann/json.hpp"

namespace expertd::models {

// GPT-2's reversible byte <-> printable-code-point mapping.
char32_t ByteToUnicode(uint8_t b);
// Returns -1 when cp is not in the alphabet.
int UnicodeToByte(char32_t cp);

// Ids are dense array indices; real vocabularies stay far below this.
constexpr int32_t kMaxTokenId = 1 << 22;

// A token id read from tokenizer.json: the integer when the value is one in
// [0, kMaxTokenId), else -1 (floats, huge or negative numbers, strings),
// which every caller refuses as out of range. nlohmann's get<int>() on a
// float out of range is undefined behaviour.
inline int64_t JsonTokenId(const nlohmann::json& v) {
  if (v.is_number_unsigned())
    return v.get<uint64_t>() < static_cast<uint64_t>(kMaxTokenId) ? v.get<int64_t>() : -1;
  if (v.is_number_integer()) {
    const int64_t id = v.get<int64_t>();
    return id >= 0 && id < kMaxTokenId ? id : -1;
  }
  return -1;
}

class BpeModel : public TokenizerModel {
 public:
  // `byte_level`: pieces are raw bytes to be mapped through the byte alphabet
  // before lookup (the ByteLevel pre-tokenizer ended the chain).
  static absl::StatusOr<std::unique_ptr<BpeModel>> FromJson(const nlohmann::json& model,
                                                            bool byte_level);

  void Encode(absl::string_view piece, std::vector<int32_t>* ids) const override;
  int32_t TokenToId(absl::string_view token) const override;
  const std::string* IdToToken(int32_t id) const override;
  int32_t id_end() const override { return static_cast<int32_t>(id_to_token_.size()); }
  int32_t unk_id() const override { return unk_id_; }

 private:
  using Ids = absl::InlinedVector<int32_t, 6>;
  struct Merge {
    int32_t rank;
    int32_t new_id;
  };
  BpeModel() = default;
  void EncodeCached(absl::string_view piece, std::vector<int32_t>* ids) const;
  void EncodeWord(absl::string_view word, Ids* out) const;
  void InitialSymbols(absl::string_view word, Ids* syms) const;
  void MergeAll(Ids* syms) const;
  const Merge* FindMerge(int32_t a, int32_t b) const {
    auto it = merges_.find((static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) |
                           static_cast<uint32_t>(b));
    return it == merges_.end() ? nullptr : &it->second;
  }

  // Constant after construction.
  absl::flat_hash_map<std::string, int32_t> vocab_;
  std::vector<std::string> id_to_token_;  // "" for holes
  std::vector<bool> id_present_;
  absl::flat_hash_map<uint64_t, Merge> merges_;
  bool byte_level_ = false;
  bool byte_fallback_ = false;
  bool fuse_unk_ = false;
  bool ignore_merges_ = false;
  int32_t unk_id_ = -1;
  bool has_unk_token_ = false;
  std::string unk_token_;
  std::string prefix_;  // continuing_subword_prefix
  std::string suffix_;  // end_of_word_suffix
  bool has_prefix_ = false, has_suffix_ = false;
  std::array<int32_t, 256> byte_ids_;  // byte-level: id of each byte's symbol, -1 if absent
  bool byte_fast_ = false;             // byte-level and every byte has an id and no prefix/suffix
  std::array<int32_t, 256> fallback_ids_;  // byte_fallback: id of "<0xAB>", -1 if absent
  // SentencePiece-style vocabularies: when no merge joins a token ending in a
  // non-"▁" char to one starting with "▁", BPE on a piece equals BPE on its
  // parts split before each such "▁", which lets long pieces (Llama-2 has no
  // pre-tokenizer) use the word cache. Checked at load time.
  bool split_at_metaspace_ = false;

  // Word cache, two levels: a per-thread map (no locking; reset when the thread
  // switches to another BpeModel) in front of a shared sharded map. Both are
  // keyed by the piece bytes and stop growing when full.
  static constexpr size_t kMaxThreadLocalEntries = 32768;
  uint64_t instance_id_ = 0;  // unique per BpeModel, never reused
  static constexpr int kShards = 16;
  static constexpr size_t kMaxEntriesPerShard = 8192;
  static constexpr size_t kMaxCachedWordLen = 256;
  struct Shard {
    absl::Mutex mu;
    absl::flat_hash_map<std::string, Ids> map ABSL_GUARDED_BY(mu);
  };
  mutable std::array<Shard, kShards> cache_;
};

}  // namespace expertd::models

#endif  // EXPERTD_MODELS_TOKENIZER_BPE_H_
