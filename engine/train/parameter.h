// Parameter: one named model tensor as the training engine holds it.
#ifndef EXPERTD_ENGINE_TRAIN_PARAMETER_H_
#define EXPERTD_ENGINE_TRAIN_PARAMETER_H_

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "models/config/model_config.h"

namespace expertd::train {

struct Parameter {
  std::string name;                           // the Hugging Face name
  std::vector<int64_t> shape;                 // row-major
  models::DType dtype = models::DType::kF32;  // how the model stores it
  // The weight the forward pass uses: the stored value converted to fp32
  // (after an optimizer step: the fp32 master rounded to `dtype`, upcast).
  std::vector<float> value;
  // d(loss)/d(value), valid only while has_grad. A parameter that the batch
  // did not touch (a routed expert no token chose), or that is frozen, has
  // none, and the optimizer skips it entirely.
  std::vector<float> grad;
  bool has_grad = false;
  bool trainable = true;
  // A LoRA adapter on this (Linear) weight, or null: the layer computes
  // x W^T + lora_scaling * (x A^T) B^T with A = lora_a (r, in), B = lora_b (out, r).
  Parameter* lora_a = nullptr;
  Parameter* lora_b = nullptr;
  float lora_scaling = 0.0f;

  int64_t numel() const { return static_cast<int64_t>(value.size()); }

  // The gradient buffer to accumulate into, zero-filled on first use in a
  // step; nullptr when the parameter is frozen (its gradient is not needed).
  float* GradForAccumulation() {
    if (!trainable) return nullptr;
    if (!has_grad) {
      grad.assign(value.size(), 0.0f);
      has_grad = true;
    }
    return grad.data();
  }
  void ClearGrad() { has_grad = false; }
};

}  // namespace expertd::train

#endif  // EXPERTD_ENGINE_TRAIN_PARAMETER_H_
