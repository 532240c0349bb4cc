#include "engine/train/moe_block.h"

#include <cmath>
#include <cstring>

#include "engine/train/linear.h"
#include "engine/train/ops.h"

namespace expertd::train {

void MlpForward(const MlpParams& p, const float* x, int64_t rows, int64_t hidden, MlpActivations* a,
                ThreadPool* pool) {
  const int64_t f = p.width();
  a->rows = rows;
  a->gate.resize(rows * f);
  a->up.resize(rows * f);
  a->act.resize(rows * f);
  a->out.resize(rows * hidden);
  ParamLinearForward(*p.gate, nullptr, x, a->gate.data(), rows, pool);
  ParamLinearForward(*p.up, nullptr, x, a->up.data(), rows, pool);
  SwiGluForward(a->gate.data(), a->up.data(), a->act.data(), rows * f);
  ParamLinearForward(*p.down, nullptr, a->act.data(), a->out.data(), rows, pool);
}

void MlpBackward(const MlpParams& p, const float* x, const MlpActivations& a, const float* dout,
                 int64_t hidden, float* dx, ThreadPool* pool) {
  const int64_t f = p.width(), rows = a.rows;
  std::vector<float> dact(rows * f, 0.0f), dgate(rows * f), dup(rows * f);
  ParamLinearBackward(p.down, nullptr, a.act.data(), dout, dact.data(), rows, pool);
  SwiGluBackward(a.gate.data(), a.up.data(), dact.data(), dgate.data(), dup.data(), rows * f);
  ParamLinearBackward(p.gate, nullptr, x, dgate.data(), dx, rows, pool);
  ParamLinearBackward(p.up, nullptr, x, dup.data(), dx, rows, pool);
}

void RouteTopK(const float* logits, int64_t n, int64_t num_experts, int64_t top_k, bool normalize,
               float* probs, int32_t* topk_ids, float* topk_weight) {
  std::memcpy(probs, logits, n * num_experts * sizeof(float));
  SoftmaxRows(probs, n, num_experts);
  for (int64_t r = 0; r < n; ++r) {
    const float* pr = probs + r * num_experts;
    int32_t* ids = topk_ids + r * top_k;
    float* w = topk_weight + r * top_k;
    float sum = 0.0f;
    for (int64_t k = 0; k < top_k; ++k) {
      int32_t best = -1;
      for (int32_t e = 0; e < num_experts; ++e) {
        bool taken = false;
        for (int64_t j = 0; j < k; ++j) taken |= ids[j] == e;
        if (!taken && (best < 0 || pr[e] > pr[best])) best = e;
      }
      ids[k] = best;
      w[k] = pr[best];
      sum += w[k];
    }
    if (normalize) {
      for (int64_t k = 0; k < top_k; ++k) w[k] /= sum;
    }
  }
}

void RouteTopKBackward(const float* probs, const int32_t* topk_ids, const float* topk_weight,
                       const float* dweight, int64_t n, int64_t num_experts, int64_t top_k,
                       bool normalize, float* dprobs) {
  for (int64_t r = 0; r < n; ++r) {
    const int32_t* ids = topk_ids + r * top_k;
    const float* dw = dweight + r * top_k;
    float* dp = dprobs + r * num_experts;
    if (!normalize) {
      for (int64_t k = 0; k < top_k; ++k) dp[ids[k]] += dw[k];
      continue;
    }
    // w_k = p_k / S: dp_j = (dw_j - sum_k dw_k w_k) / S.
    const float* w = topk_weight + r * top_k;
    float sum = 0.0f, dot = 0.0f;
    for (int64_t k = 0; k < top_k; ++k) {
      sum += probs[r * num_experts + ids[k]];
      dot += dw[k] * w[k];
    }
    for (int64_t k = 0; k < top_k; ++k) dp[ids[k]] += (dw[k] - dot) / sum;
  }
}

void MoeRoute(const FeedForwardParams& p, const float* x, int64_t n, int64_t hidden,
              FeedForwardActivations* a, ThreadPool* pool) {
  const int64_t e_count = p.router->shape[0], k = p.top_k;
  std::vector<float> logits(n * e_count);
  LinearForward(x, p.router->value.data(), nullptr, logits.data(), n, hidden, e_count, pool);
  a->probs.resize(n * e_count);
  a->topk_ids.resize(n * k);
  a->topk_weight.resize(n * k);
  RouteTopK(logits.data(), n, e_count, k, p.norm_topk_prob, a->probs.data(), a->topk_ids.data(),
            a->topk_weight.data());
  a->expert_rows.assign(e_count, {});
  a->expert_slots.assign(e_count, {});
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t s = 0; s < k; ++s) {
      const int32_t e = a->topk_ids[r * k + s];
      a->expert_rows[e].push_back(static_cast<int32_t>(r));
      a->expert_slots[e].push_back(static_cast<int32_t>(s));
    }
  }
}

