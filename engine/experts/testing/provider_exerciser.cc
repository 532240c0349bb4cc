#include "engine/experts/testing/provider_exerciser.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "models/checkpoint/tensor_names.h"

namespace expertd::engine {
namespace {

WeightRef RouterOf(const WeightSource& w, int layer) {
  const models::ModelConfig& c = w.config();
  auto v = w.Get(models::RouterName(c, layer));
  if (!v.ok()) return WeightRef{};
  return WeightRef{v->data, v->dtype, c.num_experts, c.hidden_size};
}

}  // namespace

RouterInput ProviderExerciser::InputFor(int layer, const float* hidden, int64_t rows) const {
  const models::ModelConfig& c = weights_->config();
  RouterInput in;
  in.layer = layer;
  in.hidden = hidden;
  in.rows = rows;
  in.hidden_size = c.hidden_size;
  for (int64_t next = layer + 1; next < c.num_hidden_layers; ++next) {
    if (c.is_moe_layer[next]) {
      in.next_moe_layer = static_cast<int>(next);
      in.next_router = RouterOf(*weights_, static_cast<int>(next));
      break;
    }
  }
  return in;
}

std::vector<int32_t> ProviderExerciser::RouteRandom(int64_t rows, const ExerciseOptions& o,
                                                    std::mt19937* rng) const {
  const models::ModelConfig& c = weights_->config();
  std::vector<double> weight(c.num_experts);
  for (int64_t e = 0; e < c.num_experts; ++e) weight[e] = 1.0 / std::pow(e + 1.0, o.zipf_s);
  std::vector<int32_t> ids;
  for (int64_t t = 0; t < rows; ++t) {
    std::vector<double> w = weight;
    for (int64_t j = 0; j < c.num_experts_per_tok; ++j) {
      std::discrete_distribution<int32_t> pick(w.begin(), w.end());
      const int32_t e = pick(*rng);
      ids.push_back(e);
      w[e] = 0;
    }
  }
  return ids;
}

absl::StatusOr<std::vector<int32_t>> ProviderExerciser::RouteByRouter(int layer,
                                                                      const float* hidden,
                                                                      int64_t rows) {
  const models::ModelConfig& c = weights_->config();
  const int64_t e = c.num_experts, k = c.num_experts_per_tok;
  std::vector<float> logits(rows * e), weights(rows * k);
  std::vector<int32_t> ids(rows * k);
  MatmulParams mm;
  mm.x = hidden;
  mm.x_stride = c.hidden_size;
  mm.w = RouterOf(*weights_, layer);
  mm.y = logits.data();
  mm.y_stride = e;
  mm.m = rows;
  backend_->Matmul(mm);
  backend_->SoftmaxTopK(
      SoftmaxTopKParams{logits.data(), rows, e, k, false, ids.data(), weights.data()});
  RETURN_IF_ERROR(backend_->Synchronize());
  return ids;
}

absl::Status ProviderExerciser::Verify(int layer, int expert, const ExpertWeights& w) const {
  const models::ModelConfig& c = weights_->config();
  using models::ExpertProj;
  const std::pair<const WeightRef*, ExpertProj> parts[] = {
      {&w.gate, ExpertProj::kGate}, {&w.up, ExpertProj::kUp}, {&w.down, ExpertProj::kDown}};
  for (const auto& [ref, proj] : parts) {
    ASSIGN_OR_RETURN(models::TensorView v,
                     weights_->Get(models::ExpertWeightName(c, layer, expert, proj)));
    std::vector<uint8_t> device(v.nbytes);
    RETURN_IF_ERROR(backend_->CopyToHost(device.data(), ref->data, v.nbytes));
    if (ref->dtype != v.dtype || ref->rows != v.shape[0] || ref->cols != v.shape[1] ||
        std::memcmp(device.data(), v.data, v.nbytes) != 0) {
      return absl::DataLossError(
          absl::StrCat("expert ", layer, ":", expert, " bytes differ from ", v.name));
    }
  }
  return absl::OkStatus();
}

absl::Status ProviderExerciser::Layer(ExpertProvider* p, int layer, const float* hidden,
                                      const ExerciseOptions& o, std::mt19937* rng) {
  const models::ModelConfig& c = weights_->config();
  p->OnRouterInput(InputFor(layer, hidden, o.rows));
  if (!c.is_moe_layer[layer]) return absl::OkStatus();
  std::vector<int32_t> ids;
  if (o.route_by_router) {
    ASSIGN_OR_RETURN(ids, RouteByRouter(layer, hidden, o.rows));
  } else {
    ids = RouteRandom(o.rows, o, rng);
  }
  p->OnTokenRouting(layer, ids, static_cast<int>(c.num_experts_per_tok));
  std::vector<int32_t> experts = ids;
  std::sort(experts.begin(), experts.end());
  experts.erase(std::unique(experts.begin(), experts.end()), experts.end());
  p->OnRouting(layer, experts);
  std::vector<int32_t> order = experts;
  p->OrderForCompute(layer, &order);
  std::vector<int32_t> sorted = order;
  std::sort(sorted.begin(), sorted.end());
  if (sorted != experts) return absl::InternalError("OrderForCompute changed the set of experts");
  for (int32_t e : order) {
    ASSIGN_OR_RETURN(ExpertWeights w, p->Acquire(layer, e));
    ++acquires_;
    absl::Status s = o.verify_bytes ? Verify(layer, e, w) : absl::OkStatus();
    p->Release(layer, e);
    RETURN_IF_ERROR(s);
  }
  return absl::OkStatus();
}

absl::Status ProviderExerciser::Run(ExpertProvider* provider, const ExerciseOptions& o) {
  const models::ModelConfig& c = weights_->config();
  std::mt19937 rng(o.seed);
  std::normal_distribution<float> normal(0, 1);
  std::vector<float> hidden(o.rows * c.hidden_size);
  for (int64_t step = 0; step < o.steps; ++step) {
    for (float& x : hidden) x = normal(rng);
    provider->BeginStep(o.rows);
    absl::Status s;
    for (int layer = 0; layer < c.num_hidden_layers && s.ok(); ++layer) {
      s = Layer(provider, layer, hidden.data(), o, &rng);
      if (s.ok() && o.check) s = o.check();
    }
    provider->EndStep();
    RETURN_IF_ERROR(s);
    if (o.check) RETURN_IF_ERROR(o.check());
  }
  return absl::OkStatus();
}

}  // namespace expertd::engine
