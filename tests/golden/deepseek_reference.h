// An independent, deliberately naive DeepSeek-V3 forward pass on the host in
// double precision, written from the reference modeling code's formulas in
// their EXPANDED form: per-head keys and values from kv_b_proj for every
// position, DeepSeek's de-interleave-then-rotate-half RoPE, YaRN and its
// mscale from the formulas in double, grouped sigmoid routing, no KV cache
// (every call recomputes the whole sequence). It shares no code with the
// engine's MLA (absorbed form over the compressed cache), so agreement checks
// the absorption, the cache and the routing on configs the fixture lacks. It
// is itself checked against the fixture's golden logits.
#ifndef EXPERTD_TESTS_GOLDEN_DEEPSEEK_REFERENCE_H_
#define EXPERTD_TESTS_GOLDEN_DEEPSEEK_REFERENCE_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/model/weight_source.h"

namespace expertd::golden {

// Logits [tokens.size(), vocab] of every position.
absl::StatusOr<std::vector<std::vector<double>>> DeepseekReferenceLogits(
    const engine::WeightSource& weights, const std::vector<int32_t>& tokens);

}  // namespace expertd::golden

#endif  // EXPERTD_TESTS_GOLDEN_DEEPSEEK_REFERENCE_H_
