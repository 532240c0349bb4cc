// A Linear layer over Parameters: y = x W^T + b, plus the weight's LoRA
// adapter when one is attached (Parameter::lora_a/lora_b). Shapes come from
// the weight: W (out, in), x (n, in), y (n, out).
#ifndef EXPERTD_ENGINE_TRAIN_LINEAR_H_
#define EXPERTD_ENGINE_TRAIN_LINEAR_H_

#include <cstdint>

#include "engine/train/ops.h"
#include "engine/train/parameter.h"

namespace expertd::train {

// Writes y.
void ParamLinearForward(const Parameter& w, const Parameter* bias, const float* x, float* y,
                        int64_t n, ThreadPool* pool);
// dx (may be null) += d/dx; gradients of w, bias and the adapter accumulate
// (frozen ones are skipped). The adapter's x A^T is recomputed, not saved.
void ParamLinearBackward(Parameter* w, Parameter* bias, const float* x, const float* dy, float* dx,
                         int64_t n, ThreadPool* pool);

}  // namespace expertd::train

#endif  // EXPERTD_ENGINE_TRAIN_LINEAR_H_
