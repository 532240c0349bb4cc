#include "models/tokenizer/testdata_util.h"

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace expertd::models::testdata {

std::vector<std::string> TokenizerNames() {
  return {"gpt2",
          "llama2",
          "llama3",
          "qwen2_5",
          "qwen3",
          "deepseek_v3",
          "llama2_metaspace",
          "llama2_metaspace_always",
          "llama3_added_options",
          "gpt2_digits_nfd",
          "gpt2_misc_a",
          "gpt2_misc_b",
          "llama2_unk",
          "tiny_affixes",
          "tiny_wordpiece",
          "tiny_wordpiece_cased"};
}

std::string Dir() {
  const char* candidates[] = {"TEST_SRCDIR", "RUNFILES_DIR"};
  for (const char* env : candidates) {
    const char* v = std::getenv(env);
    if (v != nullptr) {
      std::string d = absl::StrCat(v, "/expertd/models/tokenizer/testdata");
      if (std::ifstream(d + "/corpus.jsonl")) return d;
    }
  }
  return "models/tokenizer/testdata";
}

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  std::stringstream buf;
  buf << in.rdbuf();
  return buf.str();
}

absl::StatusOr<std::string> TokenizerJson(const std::string& name) {
  std::string dir = absl::StrCat(Dir(), "/", name);
  auto direct = ReadFile(dir + "/tokenizer.json");
  if (direct.ok()) return direct;
  auto over = ReadFile(dir + "/overrides.json");
  if (!over.ok()) return over.status();
  nlohmann::json o = nlohmann::json::parse(*over, nullptr, false);
  if (o.is_discarded()) return absl::InvalidArgumentError("bad overrides.json");
  auto base = ReadFile(absl::StrCat(Dir(), "/", o["base"].get<std::string>(), "/tokenizer.json"));
  if (!base.ok()) return base.status();
  nlohmann::json j = nlohmann::json::parse(*base, nullptr, false);
  // Keys with a dot set a nested field ("model.byte_fallback").
  for (auto it = o["override"].begin(); it != o["override"].end(); ++it) {
    nlohmann::json* target = &j;
    std::string key = it.key();
    for (size_t dot; (dot = key.find('.')) != std::string::npos; key = key.substr(dot + 1)) {
      target = &(*target)[key.substr(0, dot)];
    }
    (*target)[key] = it.value();
  }
  return j.dump();
}

absl::StatusOr<std::unique_ptr<Tokenizer>> Load(const std::string& name) {
  auto json = TokenizerJson(name);
  if (!json.ok()) return json.status();
  return Tokenizer::LoadFromJson(*json);
}

absl::StatusOr<std::vector<nlohmann::json>> ReadJsonl(const std::string& path) {
  auto text = ReadFile(path);
  if (!text.ok()) return text.status();
  std::vector<nlohmann::json> out;
  std::istringstream in(*text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded())
      return absl::InvalidArgumentError(absl::StrCat("bad JSON line in ", path));
    out.push_back(std::move(j));
  }
  return out;
}

std::string CorpusInput(const nlohmann::json& entry) {
  if (entry.contains("text")) return entry["text"].get<std::string>();
  std::string hex = entry["hex"].get<std::string>(), out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) {
    out.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  }
  return out;
}

absl::StatusOr<std::string> BenchmarkText(size_t bytes) {
  auto corpus = ReadJsonl(Dir() + "/corpus.jsonl");
  if (!corpus.ok()) return corpus.status();
  std::string base;
  for (const auto& e : *corpus) {
    const std::string name = e["name"].get<std::string>();
    if (!e.contains("text") || absl::StartsWith(name, "long_") || absl::StartsWith(name, "random"))
      continue;
    absl::StrAppend(&base, e["text"].get<std::string>(), "\n");
  }
  std::string out;
  while (out.size() < bytes) out += base;
  return out;
}

}  // namespace expertd::models::testdata
