#include "tests/golden/fp8_checkpoint.h"

#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "models/checkpoint/checkpoint.h"
#include "models/dtype/fp8_block.h"
#include "models/safetensors/safetensors_writer.h"
#include "nlohmann/json.hpp"

namespace expertd::fp8 {
namespace {

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", path));
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

absl::Status WriteFile(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
  out.close();
  if (!out) return absl::InternalError(absl::StrCat("cannot write ", path));
  return absl::OkStatus();
}

// One tensor's bytes for each output file (storage owned here).
struct Converted {
  std::vector<uint8_t> fp8_bytes;  // codes (quantized) or fp32 (kept)
  std::vector<uint8_t> scale_bytes;
  std::vector<float> dequant;
};

void Quantize(const Fp8CheckpointOptions& o, int64_t rows, int64_t cols,
              const std::vector<float>& w, Converted* out) {
  const models::Fp8BlockShape shape{rows, cols, o.block_rows, o.block_cols};
  const int64_t nscale = shape.scale_rows() * shape.scale_cols();
  std::vector<float> scale(nscale);
  out->fp8_bytes.resize(rows * cols);
  models::QuantizeFp8Block(shape, w.data(), out->fp8_bytes.data(), scale.data());
  if (o.scale_dtype == models::DType::kBF16) {  // re-quantize against the stored bf16 scale
    for (float& s : scale) s = models::Bf16ToF32(models::F32ToBf16(s));
    for (int64_t i = 0; i < rows; ++i) {
      for (int64_t j = 0; j < cols; ++j) {
        const float s = scale[(i / o.block_rows) * shape.scale_cols() + j / o.block_cols];
        out->fp8_bytes[i * cols + j] = models::F32ToE4m3(w[i * cols + j] / s);
      }
    }
  }
  out->scale_bytes.resize(nscale * models::DTypeSize(o.scale_dtype));
  models::ConvertFromF32(o.scale_dtype, scale.data(), out->scale_bytes.data(), nscale);
  out->dequant.resize(rows * cols);
  models::DequantizeFp8Block(shape, out->fp8_bytes.data(), scale.data(), out->dequant.data());
}

}  // namespace

bool IsQuantizable(const std::string& name, int rank) {
  return rank == 2 && absl::EndsWith(name, ".weight") && name != "model.embed_tokens.weight" &&
         name != "lm_head.weight" && !absl::EndsWith(name, ".mlp.gate.weight");
}

absl::Status WriteFp8Checkpoint(const std::string& src_dir, const std::string& fp8_dir,
                                const std::string& dequant_dir, const Fp8CheckpointOptions& o,
                                Fp8CheckpointStats* stats) {
  if (o.scale_dtype != models::DType::kF32 && o.scale_dtype != models::DType::kBF16)
    return absl::InvalidArgumentError("FP8 scales must be F32 or BF16");
  models::CheckpointOptions co;
  co.weights_file = o.weights_file;
  ASSIGN_OR_RETURN(std::unique_ptr<models::Checkpoint> src, models::Checkpoint::Open(src_dir, co));
  ASSIGN_OR_RETURN(std::string config_text, ReadFile(src_dir + "/config.json"));
  nlohmann::json config = nlohmann::json::parse(config_text, nullptr, /*allow_exceptions=*/false);
  if (config.is_discarded()) return absl::InvalidArgumentError("config.json is not JSON");
  config["quantization_config"] = {{"quant_method", "fp8"},
                                   {"fmt", "e4m3"},
                                   {"activation_scheme", "dynamic"},
                                   {"weight_block_size", {o.block_rows, o.block_cols}}};
  std::filesystem::create_directories(fp8_dir);
  std::filesystem::create_directories(dequant_dir);
  RETURN_IF_ERROR(WriteFile(fp8_dir + "/config.json", config.dump(2)));
  RETURN_IF_ERROR(WriteFile(dequant_dir + "/config.json", config_text));

  Fp8CheckpointStats st;
  std::vector<std::unique_ptr<Converted>> store;
  std::vector<models::TensorToWrite> fp8_out, dequant_out;
  for (const std::string& name : src->Names()) {
    ASSIGN_OR_RETURN(models::TensorView v, src->Get(name));
    auto c = std::make_unique<Converted>();
    std::vector<float> w(v.numel());
    models::ConvertToF32(v.dtype, v.data, w.data(), w.size());
    if (IsQuantizable(name, static_cast<int>(v.shape.size()))) {
      Quantize(o, v.shape[0], v.shape[1], w, c.get());
      const models::Fp8BlockShape shape{v.shape[0], v.shape[1], o.block_rows, o.block_cols};
      fp8_out.push_back({{name, models::DType::kF8E4M3, v.shape}, c->fp8_bytes.data()});
      fp8_out.push_back(
          {{name + "_scale_inv", o.scale_dtype, {shape.scale_rows(), shape.scale_cols()}},
           c->scale_bytes.data()});
      dequant_out.push_back({{name, models::DType::kF32, v.shape}, c->dequant.data()});
      ++st.quantized_tensors;
      st.fp8_bytes += c->fp8_bytes.size() + c->scale_bytes.size();
      st.dense_bytes += 2 * c->fp8_bytes.size();
    } else {
      c->dequant = std::move(w);
      fp8_out.push_back({{name, models::DType::kF32, v.shape}, c->dequant.data()});
      dequant_out.push_back({{name, models::DType::kF32, v.shape}, c->dequant.data()});
      ++st.kept_tensors;
    }
    store.push_back(std::move(c));
  }
  RETURN_IF_ERROR(models::WriteSafetensors(fp8_dir + "/model.safetensors", fp8_out));
  RETURN_IF_ERROR(models::WriteSafetensors(dequant_dir + "/model.safetensors", dequant_out));
  if (stats != nullptr) *stats = st;
  return absl::OkStatus();
}

}  // namespace expertd::fp8
