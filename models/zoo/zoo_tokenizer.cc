#include "models/zoo/zoo_tokenizer.h"

#include <map>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "models/zoo/corpus.h"
#include "nlohmann/json.hpp"

namespace expertd::models::zoo {
namespace {

using ojson = nlohmann::ordered_json;

const char* const kSpecials[kZooNumSpecial] = {"<|endoftext|>", "<s>", "</s>"};

ojson ByteLevelComponent(bool add_prefix_space) {
  return {{"type", "ByteLevel"},
          {"add_prefix_space", add_prefix_space},
          {"trim_offsets", true},
          {"use_regex", true}};
}

}  // namespace

absl::StatusOr<ZooTokenizer> BuildZooTokenizer(int64_t vocab_size) {
  if (vocab_size < kZooMinVocab) {
    return absl::InvalidArgumentError(absl::StrCat("vocab size ", vocab_size,
                                                   " is below the minimum of ", kZooMinVocab,
                                                   " (3 special tokens + 256 bytes)"));
  }
  static std::mutex mu;
  static std::map<int64_t, BpeVocab>* cache = new std::map<int64_t, BpeVocab>();
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache->find(vocab_size);
  if (it == cache->end()) {
    absl::StatusOr<BpeVocab> bpe = TrainByteLevelBpe(TrainingCorpus(), vocab_size - kZooNumSpecial);
    if (!bpe.ok()) return bpe.status();
    it = cache->emplace(vocab_size, *std::move(bpe)).first;
  }
  ZooTokenizer t;
  t.specials.assign(kSpecials, kSpecials + kZooNumSpecial);
  t.bpe = it->second;
  for (const std::string& token : t.bpe.tokens) {
    for (const std::string& special : t.specials) {
      if (token == special)
        return absl::InternalError(absl::StrCat("BPE learned the special token ", special));
    }
  }
  return t;
}

std::string TokenizerJson(const ZooTokenizer& t) {
  ojson added = ojson::array();
  ojson vocab = ojson::object();
  for (size_t i = 0; i < t.specials.size(); ++i) {
    added.push_back({{"id", i},
                     {"content", t.specials[i]},
                     {"single_word", false},
                     {"lstrip", false},
                     {"rstrip", false},
                     {"normalized", false},
                     {"special", true}});
    vocab[t.specials[i]] = i;
  }
  for (size_t i = 0; i < t.bpe.tokens.size(); ++i) vocab[t.bpe.tokens[i]] = t.specials.size() + i;
  ojson merges = ojson::array();
  for (const auto& [a, b] : t.bpe.merges) merges.push_back(a + " " + b);
  ojson model = {{"type", "BPE"},
                 {"dropout", nullptr},
                 {"unk_token", nullptr},
                 {"continuing_subword_prefix", nullptr},
                 {"end_of_word_suffix", nullptr},
                 {"fuse_unk", false},
                 {"byte_fallback", false},
                 {"vocab", vocab},
                 {"merges", merges}};
  ojson doc = {{"version", "1.0"},
               {"truncation", nullptr},
               {"padding", nullptr},
               {"added_tokens", added},
               {"normalizer", nullptr},
               {"pre_tokenizer", ByteLevelComponent(false)},
               {"post_processor", nullptr},
               {"decoder", ByteLevelComponent(true)},
               {"model", model}};
  return doc.dump(2) + "\n";
}

// A chat template in the shape of ChatML, with the zoo's own special tokens as
// turn markers (it has no <|im_start|>): each turn is "<s>ROLE\nCONTENT</s>\n",
// and the generation prompt opens an assistant turn, so a zoo model answers
// chat completions out of the box. Written in the Jinja subset every real
// template uses (models/chat_template renders it exactly as jinja2 does).
constexpr char kZooChatTemplate[] =
    "{%- for message in messages %}"
    "{{- bos_token + message['role'] + '\n' + (message['content'] or '') + eos_token + '\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}"
    "{{- bos_token + 'assistant\n' }}"
    "{%- endif %}";

std::string TokenizerConfigJson(const ZooTokenizer& t, int64_t model_max_length) {
  ojson doc = {{"tokenizer_class", "PreTrainedTokenizerFast"},
               {"bos_token", t.specials[kZooBosId]},
               {"eos_token", t.specials[kZooEosId]},
               {"pad_token", t.specials[kZooPadId]},
               {"unk_token", nullptr},
               {"add_bos_token", false},
               {"add_eos_token", false},
               {"clean_up_tokenization_spaces", false},
               {"model_max_length", model_max_length},
               {"chat_template", kZooChatTemplate}};
  return doc.dump(2) + "\n";
}

}  // namespace expertd::models::zoo
