#include "engine/train/linear.h"

#include <vector>

namespace expertd::train {

void ParamLinearForward(const Parameter& w, const Parameter* bias, const float* x, float* y,
                        int64_t n, ThreadPool* pool) {
  const int64_t out = w.shape[0], in = w.shape[1];
  LinearForward(x, w.value.data(), bias != nullptr ? bias->value.data() : nullptr, y, n, in, out,
                pool);
  if (w.lora_a == nullptr) return;
  const int64_t r = w.lora_a->shape[0];
  std::vector<float> u(n * r), delta(n * out);
  LinearForward(x, w.lora_a->value.data(), nullptr, u.data(), n, in, r, pool);
  for (float& v : u) v *= w.lora_scaling;
  LinearForward(u.data(), w.lora_b->value.data(), nullptr, delta.data(), n, r, out, pool);
  for (int64_t i = 0; i < n * out; ++i) y[i] += delta[i];
}

void ParamLinearBackward(Parameter* w, Parameter* bias, const float* x, const float* dy, float* dx,
                         int64_t n, ThreadPool* pool) {
  const int64_t out = w->shape[0], in = w->shape[1];
  LinearBackward(x, w->value.data(), dy, dx, w->GradForAccumulation(),
                 bias != nullptr ? bias->GradForAccumulation() : nullptr, n, in, out, pool);
  if (w->lora_a == nullptr) return;
  // y += s * (x A^T) B^T: with u = s * x A^T, dB += dy^T u; du = dy B;
  // dA += s * du^T x; dx += s * du A.
  Parameter* a = w->lora_a;
  Parameter* b = w->lora_b;
  const int64_t r = a->shape[0];
  std::vector<float> u(n * r), du(n * r, 0.0f);
  LinearForward(x, a->value.data(), nullptr, u.data(), n, in, r, pool);
  for (float& v : u) v *= w->lora_scaling;
  LinearBackward(u.data(), b->value.data(), dy, du.data(), b->GradForAccumulation(), nullptr, n, r,
                 out, pool);
  for (float& v : du) v *= w->lora_scaling;
  LinearBackward(x, a->value.data(), du.data(), dx, a->GradForAccumulation(), nullptr, n, in, r,
                 pool);
}

}  // namespace expertd::train
