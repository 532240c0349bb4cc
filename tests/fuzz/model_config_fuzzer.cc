// Fuzz target: config.json and generation_config.json parsing. The input is
// split at the first NUL: config.json before it, generation_config.json
// after it (when present).
#include <cstdint>
#include <string>

#include "models/config/model_config.h"
#include "tests/fuzz/fuzz_target.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace expertd::models;
  const absl::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t nul = input.find('\0');
  auto config = ParseModelConfig(input.substr(0, nul), "config.json");
  if (!config.ok()) {
    FUZZ_REQUIRE(config.status().code() == absl::StatusCode::kInvalidArgument ||
                 config.status().code() == absl::StatusCode::kUnimplemented);
    return 0;
  }
  FUZZ_REQUIRE(config->vocab_size > 0 && config->num_hidden_layers > 0);
  FUZZ_REQUIRE(config->num_experts_per_tok <= config->num_experts || config->num_experts == 0);
  (void)config->TotalParams();
  (void)config->ActiveParamsPerToken();
  if (nul != absl::string_view::npos) {
    ModelConfig c = *config;
    absl::Status s = ApplyGenerationConfigJson(input.substr(nul + 1), "generation_config.json", &c);
    if (s.ok()) {
      for (int32_t id : c.eos_token_ids) FUZZ_REQUIRE(id >= 0 && id < c.vocab_size);
    }
  }
  return 0;
}
