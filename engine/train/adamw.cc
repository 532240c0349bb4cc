#include "engine/train/adamw.h"

#include <immintrin.h>

#include <cmath>

#include "engine/backend/cpu/cpu_features.h"
#include "models/dtype/dtype.h"

namespace expertd::train {

AdamWConstants MakeAdamWConstants(const AdamWOptions& o, double lr, int64_t step) {
  AdamWConstants c;
  c.decay = static_cast<float>(1.0 - lr * o.weight_decay);
  c.beta1 = static_cast<float>(o.beta1);
  c.one_minus_beta1 = static_cast<float>(1.0 - o.beta1);
  c.beta2 = static_cast<float>(o.beta2);
  c.one_minus_beta2 = static_cast<float>(1.0 - o.beta2);
  const double bc1 = 1.0 - std::pow(o.beta1, static_cast<double>(step));
  const double bc2 = 1.0 - std::pow(o.beta2, static_cast<double>(step));
  c.neg_step_size = static_cast<float>(-(lr / bc1));
  c.bias_correction2_sqrt = static_cast<float>(std::sqrt(bc2));
  c.eps = static_cast<float>(o.eps);
  return c;
}

void AdamWUpdateScalar(const AdamWConstants& c, const float* g, float* p, float* m, float* v,
                       int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float gi = g[i];
    const float pi = p[i] * c.decay;
    const float mi = m[i] * c.beta1 + c.one_minus_beta1 * gi;
    const float vi = v[i] * c.beta2 + (c.one_minus_beta2 * gi) * gi;
    const float denom = std::sqrt(vi) / c.bias_correction2_sqrt + c.eps;
    p[i] = pi + (c.neg_step_size * mi) / denom;
    m[i] = mi;
    v[i] = vi;
  }
}

void AdamWUpdateAvx2(const AdamWConstants& c, const float* g, float* p, float* m, float* v,
                     int64_t n) {
  const __m256 decay = _mm256_set1_ps(c.decay), b1 = _mm256_set1_ps(c.beta1);
  const __m256 omb1 = _mm256_set1_ps(c.one_minus_beta1), b2 = _mm256_set1_ps(c.beta2);
  const __m256 omb2 = _mm256_set1_ps(c.one_minus_beta2), step = _mm256_set1_ps(c.neg_step_size);
  const __m256 bc2 = _mm256_set1_ps(c.bias_correction2_sqrt), eps = _mm256_set1_ps(c.eps);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 gi = _mm256_loadu_ps(g + i);
    const __m256 pi = _mm256_mul_ps(_mm256_loadu_ps(p + i), decay);
    const __m256 mi =
        _mm256_add_ps(_mm256_mul_ps(_mm256_loadu_ps(m + i), b1), _mm256_mul_ps(omb1, gi));
    const __m256 vi = _mm256_add_ps(_mm256_mul_ps(_mm256_loadu_ps(v + i), b2),
                                    _mm256_mul_ps(_mm256_mul_ps(omb2, gi), gi));
    const __m256 denom = _mm256_add_ps(_mm256_div_ps(_mm256_sqrt_ps(vi), bc2), eps);
    _mm256_storeu_ps(p + i, _mm256_add_ps(pi, _mm256_div_ps(_mm256_mul_ps(step, mi), denom)));
    _mm256_storeu_ps(m + i, mi);
    _mm256_storeu_ps(v + i, vi);
  }
  AdamWUpdateScalar(c, g + i, p + i, m + i, v + i, n - i);
}

void AdamWUpdate(const AdamWConstants& c, const float* g, float* p, float* m, float* v,
                 int64_t n) {
  switch (engine::cpu::BestCpuIsa()) {
    case engine::cpu::CpuIsa::kAvx512:
      return AdamWUpdateAvx512(c, g, p, m, v, n);
    case engine::cpu::CpuIsa::kAvx2:
      return AdamWUpdateAvx2(c, g, p, m, v, n);
    case engine::cpu::CpuIsa::kScalar:
      return AdamWUpdateScalar(c, g, p, m, v, n);
  }
}

void AdamW::Step(std::vector<Parameter>* params, double lr, engine::ThreadPool* pool) {
  Prepare(params->size());
  for (size_t i = 0; i < params->size(); ++i) StepOne(&(*params)[i], i, lr, pool);
}

void AdamW::Prepare(size_t num_params) {
  if (state_.size() != num_params) state_.resize(num_params);
}

void AdamW::StepOne(Parameter* param, size_t i, double lr, engine::ThreadPool* pool) {
  Parameter& p = *param;
  if (!p.has_grad) return;  // torch: .grad is None -> untouched
  AdamWParamState& s = state_[i];
  if (s.m.empty()) {
    s.m.assign(p.value.size(), 0.0f);
    s.v.assign(p.value.size(), 0.0f);
    if (p.dtype != models::DType::kF32) s.master = p.value;
  }
  const int64_t start_us = observer_ ? clock_() : 0;
  ++s.step;
  const AdamWConstants c = MakeAdamWConstants(options_, lr, s.step);
  float* weights = s.master.empty() ? p.value.data() : s.master.data();
  // Elementwise: chunks are independent, so any split gives the same bits.
  engine::ParallelFor(pool, p.numel(), 1 << 14, [&](int64_t begin, int64_t end) {
    AdamWUpdate(c, p.grad.data() + begin, weights + begin, s.m.data() + begin,
                    s.v.data() + begin, end - begin);
  });
  if (!s.master.empty()) {  // the model weight: master rounded to the stored dtype
    std::vector<uint16_t> rounded(p.value.size());
    models::ConvertFromF32(p.dtype, s.master.data(), rounded.data(), rounded.size());
    models::ConvertToF32(p.dtype, rounded.data(), p.value.data(), rounded.size());
  }
  if (observer_) observer_(p, start_us, clock_());
}

}  // namespace expertd::train
