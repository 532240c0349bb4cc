// The FP8 oracle's writer: turns a checkpoint directory into
//   fp8_dir/    config.json + quantization_config {fp8, e4m3, block}, and
//               model.safetensors with every quantizable weight as F8_E4M3
//               codes plus `<name>_scale_inv` (F32 or BF16), the rest fp32;
//   dequant_dir/ the original config.json and model.safetensors holding the
//               same weights dequantized to fp32 (DeepSeek's order), so an
//               engine on either directory computes the same function.
// Quantizable = what DeepSeek-V3's published checkpoints quantize: 2-D
// Linear weights except embed_tokens, lm_head and the router (mlp.gate).
// Quantization: models/dtype/fp8_block.h (amax / 448 per block, RNE,
// saturating). With BF16 scales the scale is rounded to bf16 first and the
// codes are computed against the rounded scale.
#ifndef EXPERTD_TESTS_GOLDEN_FP8_CHECKPOINT_H_
#define EXPERTD_TESTS_GOLDEN_FP8_CHECKPOINT_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "models/dtype/dtype.h"

namespace expertd::fp8 {

struct Fp8CheckpointOptions {
  int64_t block_rows = 128, block_cols = 128;
  models::DType scale_dtype = models::DType::kF32;  // kF32 or kBF16
  std::string weights_file;                         // "" = the checkpoint's default
};

// Counts of what was written.
struct Fp8CheckpointStats {
  int64_t quantized_tensors = 0, kept_tensors = 0;
  uint64_t fp8_bytes = 0;    // FP8 codes + scales of the quantized tensors
  uint64_t dense_bytes = 0;  // the same tensors at 2 bytes per element (bf16)
};

absl::Status WriteFp8Checkpoint(const std::string& src_dir, const std::string& fp8_dir,
                                const std::string& dequant_dir, const Fp8CheckpointOptions& options,
                                Fp8CheckpointStats* stats = nullptr);

// True for a tensor DeepSeek-V3's FP8 checkpoints store as FP8.
bool IsQuantizable(const std::string& name, int rank);

}  // namespace expertd::fp8

#endif  // EXPERTD_TESTS_GOLDEN_FP8_CHECKPOINT_H_
