// Block-scaled FP8 E4M3, the format DeepSeek-V3/R1 checkpoints use: a weight
// W [rows, cols] is stored as E4M3 codes plus one float scale per
// block_rows x block_cols block (`*_scale_inv` in the checkpoint), and
//   W[i, j] = E4m3ToF32(code[i, j]) * scale_inv[i / block_rows, j / block_cols]
// computed in float32 (DeepSeek's weight_dequant: x.to(float32) * s). Edge
// blocks may be partial. Pure functions, thread-safe.
#ifndef EXPERTD_MODELS_DTYPE_FP8_BLOCK_H_
#define EXPERTD_MODELS_DTYPE_FP8_BLOCK_H_

#include <cstdint>

namespace expertd::models {

struct Fp8BlockShape {
  int64_t rows = 0, cols = 0;  // the weight
  int64_t block_rows = 128, block_cols = 128;
  int64_t scale_rows() const { return (rows + block_rows - 1) / block_rows; }
  int64_t scale_cols() const { return (cols + block_cols - 1) / block_cols; }
};

// out[rows, cols] = the dequantized weight (float32, exact DeepSeek order).
// `scale_inv` is [scale_rows, scale_cols] float32.
void DequantizeFp8Block(const Fp8BlockShape& shape, const uint8_t* codes, const float* scale_inv,
                        float* out);

// Quantizes w [rows, cols] per block the way DeepSeek's reference
// quantizer does: scale_inv = amax(|block|) / 448 (1 for an all-zero block),
// code = E4M3(w / scale_inv) rounded to nearest even, saturating at +-448.
// Writes codes [rows, cols] and scale_inv [scale_rows, scale_cols].
void QuantizeFp8Block(const Fp8BlockShape& shape, const float* w, uint8_t* codes, float* scale_inv);

}  // namespace expertd::models

#endif  // EXPERTD_MODELS_DTYPE_FP8_BLOCK_H_
