// The zoo's default model (what `serve` runs out of the box) must not change
// by accident: regenerating it gives exactly the files pinned in
// tests/data/zoo/default_qwen3_moe, and its tokenizer.json produces the ids
// Hugging Face `tokenizers` produced for it (recorded in golden.json).
#include <cstdlib>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "models/zoo/byte_level.h"
#include "models/zoo/generator.h"
#include "models/zoo/zoo_spec.h"
#include "nlohmann/json.hpp"

namespace expertd::models::zoo {
namespace {

const char kGolden[] = "tests/data/zoo/default_qwen3_moe";

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

uint64_t Fnv1a64(const std::string& bytes) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : bytes) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

// Hugging Face's BPE encode for this tokenizer: special tokens first, then the
// GPT-2 split, then merges applied lowest rank first, then vocab lookup.
class ReferenceEncoder {
 public:
  explicit ReferenceEncoder(const nlohmann::json& tok) {
    for (const auto& [token, id] : tok["model"]["vocab"].items()) vocab_[token] = id.get<int>();
    const nlohmann::json& merges = tok["model"]["merges"];
    for (size_t i = 0; i < merges.size(); ++i) {
      const std::string m = merges[i].get<std::string>();
      rank_[{m.substr(0, m.find(' ')), m.substr(m.find(' ') + 1)}] = i;
    }
    for (const nlohmann::json& a : tok["added_tokens"]) specials_[a["content"].get<std::string>()] = a["id"].get<int>();
  }

  std::vector<int> Encode(const std::string& text) const {
    std::vector<int> ids;
    size_t start = 0;
    while (start <= text.size()) {
      size_t best = std::string::npos;
      std::string which;
      for (const auto& [s, id] : specials_) {
        size_t at = text.find(s, start);
        if (at < best) best = at, which = s;
      }
      const size_t end = best == std::string::npos ? text.size() : best;
      for (const std::string& piece : SplitGpt2(text.substr(start, end - start))) EncodePiece(piece, &ids);
      if (best == std::string::npos) break;
      ids.push_back(specials_.at(which));
      start = best + which.size();
    }
    return ids;
  }

 private:
  void EncodePiece(const std::string& piece, std::vector<int>* ids) const {
    std::vector<std::string> syms;
    for (unsigned char c : piece) syms.push_back(ByteToUnicode(c));
    while (syms.size() > 1) {
      size_t best = SIZE_MAX, at = 0;
      for (size_t i = 0; i + 1 < syms.size(); ++i) {
        auto it = rank_.find({syms[i], syms[i + 1]});
        if (it != rank_.end() && it->second < best) best = it->second, at = i;
      }
      if (best == SIZE_MAX) break;
      syms[at] += syms[at + 1];
      syms.erase(syms.begin() + at + 1);
    }
    for (const std::string& s : syms) ids->push_back(vocab_.at(s));
  }

  std::map<std::string, int> vocab_;
  std::map<std::pair<std::string, std::string>, size_t> rank_;
  std::map<std::string, int> specials_;
};

TEST(ZooGoldenTest, DefaultModelIsUnchanged) {
  const std::string dir = std::string(std::getenv("TEST_TMPDIR")) + "/default";
  ASSERT_TRUE(GenerateModel(*PresetSpec("default", Architecture::kQwen3Moe), dir).ok());
  for (const char* f : {"config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json"}) {
    EXPECT_EQ(ReadAll(dir + "/" + f), ReadAll(std::string(kGolden) + "/" + f)) << f << " changed";
  }
  const nlohmann::json golden = nlohmann::json::parse(ReadAll(std::string(kGolden) + "/golden.json"));
  const std::string weights = ReadAll(dir + "/model.safetensors");
  EXPECT_EQ(weights.size(), golden["model_safetensors_bytes"].get<size_t>());
  char hex[17];
  std::snprintf(hex, sizeof(hex), "%016llx", static_cast<unsigned long long>(Fnv1a64(weights)));
  EXPECT_EQ(hex, golden["model_safetensors_fnv1a64"].get<std::string>());
}

TEST(ZooGoldenTest, TokenizerEncodesLikeHuggingFace) {
  const nlohmann::json tok = nlohmann::json::parse(ReadAll(std::string(kGolden) + "/tokenizer.json"));
  const nlohmann::json golden = nlohmann::json::parse(ReadAll(std::string(kGolden) + "/golden.json"));
  ReferenceEncoder encoder(tok);
  const nlohmann::json& cases = golden["tokenizer_hf_encodings"]["cases"];
  ASSERT_GE(cases.size(), 5u);
  for (const nlohmann::json& c : cases) {
    EXPECT_EQ(encoder.Encode(c["text"].get<std::string>()), c["ids"].get<std::vector<int>>()) << c["text"];
  }
}

}  // namespace
}  // namespace expertd::models::zoo
