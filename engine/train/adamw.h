// AdamW exactly as torch.optim.AdamW (torch 1.13 single-tensor path,
// amsgrad off), over fp32 master weights:
//   p *= 1 - lr*wd;  m = b1*m + (1-b1)*g;  v = b2*v + (1-b2)*g*g;
//   p -= (lr / (1 - b1^t)) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)
// with t the parameter's own step count. A parameter without a gradient in a
// step is skipped entirely (no decay, no moments, t does not advance). For a
// bf16/fp16 parameter the update runs on an fp32 master copy and the model
// weight is the master rounded to the stored dtype.
#ifndef EXPERTD_ENGINE_TRAIN_ADAMW_H_
#define EXPERTD_ENGINE_TRAIN_ADAMW_H_

#include <cstdint>
#include <functional>
#include <vector>

#include "engine/backend/cpu/thread_pool.h"
#include "engine/train/parameter.h"

namespace expertd::train {

struct AdamWOptions {
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0.01;
};

// The per-step scalars of one parameter's update, as fp32 (what torch's
// scalar-tensor ops use).
struct AdamWConstants {
  float decay = 1.0f;  // 1 - lr*wd
  float beta1 = 0.9f, one_minus_beta1 = 0.1f;
  float beta2 = 0.999f, one_minus_beta2 = 0.001f;
  float neg_step_size = 0.0f;  // -lr / (1 - b1^t)
  float bias_correction2_sqrt = 1.0f;
  float eps = 1e-8f;
};
AdamWConstants MakeAdamWConstants(const AdamWOptions& o, double lr, int64_t step);

// The update over n elements, in place on p, m, v. The scalar form is the
// reference; the AVX2 and AVX-512 forms do the same IEEE operations in the
// same order (no FMA contraction), so all give bitwise the same result.
// AdamWUpdate picks the widest one this CPU runs (EXPERTD_CPU_ISA caps it).
void AdamWUpdateScalar(const AdamWConstants& c, const float* g, float* p, float* m, float* v,
                       int64_t n);
void AdamWUpdateAvx2(const AdamWConstants& c, const float* g, float* p, float* m, float* v,
                     int64_t n);
// REQUIRES: the CPU supports AVX-512 F.
void AdamWUpdateAvx512(const AdamWConstants& c, const float* g, float* p, float* m, float* v,
                       int64_t n);
void AdamWUpdate(const AdamWConstants& c, const float* g, float* p, float* m, float* v,
                 int64_t n);

struct AdamWParamState {
  int64_t step = 0;
  std::vector<float> m, v;    // empty until the first update
  std::vector<float> master;  // fp32 master copy; empty for an fp32 parameter
};

class AdamW {
 public:
  explicit AdamW(AdamWOptions options) : options_(options) {}

  // Updates every parameter with has_grad at learning rate `lr`.
  // REQUIRES: params is the same list (same order, sizes) on every call.
  void Step(std::vector<Parameter>* params, double lr, engine::ThreadPool* pool);
  // The same, one parameter at a time: Prepare once per step with the
  // parameter count, then StepOne(param, its index in params) for each
  // parameter (in any order; distinct parameters may run concurrently).
  void Prepare(size_t num_params);
  void StepOne(Parameter* param, size_t index, double lr, engine::ThreadPool* pool);

  // For checkpointing: one entry per parameter, in params order.
  std::vector<AdamWParamState>& state() { return state_; }

  // Timeline hooks: `observer` sees each parameter's update as [start, end)
  // in `clock`'s microseconds.
  void set_observer(std::function<void(const Parameter&, int64_t, int64_t)> observer) {
    observer_ = std::move(observer);
  }
  void set_clock(std::function<int64_t()> clock) { clock_ = std::move(clock); }

 private:
  std::function<void(const Parameter&, int64_t, int64_t)> observer_;
  std::function<int64_t()> clock_;
  AdamWOptions options_;
  std::vector<AdamWParamState> state_;
};

}  // namespace expertd::train

#endif  // EXPERTD_ENGINE_TRAIN_ADAMW_H_
