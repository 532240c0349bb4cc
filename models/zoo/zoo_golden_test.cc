// The zoo's default model (what `serve` runs out of the box) must not change
// by accident: regenerating it gives exactly the snapshot pinned in
// tests/data/zoo/default_qwen3_moe (written by this generator), and
// models/tokenizer on its tokenizer.json produces the ids Hugging Face
// `tokenizers` produced for it (recorded in golden.json).
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "models/tokenizer/tokenizer.h"
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

// A snapshot test: the pinned files were written by this same generator, so
// this says the default model did not change, not that it is right (the
// engine's goldens against transformers check the math; the test below checks
// the tokenizer against Hugging Face).
TEST(ZooGoldenTest, DefaultModelMatchesItsSnapshot) {
  const std::string dir = std::string(std::getenv("TEST_TMPDIR")) + "/default";
  ASSERT_TRUE(GenerateModel(*PresetSpec("default", Architecture::kQwen3Moe), dir).ok());
  for (const char* f :
       {"config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json"}) {
    EXPECT_EQ(ReadAll(dir + "/" + f), ReadAll(std::string(kGolden) + "/" + f)) << f << " changed";
  }
  const nlohmann::json golden =
      nlohmann::json::parse(ReadAll(std::string(kGolden) + "/golden.json"));
  const std::string weights = ReadAll(dir + "/model.safetensors");
  EXPECT_EQ(weights.size(), golden["model_safetensors_bytes"].get<size_t>());
  char hex[17];
  std::snprintf(hex, sizeof(hex), "%016llx", static_cast<unsigned long long>(Fnv1a64(weights)));
  EXPECT_EQ(hex, golden["model_safetensors_fnv1a64"].get<std::string>());
}

// The served tokenizer (models/tokenizer) on the snapshot's tokenizer.json
// gives the ids Hugging Face `tokenizers` gave for it.
TEST(ZooGoldenTest, TokenizerEncodesLikeHuggingFace) {
  auto tokenizer = Tokenizer::LoadFromFile(std::string(kGolden) + "/tokenizer.json");
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  const nlohmann::json golden =
      nlohmann::json::parse(ReadAll(std::string(kGolden) + "/golden.json"));
  const nlohmann::json& cases = golden["tokenizer_hf_encodings"]["cases"];
  ASSERT_GE(cases.size(), 5u);
  for (const nlohmann::json& c : cases) {
    const std::string text = c["text"].get<std::string>();
    auto ids = (*tokenizer)->Encode(text, /*add_special_tokens=*/true);  // HF's default
    ASSERT_TRUE(ids.ok()) << ids.status();
    EXPECT_EQ(*ids, c["ids"].get<std::vector<int32_t>>()) << text;
  }
}

}  // namespace
}  // namespace expertd::models::zoo
