// Deterministic random weights for zoo models.
//
// Every element is a pure function of (seed, tensor name, element index): a
// counter-based splitmix64 stream per tensor feeds Box-Muller, so values do
// not depend on the order tensors are generated in, on sharding, or on
// threading. Scales follow the reference fixtures' recipe (logits O(1),
// decisive routing): embeddings N(0,1); lm_head and routers 2/sqrt(fan_in);
// other matrices 1/sqrt(fan_in); biases 0.1; norms exactly 1.
#ifndef EXPERTD_MODELS_ZOO_WEIGHT_INIT_H_
#define EXPERTD_MODELS_ZOO_WEIGHT_INIT_H_

#include <cstdint>

#include "absl/strings/string_view.h"
#include "models/checkpoint/expected_tensors.h"
#include "models/config/model_config.h"

namespace expertd::models::zoo {

// The per-tensor stream key.
uint64_t TensorStreamKey(uint64_t seed, absl::string_view tensor_name);

// Writes n standard-normal values of stream `key`, elements [first, first+n).
void StandardNormals(uint64_t key, int64_t first, int64_t n, float* out);

// Standard deviation (or constant, for norms) used for a tensor.
float InitScale(const ExpectedTensor& tensor);

// Fills `dst` (numel(tensor.shape) * DTypeSize(dtype) bytes) with the
// tensor's values in `dtype` (bf16/f16 rounded to nearest even). Uses several
// threads for large tensors; the result is identical either way.
void FillTensor(uint64_t seed, const ExpectedTensor& tensor, DType dtype, uint8_t* dst);

}  // namespace expertd::models::zoo

#endif  // EXPERTD_MODELS_ZOO_WEIGHT_INIT_H_
