#include "models/checkpoint/gpt_oss_experts.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
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
    return absl::InvalidArgumentError(absl::StrCat(
        "gpt-oss checkpoint: layer ", layer, " stores its experts fused but lacks '", name, "'"));
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

// A uint8 tensor `name` [rows, row_bytes] whose row i is row row_of(i) of
// `src` (rows of row_bytes bytes): a view into src when those rows are
// consecutive, else a copy appended to `storage`.
template <typename RowOf>
void ByteRows(const TensorView& src, std::string name, int64_t rows, int64_t row_bytes,
              RowOf row_of, std::vector<std::unique_ptr<uint64_t[]>>* storage,
              std::vector<TensorView>* out) {
  TensorView v;
  v.name = std::move(name);
  v.dtype = DType::kU8;
  v.shape = {rows, row_bytes};
  v.nbytes = static_cast<uint64_t>(rows * row_bytes);
  v.file = src.file;
  const auto* from = static_cast<const uint8_t*>(src.data);
  bool consecutive = true;
  for (int64_t i = 1; i < rows && consecutive; ++i) consecutive = row_of(i) == row_of(0) + i;
  if (consecutive) {
    v.data = from + row_of(0) * row_bytes;
    v.file_offset = src.file_offset + row_of(0) * row_bytes;
  } else {
    storage->emplace_back(new uint64_t[(v.nbytes + 7) / 8]);
    auto* dst = reinterpret_cast<uint8_t*>(storage->back().get());
    for (int64_t i = 0; i < rows; ++i)
      std::memcpy(dst + i * row_bytes, from + row_of(i) * row_bytes, row_bytes);
    v.data = dst;
    v.file_offset = src.file_offset;
  }
  out->push_back(std::move(v));
}

// One expert's MXFP4 matrix [rows, cols] as its codes (under `name`) and
// scales (Mxfp4ScalesName): row i is row row_of(i) of expert e in blocks
// [E, R, cols / 32, 16] / scales [E, R, cols / 32].
template <typename RowOf>
void Mxfp4Expert(const TensorView& blocks, const TensorView& scales, int64_t e, int64_t rows,
                 int64_t cols, RowOf row_of, const std::string& name,
                 std::vector<std::unique_ptr<uint64_t[]>>* storage, std::vector<TensorView>* out) {
  const int64_t R = blocks.shape[1];
  auto row = [&](int64_t i) { return e * R + row_of(i); };
  ByteRows(blocks, name, rows, cols / 2, row, storage, out);
  ByteRows(scales, Mxfp4ScalesName(name), rows, cols / 32, row, storage, out);
}

absl::StatusOr<const TensorView*> Packed(const Tensors& tensors, const std::string& name,
                                         const std::vector<int64_t>& shape) {
  auto it = tensors.find(name);
  if (it == tensors.end()) {
    return absl::InvalidArgumentError(
        absl::StrCat("gpt-oss MXFP4 checkpoint: no tensor '", name, "'"));
  }
  if (it->second.shape != shape || it->second.dtype != DType::kU8) {
    return absl::InvalidArgumentError(
        absl::StrCat(it->second.file, ": tensor '", name, "' is ", DTypeName(it->second.dtype),
                     " [", absl::StrJoin(it->second.shape, ", "), "], expected uint8 [",
                     absl::StrJoin(shape, ", "), "]"));
  }
  return &it->second;
}

