#include "models/checkpoint/gpt_oss_experts.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "models/checkpoint/tensor_names.h"

namespace expertd::models {
namespace {

using Tensors = std::map<std::string, TensorView, std::less<>>;

absl::StatusOr<const TensorView*> Fused(const Tensors& tensors, int64_t layer,
                                        FusedExpertTensor which,
                                        const std::vector<int64_t>& shape) {
  const std::string name = FusedExpertName(layer, which);
  auto it = tensors.find(name);
  if (it == tensors.end()) {
    return absl::InvalidArgumentError(absl::StrCat("gpt-oss checkpoint: layer ", layer,
                                                   " stores mlp.experts.gate_up_proj but lacks '",
                                                   name, "'"));
  }
  if (it->second.shape != shape) {
    return absl::InvalidArgumentError(absl::StrCat(
        it->second.file, ": tensor '", name, "' has shape [", absl::StrJoin(it->second.shape, ", "),
        "], expected [", absl::StrJoin(shape, ", "), "]"));
  }
  return &it->second;
}

// A new tensor `name` of `shape` in src's dtype whose element i is src's
// element at(i), appended to `out`.
template <typename At>
void Derive(const TensorView& src, std::string name, std::vector<int64_t> shape, At at,
            std::vector<std::unique_ptr<uint64_t[]>>* storage, std::vector<TensorView>* out) {
  TensorView v;
  v.name = std::move(name);
  v.dtype = src.dtype;
  v.shape = std::move(shape);
  const size_t size = DTypeSize(src.dtype);
  v.nbytes = static_cast<uint64_t>(v.numel()) * size;
  storage->emplace_back(new uint64_t[(v.nbytes + 7) / 8]);
  auto* dst = reinterpret_cast<uint8_t*>(storage->back().get());
  const auto* from = static_cast<const uint8_t*>(src.data);
  for (int64_t i = 0, n = v.numel(); i < n; ++i)
    std::memcpy(dst + i * size, from + at(i) * size, size);
  v.data = dst;
  v.file = src.file;
  v.file_offset = src.file_offset;
  out->push_back(std::move(v));
}

}  // namespace

absl::Status SplitGptOssExperts(const ModelConfig& c, Tensors* tensors,
                                std::vector<std::unique_ptr<uint64_t[]>>* storage) {
  if (c.architecture != Architecture::kGptOss) return absl::OkStatus();
  const int64_t E = c.num_experts, H = c.hidden_size, I = c.moe_intermediate_size;
  for (int64_t layer = 0; layer < c.num_hidden_layers; ++layer) {
    if (!c.is_moe_layer[layer] ||
        tensors->count(FusedExpertName(layer, FusedExpertTensor::kGateUp)) == 0)
      continue;
    using F = FusedExpertTensor;
    absl::StatusOr<const TensorView*> gate_up = Fused(*tensors, layer, F::kGateUp, {E, H, 2 * I});
    absl::StatusOr<const TensorView*> gate_up_bias =
        Fused(*tensors, layer, F::kGateUpBias, {E, 2 * I});
    absl::StatusOr<const TensorView*> down = Fused(*tensors, layer, F::kDown, {E, I, H});
    absl::StatusOr<const TensorView*> down_bias = Fused(*tensors, layer, F::kDownBias, {E, H});
    for (const auto* s : {&gate_up, &gate_up_bias, &down, &down_bias}) {
      if (!s->ok()) return s->status();
    }
    std::vector<TensorView> split;
    for (int64_t e = 0; e < E; ++e) {
      using P = ExpertProj;
      for (int64_t half : {0, 1}) {  // gate: even columns, up: odd ones
        const P proj = half == 0 ? P::kGate : P::kUp;
        // [I, H] element (i, h) = gate_up[e, h, 2i + half].
        Derive(
            **gate_up, ExpertWeightName(c, layer, e, proj), {I, H},
            [&](int64_t k) { return (e * H + k % H) * 2 * I + 2 * (k / H) + half; }, storage,
            &split);
        Derive(
            **gate_up_bias, ExpertBiasName(layer, e, proj), {I},
            [&](int64_t i) { return e * 2 * I + 2 * i + half; }, storage, &split);
      }
      // [H, I] element (h, i) = down[e, i, h].
      Derive(
          **down, ExpertWeightName(c, layer, e, ExpertProj::kDown), {H, I},
          [&](int64_t k) { return (e * I + k % I) * H + k / I; }, storage, &split);
      Derive(
          **down_bias, ExpertBiasName(layer, e, ExpertProj::kDown), {H},
          [&](int64_t h) { return e * H + h; }, storage, &split);
    }
    for (F f : {F::kGateUp, F::kGateUpBias, F::kDown, F::kDownBias})
      tensors->erase(FusedExpertName(layer, f));
    for (TensorView& v : split) {
      if (tensors->count(v.name)) {
        return absl::InvalidArgumentError(absl::StrCat("gpt-oss checkpoint: '", v.name,
                                                       "' is stored beside layer ", layer,
                                                       "'s fused experts"));
      }
      std::string name = v.name;
      tensors->emplace(std::move(name), std::move(v));
    }
  }
  return absl::OkStatus();
}

}  // namespace expertd::models
