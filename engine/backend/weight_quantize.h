// Round-to-nearest block quantization of weights into the formats of
// weight_format.h, and the exact inverse (dequantization to fp32), the
// reference every quantized kernel is tested against.
//
// Quantize (symmetric, per block of block_rows x group_size elements, amax =
// the block's largest |w|):
//   int8   scale = amax / 127, rounded to scale_dtype; q = round(w / scale)
//          (ties to even), clamped to [-127, 127]
//   int4   q = round(w / scale) (ties to even) clamped to [-8, 7], with the
//          scale, among amax / 7 (the symmetric [-7, 7] grid) and -m / t for
//          t in {7.5, 8, 8.5, 9} (m the block's signed extreme, so it lands on
//          or past the 16th level, -8: llama.cpp Q4_0's grid at t = 8), the one
//          whose rounded scale gives the least squared error over the block;
//          ties keep the earlier candidate. So no block is worse than either
//          the [-7, 7] grid or Q4_0's. The scale may be negative.
//   mxfp4  scale = 2^(floor(log2 amax) - 2) (OCP MX: the block's exponent
//          minus e2m1's largest exponent; an e8m0 byte, clamped to
//          [2^-127, 2^127]); q = the nearest e2m1 value to w / scale (ties to
//          the even code), saturating at +-6
//   fp8-block  (E4M3 codes, fp32 scales, 2-D blocks of block_rows x group_size,
//          the edge blocks possibly short) DeepSeek-V3's quantizer
//          (models/dtype/fp8_block.h): scale = amax / 448, q = E4M3(w / scale)
//          rounded to nearest even, saturating at +-448; a block of zeros
//          gets scale 1
// A block of zeros gets scale 0 (e8m0: 2^-127) and zero codes. Non-finite
// weights are InvalidArgument (a corrupt checkpoint), never silently stored.
// Pure functions, thread-safe.
#ifndef EXPERTD_ENGINE_BACKEND_WEIGHT_QUANTIZE_H_
#define EXPERTD_ENGINE_BACKEND_WEIGHT_QUANTIZE_H_

#include <cstdint>

#include "absl/status/status.h"
#include "engine/backend/weight_format.h"

namespace expertd::engine {

// src [rows, cols] fp32 -> values (QuantValueBytes) and scales
// (QuantScaleBytes) in `q`'s format; q.scales is ignored (output `scales`).
// REQUIRES: q.quantized(), q.group_size divides cols and is even (fp8-block:
// any positive blocks, fp32 scales; InvalidArgument otherwise).
absl::Status QuantizeWeights(const float* src, int64_t rows, int64_t cols, const WeightQuant& q,
                             uint8_t* values, void* scales);

// Names the algorithm QuantizeWeights uses for `f` when it has changed
// since the first release ("" otherwise). Expert packs fold it into their
// source fingerprint, so a pack quantized by an older algorithm is rebuilt.
const char* QuantizerRevision(WeightFormat f);

// values + q.scales -> dst [rows, cols] fp32 (value * scale, exact in fp32
// for every format here).
void DequantizeWeights(const void* values, const WeightQuant& q, int64_t rows, int64_t cols,
                       float* dst);

// The decoded value (before scaling) of element `col` of a row of codes.
inline float DecodeQuantValue(WeightFormat f, const uint8_t* row, int64_t col) {
  switch (f) {
    case WeightFormat::kDense:
      return 0.0f;
    case WeightFormat::kInt8:
      return static_cast<float>(static_cast<int8_t>(row[col]));
    case WeightFormat::kInt4: {
      const int nib = (row[col / 2] >> (4 * (col & 1))) & 0xF;
      return static_cast<float>(nib >= 8 ? nib - 16 : nib);
    }
    case WeightFormat::kMxfp4:
      return kE2m1Values[(row[col / 2] >> (4 * (col & 1))) & 0xF];
    case WeightFormat::kFp8E4m3Block:
      return models::E4m3ToF32(row[col]);
  }
  return 0.0f;
}

}  // namespace expertd::engine

#endif  // EXPERTD_ENGINE_BACKEND_WEIGHT_QUANTIZE_H_
