// WeightFormat: how a weight tensor's elements are stored, for weights that
// are not plain fp32/fp16/bf16 (block-quantized routed experts).
//
// A quantized [rows, cols] tensor is two arrays:
//   values  row-major; int8: one signed byte per element; int4 / mxfp4: two
//           4-bit codes per byte, the LOW nibble holding the even column
//           (gpt-oss `*_blocks` order); a row is cols * bits / 8 bytes.
//   scales  one per block of `block_rows` rows x `group_size` consecutive
//           columns, row-major over blocks: [ceil(rows / block_rows),
//           cols / group_size], each a `scale_dtype` value.
// Element (r, c) = decode(value) * scale[r / block_rows][c / group_size]:
//   kInt8   decode(q) = q                     (symmetric, q in [-127, 127])
//   kInt4   decode(q) = q, two's complement   (symmetric, q in [-7, 7])
//   kMxfp4  decode(q) = e2m1(q): sign bit 3, {0, .5, 1, 1.5, 2, 3, 4, 6}
//           and scale = 2^(e - 127) from an e8m0 byte (OCP MX v1.0, as
//           gpt-oss publishes its experts), group_size 32.
//   kFp8E4m3Block  decode(q) = e4m3(q) (one byte per element, OCP FP8
//           E4M3FN, models/dtype), fp32 scales over 2-D blocks (DeepSeek-V3:
//           block_rows = group_size = 128); the product decode * scale is
//           rounded to fp32. Its column blocks may be ragged (the last one
//           short): scale_cols = ceil(cols / group_size). A row slice of such
//           a weight keeps its parent's scale grid through `row0`.
// The enum values are stored in files (the expert pack): append, never
// renumber. A reader meeting a code it does not know must refuse the file
// with an error naming the code (FormatFromCode returns false).
#ifndef EXPERTD_ENGINE_BACKEND_WEIGHT_FORMAT_H_
#define EXPERTD_ENGINE_BACKEND_WEIGHT_FORMAT_H_

#include <cstdint>

#include "models/dtype/dtype.h"

namespace expertd::engine {

enum class WeightFormat : uint32_t {
  kDense = 0,  // WeightRef::dtype elements, no scales
  kInt8 = 1,
  kInt4 = 2,
  kMxfp4 = 3,
  kFp8E4m3Block = 4,
};

enum class ScaleDType : uint32_t {
  kNone = 0,  // dense
  kF32 = 1,
  kF16 = 2,
  kBF16 = 3,
  kE8M0 = 4,  // unsigned biased exponent byte: 2^(e - 127); 255 is NaN
};

const char* WeightFormatName(WeightFormat f);  // "dense", "int8", "int4", "mxfp4", "fp8-block"
const char* ScaleDTypeName(ScaleDType s);      // "none", "f32", "f16", "bf16", "e8m0"
// False for a code this build does not know (a newer file).
bool WeightFormatFromCode(uint32_t code, WeightFormat* f);
bool ScaleDTypeFromCode(uint32_t code, ScaleDType* s);
uint32_t ScaleDTypeSize(ScaleDType s);  // bytes; 0 for kNone
// Bits per stored element of a quantized format (0 for kDense).
uint32_t WeightFormatBits(WeightFormat f);

// The quantization of a weight in memory (WeightRef::quant). Non-owning.
struct WeightQuant {
  WeightFormat format = WeightFormat::kDense;
  ScaleDType scale_dtype = ScaleDType::kNone;
  int32_t group_size = 0;        // columns sharing a scale; divides cols (fp8: may not)
  int32_t block_rows = 1;        // rows sharing a scale (2-D blocks when > 1)
  const void* scales = nullptr;  // see the file comment; same memory as the values
  // kFp8E4m3Block only: row r of this tensor is row row0 + r of the scale
  // grid (a row slice of a larger weight); 0 otherwise.
  int64_t row0 = 0;

  bool quantized() const { return format != WeightFormat::kDense; }
  int64_t scale_cols(int64_t cols) const {
    return group_size > 0 ? (cols + group_size - 1) / group_size : 0;
  }
  int64_t scale_rows(int64_t rows) const { return (rows + block_rows - 1) / block_rows; }
};

// The scale grid of a kFp8E4m3Block weight [rows, cols] as the FP8 kernels
// index it (cpu/matmul_fp8.h, cuda/fp8_gemm.cu): element (r, c) is
// E4m3ToF32(code) * scale[((row0 + r) / block_rows) * scale_cols + c / block_cols].
struct Fp8BlockGrid {
  const float* scale = nullptr;
  int64_t scale_cols = 0;  // ceil(cols / block_cols)
  int64_t block_rows = 0;
  int64_t block_cols = 0;  // the kernels need a multiple of 16
  int64_t row0 = 0;
};
// The WeightQuant of an FP8 weight with fp32 block scales `scales`.
inline WeightQuant Fp8BlockQuant(const float* scales, int64_t block_rows, int64_t block_cols,
                                 int64_t row0 = 0) {
  WeightQuant q;
  q.format = WeightFormat::kFp8E4m3Block;
  q.scale_dtype = ScaleDType::kF32;
  q.group_size = static_cast<int32_t>(block_cols);
  q.block_rows = static_cast<int32_t>(block_rows);
  q.scales = scales;
  q.row0 = row0;
  return q;
}
inline Fp8BlockGrid Fp8GridOf(const WeightQuant& q, int64_t cols) {
  return Fp8BlockGrid{static_cast<const float*>(q.scales), q.scale_cols(cols), q.block_rows,
                      q.group_size, q.row0};
}

// Bytes of the values of a quantized [rows, cols] tensor (4-bit rows are
// padded to whole bytes).
uint64_t QuantValueBytes(WeightFormat f, int64_t rows, int64_t cols);
// Bytes of its scales.
uint64_t QuantScaleBytes(const WeightQuant& q, int64_t rows, int64_t cols);

// The 16 e2m1 values (index = 4-bit code).
inline constexpr float kE2m1Values[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                                          -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};

// 2^(e - 127), exact (subnormal for e == 0); NaN for 255.
float E8m0ToF32(uint8_t e);

// Scale i of `scales` as fp32 (exact for every scale dtype).
inline float LoadScaleF32(const void* scales, ScaleDType dtype, int64_t i) {
  switch (dtype) {
    case ScaleDType::kNone:
      return 1.0f;
    case ScaleDType::kF32:
      return static_cast<const float*>(scales)[i];
    case ScaleDType::kF16:
      return models::F16ToF32(static_cast<const uint16_t*>(scales)[i]);
    case ScaleDType::kBF16:
      return models::Bf16ToF32(static_cast<const uint16_t*>(scales)[i]);
    case ScaleDType::kE8M0:
      return E8m0ToF32(static_cast<const uint8_t*>(scales)[i]);
  }
  return 1.0f;
}

}  // namespace expertd::engine

#endif  // EXPERTD_ENGINE_BACKEND_WEIGHT_FORMAT_H_
