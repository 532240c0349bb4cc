// Fuzz target: model.safetensors.index.json (which shard holds each tensor).
#include <cstdint>

#include "models/checkpoint/shard_index.h"
#include "tests/fuzz/fuzz_target.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto index = expertd::models::ParseShardIndex(
      absl::string_view(reinterpret_cast<const char*>(data), size), "model.safetensors.index.json");
  if (!index.ok()) FUZZ_REQUIRE(!index.status().message().empty());
  return 0;
}