// Layer `layer`'s MXFP4 matrices per expert into `split` (gate and up rows
// copied apart, down viewed in place); the packed tensors' names into
// `consumed`.
absl::Status SplitMxfp4Layer(const ModelConfig& c, const Tensors& tensors, int64_t layer,
                             std::vector<std::unique_ptr<uint64_t[]>>* storage,
                             std::vector<TensorView>* split, std::vector<std::string>* consumed) {
  const int64_t E = c.num_experts, H = c.hidden_size, I = c.moe_intermediate_size;
  if (H % 32 != 0 || I % 32 != 0) {
    return absl::InvalidArgumentError(absl::StrCat("gpt-oss MXFP4 checkpoint: hidden_size ", H,
                                                   " and intermediate_size ", I,
                                                   " must be multiples of 32 (the MXFP4 block)"));
  }
  const std::string gate_up = FusedExpertName(layer, FusedExpertTensor::kGateUp);
  const std::string down = FusedExpertName(layer, FusedExpertTensor::kDown);
  absl::StatusOr<const TensorView*> gu_blocks =
      Packed(tensors, gate_up + "_blocks", {E, 2 * I, H / 32, 16});
  absl::StatusOr<const TensorView*> gu_scales =
      Packed(tensors, gate_up + "_scales", {E, 2 * I, H / 32});
  absl::StatusOr<const TensorView*> d_blocks =
      Packed(tensors, down + "_blocks", {E, H, I / 32, 16});
  absl::StatusOr<const TensorView*> d_scales = Packed(tensors, down + "_scales", {E, H, I / 32});
  for (const auto* s : {&gu_blocks, &gu_scales, &d_blocks, &d_scales}) {
    if (!s->ok()) return s->status();
  }
  for (int64_t e = 0; e < E; ++e) {
    for (int64_t half : {0, 1}) {  // gate: even rows, up: odd ones
      Mxfp4Expert(
          **gu_blocks, **gu_scales, e, I, H, [&](int64_t i) { return 2 * i + half; },
          ExpertWeightName(c, layer, e, half == 0 ? ExpertProj::kGate : ExpertProj::kUp), storage,
          split);
    }
    Mxfp4Expert(
        **d_blocks, **d_scales, e, H, I, [](int64_t i) { return i; },
        ExpertWeightName(c, layer, e, ExpertProj::kDown), storage, split);
  }
  for (const std::string& base : {gate_up, down}) {
    consumed->push_back(base + "_blocks");
    consumed->push_back(base + "_scales");
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status SplitGptOssExperts(const ModelConfig& c, Tensors* tensors,
                                std::vector<std::unique_ptr<uint64_t[]>>* storage) {
  if (c.architecture != Architecture::kGptOss) return absl::OkStatus();
  const int64_t E = c.num_experts, H = c.hidden_size, I = c.moe_intermediate_size;
  using F = FusedExpertTensor;
  using P = ExpertProj;
  for (int64_t layer = 0; layer < c.num_hidden_layers; ++layer) {
    const std::string gate_up_name = FusedExpertName(layer, F::kGateUp);
    const bool mxfp4 = tensors->count(gate_up_name + "_blocks") > 0;
    if (!c.is_moe_layer[layer] || (!mxfp4 && tensors->count(gate_up_name) == 0)) continue;
    std::vector<TensorView> split;
    std::vector<std::string> consumed = {FusedExpertName(layer, F::kGateUpBias),
                                         FusedExpertName(layer, F::kDownBias)};
    if (mxfp4) {
      RETURN_IF_ERROR(SplitMxfp4Layer(c, *tensors, layer, storage, &split, &consumed));
    } else {
      absl::StatusOr<const TensorView*> gate_up = Fused(*tensors, layer, F::kGateUp, {E, H, 2 * I});
      absl::StatusOr<const TensorView*> down = Fused(*tensors, layer, F::kDown, {E, I, H});
      if (!gate_up.ok()) return gate_up.status();
      if (!down.ok()) return down.status();
      for (int64_t e = 0; e < E; ++e) {
        for (int64_t half : {0, 1}) {  // gate: even columns, up: odd ones
          // [I, H] element (i, h) = gate_up[e, h, 2i + half].
          Derive(
              **gate_up, ExpertWeightName(c, layer, e, half == 0 ? P::kGate : P::kUp), {I, H},
              [&](int64_t k) { return (e * H + k % H) * 2 * I + 2 * (k / H) + half; }, storage,
              &split);
        }
        // [H, I] element (h, i) = down[e, i, h].
        Derive(
            **down, ExpertWeightName(c, layer, e, P::kDown), {H, I},
            [&](int64_t k) { return (e * I + k % I) * H + k / I; }, storage, &split);
      }
      consumed.push_back(gate_up_name);
      consumed.push_back(FusedExpertName(layer, F::kDown));
    }
    absl::StatusOr<const TensorView*> gate_up_bias =
        Fused(*tensors, layer, F::kGateUpBias, {E, 2 * I});
    absl::StatusOr<const TensorView*> down_bias = Fused(*tensors, layer, F::kDownBias, {E, H});
    if (!gate_up_bias.ok()) return gate_up_bias.status();
    if (!down_bias.ok()) return down_bias.status();
    for (int64_t e = 0; e < E; ++e) {
      for (int64_t half : {0, 1}) {
        Derive(
            **gate_up_bias, ExpertBiasName(layer, e, half == 0 ? P::kGate : P::kUp), {I},
            [&](int64_t i) { return e * 2 * I + 2 * i + half; }, storage, &split);
      }
      Derive(
          **down_bias, ExpertBiasName(layer, e, P::kDown), {H},
          [&](int64_t h) { return e * H + h; }, storage, &split);
    }
    for (const std::string& name : consumed) tensors->erase(name);
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