void MoeSharedForward(const FeedForwardParams& p, const float* x, int64_t n, int64_t hidden,
                      FeedForwardActivations* a, float* y, ThreadPool* pool) {
  if (p.shared.gate == nullptr) return;
  MlpForward(p.shared, x, n, hidden, &a->shared, pool);
  a->shared_gate_sigmoid.assign(n, 1.0f);
  if (p.shared_gate != nullptr) {
    LinearForward(x, p.shared_gate->value.data(), nullptr, a->shared_gate_sigmoid.data(), n, hidden,
                  1, pool);
    for (float& g : a->shared_gate_sigmoid) g = 1.0f / (1.0f + std::exp(-g));
  }
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t c = 0; c < hidden; ++c) {
      y[r * hidden + c] += a->shared_gate_sigmoid[r] * a->shared.out[r * hidden + c];
    }
  }
}

namespace {

void MoeForward(const FeedForwardParams& p, const float* x, int64_t n, int64_t hidden,
                FeedForwardActivations* a, float* y, ThreadPool* pool) {
  const int64_t e_count = p.router->shape[0], k = p.top_k;
  MoeRoute(p, x, n, hidden, a, pool);
  a->expert_inputs.assign(e_count, {});
  a->expert_acts.assign(e_count, {});
  std::fill(y, y + n * hidden, 0.0f);
  // As HF: y starts at zero and each expert adds weight * output, experts
  // in index order.
  for (int64_t e = 0; e < e_count; ++e) {
    const std::vector<int32_t>& rows = a->expert_rows[e];
    if (rows.empty()) continue;
    std::vector<float>& xe = a->expert_inputs[e];
    xe.resize(rows.size() * hidden);
    for (size_t i = 0; i < rows.size(); ++i) {
      std::memcpy(&xe[i * hidden], x + rows[i] * hidden, hidden * sizeof(float));
    }
    MlpForward(p.experts[e], xe.data(), rows.size(), hidden, &a->expert_acts[e], pool);
    const std::vector<float>& out = a->expert_acts[e].out;
    for (size_t i = 0; i < rows.size(); ++i) {
      const float w = a->topk_weight[rows[i] * k + a->expert_slots[e][i]];
      float* yr = y + rows[i] * hidden;
      for (int64_t c = 0; c < hidden; ++c) yr[c] += out[i * hidden + c] * w;
    }
  }
  MoeSharedForward(p, x, n, hidden, a, y, pool);
}

void SharedExpertBackward(const FeedForwardParams& p, const float* x,
                          const FeedForwardActivations& a, const float* dy, int64_t n,
                          int64_t hidden, float* dx, ThreadPool* pool) {
  std::vector<float> dshared(n * hidden);
  std::vector<float> dgate_logit(n);
  for (int64_t r = 0; r < n; ++r) {
    const float s = a.shared_gate_sigmoid[r];
    float ds = 0.0f;
    for (int64_t c = 0; c < hidden; ++c) {
      dshared[r * hidden + c] = dy[r * hidden + c] * s;
      ds += dy[r * hidden + c] * a.shared.out[r * hidden + c];
    }
    dgate_logit[r] = ds * s * (1.0f - s);
  }
  MlpBackward(p.shared, x, a.shared, dshared.data(), hidden, dx, pool);
  if (p.shared_gate != nullptr) {
    LinearBackward(x, p.shared_gate->value.data(), dgate_logit.data(), dx,
                   p.shared_gate->GradForAccumulation(), nullptr, n, hidden, 1, pool);
  }
}

}  // namespace

void TouchUnusedExpertGrads(const FeedForwardParams& p, int64_t e) {
  // HF's expert loop runs every expert, on zero rows when none was chosen, so
  // autograd gives it a zero gradient (not None): AdamW still decays it and
  // advances its moments.
  for (Parameter* w : {p.experts[e].gate, p.experts[e].up, p.experts[e].down}) {
    w->GradForAccumulation();
    if (w->lora_a != nullptr) {  // PEFT's adapters run on the zero rows too
      w->lora_a->GradForAccumulation();
      w->lora_b->GradForAccumulation();
    }
  }
}

