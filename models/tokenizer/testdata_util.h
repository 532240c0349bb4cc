// Test/benchmark helpers: locating and loading the oracle data in testdata/.
#ifndef EXPERTD_MODELS_TOKENIZER_TESTDATA_UTIL_H_
#define EXPERTD_MODELS_TOKENIZER_TESTDATA_UTIL_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "models/tokenizer/tokenizer.h"
#include "nlohmann/json.hpp"

namespace expertd::models::testdata {

// The tokenizers with oracle data (directory names under testdata/).
std::vector<std::string> TokenizerNames();

// Path of testdata/ (works under `bazel test` and `bazel run`).
std::string Dir();

absl::StatusOr<std::string> ReadFile(const std::string& path);

// The tokenizer.json text of `name`; variants (overrides.json) are the base
// file with the listed top-level keys replaced.
absl::StatusOr<std::string> TokenizerJson(const std::string& name);
absl::StatusOr<std::unique_ptr<Tokenizer>> Load(const std::string& name);

// Parsed lines of a JSONL file.
absl::StatusOr<std::vector<nlohmann::json>> ReadJsonl(const std::string& path);

// The raw bytes of a corpus entry ({"text": s} or {"hex": h}).
std::string CorpusInput(const nlohmann::json& entry);

// ~1 MB of mixed text: the valid-UTF-8 corpus entries (without long_* and random*),
// joined by "\n" and repeated until at least `bytes` long. tools/oracle/bench.js
// builds the same text.
absl::StatusOr<std::string> BenchmarkText(size_t bytes);

}  // namespace expertd::models::testdata

#endif  // EXPERTD_MODELS_TOKENIZER_TESTDATA_UTIL_H_
