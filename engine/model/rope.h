// Rotary embedding frequencies for a model config, with the scaling variants
// of Hugging Face's modeling_rope_utils (default, linear, llama3, yarn). The
// RoPE op (op_params.h RopeParams) consumes the result.
#ifndef EXPERTD_ENGINE_MODEL_ROPE_H_
#define EXPERTD_ENGINE_MODEL_ROPE_H_

#include <cstdint>
#include <vector>

#include "models/config/model_config.h"

namespace expertd::engine {

struct RopeTable {
  int64_t rotary_dim = 0;         // dims rotated per head (even)
  std::vector<float> inv_freq;    // [rotary_dim / 2]
  float attention_factor = 1.0f;  // multiplies cos and sin (yarn)
};

// inv_freq[i] = 1 / theta^(2i / dim) in fp32 as HF computes it, then scaled:
//   linear: inv_freq / factor
//   llama3: wavelength-dependent blend (low_freq_factor, high_freq_factor,
//           original_max_position_embeddings)
//   yarn:   ramp between interpolation (inv_freq / factor) and extrapolation
//           over [beta_fast, beta_slow] correction dims; attention_factor =
//           0.1 ln(factor) + 1, or mscale(factor, mscale) /
//           mscale(factor, mscale_all_dim) when both are given.
RopeTable ComputeRopeTable(const models::RopeScaling& scaling, double theta, int64_t rotary_dim);

}  // namespace expertd::engine

#endif  // EXPERTD_ENGINE_MODEL_ROPE_H_