void MoeRouterAndSharedBackward(const FeedForwardParams& p, const float* x,
                                const FeedForwardActivations& a, const float* dy,
                                const std::vector<float>& dweight,
                                const std::vector<float>& aux_dprob, int64_t n, int64_t hidden,
                                float* dx, ThreadPool* pool) {
  const int64_t e_count = p.router->shape[0], k = p.top_k;
  std::vector<float> dprobs(n * e_count, 0.0f), dlogits(n * e_count, 0.0f);
  RouteTopKBackward(a.probs.data(), a.topk_ids.data(), a.topk_weight.data(), dweight.data(), n,
                    e_count, k, p.norm_topk_prob, dprobs.data());
  if (!aux_dprob.empty()) {
    for (int64_t r = 0; r < n; ++r) {
      for (int64_t e = 0; e < e_count; ++e) dprobs[r * e_count + e] += aux_dprob[e];
    }
  }
  SoftmaxBackward(a.probs.data(), dprobs.data(), dlogits.data(), n, e_count);
  LinearBackward(x, p.router->value.data(), dlogits.data(), dx, p.router->GradForAccumulation(),
                 nullptr, n, hidden, e_count, pool);
  if (p.shared.gate != nullptr) SharedExpertBackward(p, x, a, dy, n, hidden, dx, pool);
}

namespace {

void MoeBackward(const FeedForwardParams& p, const float* x, const FeedForwardActivations& a,
                 const float* dy, const std::vector<float>& aux_dprob, int64_t n, int64_t hidden,
                 float* dx, ThreadPool* pool) {
  const int64_t e_count = p.router->shape[0], k = p.top_k;
  std::vector<float> dweight(n * k, 0.0f);
  for (int64_t e = 0; e < e_count; ++e) {
    const std::vector<int32_t>& rows = a.expert_rows[e];
    if (rows.empty()) {
      TouchUnusedExpertGrads(p, e);
      continue;
    }
    const std::vector<float>& out = a.expert_acts[e].out;
    std::vector<float> dout(rows.size() * hidden), dxe(rows.size() * hidden, 0.0f);
    for (size_t i = 0; i < rows.size(); ++i) {
      const int64_t slot = rows[i] * k + a.expert_slots[e][i];
      const float w = a.topk_weight[slot];
      const float* dyr = dy + rows[i] * hidden;
      float dw = 0.0f;
      for (int64_t c = 0; c < hidden; ++c) {
        dout[i * hidden + c] = dyr[c] * w;
        dw += dyr[c] * out[i * hidden + c];
      }
      dweight[slot] = dw;
    }
    MlpBackward(p.experts[e], a.expert_inputs[e].data(), a.expert_acts[e], dout.data(), hidden,
                dxe.data(), pool);
    for (size_t i = 0; i < rows.size(); ++i) {
      for (int64_t c = 0; c < hidden; ++c) dx[rows[i] * hidden + c] += dxe[i * hidden + c];
    }
  }
  MoeRouterAndSharedBackward(p, x, a, dy, dweight, aux_dprob, n, hidden, dx, pool);
}

}  // namespace

absl::Status InMemoryFeedForwardExecutor::Forward(const FeedForwardParams& p, const float* x,
                                                  int64_t n, int64_t hidden,
                                                  FeedForwardActivations* a, float* y,
                                                  ThreadPool* pool) {
  if (!p.moe) {
    MlpForward(p.dense, x, n, hidden, &a->dense, pool);
    std::memcpy(y, a->dense.out.data(), n * hidden * sizeof(float));
    return absl::OkStatus();
  }
  MoeForward(p, x, n, hidden, a, y, pool);
  return absl::OkStatus();
}

absl::Status InMemoryFeedForwardExecutor::Backward(const FeedForwardParams& p, const float* x,
                                                   const FeedForwardActivations& a,
                                                   const float* dy,
                                                   const std::vector<float>& aux_dprob, int64_t n,
                                                   int64_t hidden, float* dx, ThreadPool* pool) {
  if (!p.moe) {
    MlpBackward(p.dense, x, a.dense, dy, hidden, dx, pool);
    return absl::OkStatus();
  }
  MoeBackward(p, x, a, dy, aux_dprob, n, hidden, dx, pool);
  return absl::OkStatus();
}

}  // namespace expertd::train
