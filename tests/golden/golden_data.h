// Reads a fixture's golden.json (tests/data/fixtures/README.md) into plain
// structs for the golden tests. Test-only.
#ifndef EXPERTD_TESTS_GOLDEN_GOLDEN_DATA_H_
#define EXPERTD_TESTS_GOLDEN_GOLDEN_DATA_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace expertd::golden {

struct LayerChoice {
  int layer = 0;
  std::vector<std::vector<int32_t>> topk_ids;  // [token][k], router rank order
};

struct GoldenCase {
  std::string name;
  std::vector<int32_t> input_ids;
  std::vector<float> logits_last;
  std::vector<std::vector<float>> logits_all;  // empty when not stored
  std::vector<LayerChoice> router;             // MoE layers only
  std::vector<int32_t> greedy;                 // 16 new tokens
};

struct Golden {
  std::vector<GoldenCase> cases;
  std::vector<GoldenCase> bf16_cases;  // logits_last + greedy only
};

inline std::string FixtureDir(const std::string& arch) { return "tests/data/fixtures/" + arch; }

absl::StatusOr<Golden> LoadGolden(const std::string& arch);

// max |a - b| / max |b|
double RelError(const std::vector<float>& a, const std::vector<float>& b);

}  // namespace expertd::golden

#endif  // EXPERTD_TESTS_GOLDEN_GOLDEN_DATA_H_
