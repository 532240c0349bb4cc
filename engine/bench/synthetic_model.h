// Synthetic models held in memory: a zoo spec's config with every tensor of
// models::ExpectedTensors filled by the zoo's deterministic initialiser. For
// benchmarks (and tests) that need real shapes without a file on disk.
#ifndef EXPERTD_ENGINE_BENCH_SYNTHETIC_MODEL_H_
#define EXPERTD_ENGINE_BENCH_SYNTHETIC_MODEL_H_

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "engine/model/weight_source.h"
#include "models/zoo/zoo_spec.h"

namespace expertd::engine {

// Every tensor in spec.dtype. InvalidArgument if the spec's config does not parse.
absl::StatusOr<std::shared_ptr<InMemoryWeightSource>> SyntheticWeights(
    const models::zoo::ZooSpec& spec);

// Bytes of weights one decode token reads (batch 1): embedding row, every
// layer's norms + attention + router + top_k routed experts (+ shared
// expert / dense MLP), final norm, LM head.
uint64_t DecodeBytesTouched(const models::ModelConfig& config, models::DType dtype);

}  // namespace expertd::engine

#endif  // EXPERTD_ENGINE_BENCH_SYNTHETIC_MODEL_H_
