// Test helper: a tiny synthetic MoE model held in memory (Qwen3-MoE tensor
// names), with deterministic random expert and router weights, for tests and
// benchmarks of the expert store that do not need a checkpoint on disk.
#ifndef EXPERTD_ENGINE_EXPERTS_TESTING_TEST_MODEL_H_
#define EXPERTD_ENGINE_EXPERTS_TESTING_TEST_MODEL_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/model/weight_source.h"
#include "models/config/model_config.h"

namespace expertd::engine {

struct TestModelOptions {
  std::vector<bool> is_moe_layer = {true, false, true, true};
  int64_t num_experts = 8;
  int64_t top_k = 2;
  int64_t hidden = 32;
  int64_t intermediate = 24;
  models::DType dtype = models::DType::kBF16;
  bool pregates = false;  // add model.layers.N.mlp.pregate.weight for N+1 < layers
  uint32_t seed = 1;
};

// Config + routers ("model.layers.N.mlp.gate.weight", fp32) + experts.
std::shared_ptr<InMemoryWeightSource> MakeTestModel(const TestModelOptions& options);

}  // namespace expertd::engine

#endif  // EXPERTD_ENGINE_EXPERTS_TESTING_TEST_MODEL_H_
