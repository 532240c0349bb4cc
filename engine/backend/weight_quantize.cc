#include "engine/backend/weight_quantize.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "models/dtype/fp8_block.h"

namespace expertd::engine {
namespace {

// Stores `scale` as the scale dtype and returns the value it decodes to.
float StoreScale(float scale, ScaleDType dtype, void* scales, int64_t i) {
  switch (dtype) {
    case ScaleDType::kNone:
      return 1.0f;
    case ScaleDType::kF32:
      static_cast<float*>(scales)[i] = scale;
      break;
    case ScaleDType::kF16:
      static_cast<uint16_t*>(scales)[i] = models::F32ToF16(scale);
      break;
    case ScaleDType::kBF16:
      static_cast<uint16_t*>(scales)[i] = models::F32ToBf16(scale);
      break;
    case ScaleDType::kE8M0: {
      // scale is a power of two here: its biased exponent.
      int e = 0;
      std::frexp(scale, &e);  // scale = 0.5 * 2^e
      const int biased = scale == 0.0f ? 0 : std::clamp(e - 1 + 127, 0, 254);
      static_cast<uint8_t*>(scales)[i] = static_cast<uint8_t>(biased);
      break;
    }
  }
  return LoadScaleF32(scales, dtype, i);
}

// Nearest e2m1 code to v (ties to the even code), saturating at +-6.
uint8_t NearestE2m1(float v) {
  const float a = std::fabs(v);
  int best = 0;
  float best_err = a;
  for (int c = 1; c < 8; ++c) {
    const float err = std::fabs(a - kE2m1Values[c]);
    if (err < best_err || (err == best_err && (c & 1) == 0)) {
      best = c;
      best_err = err;
    }
  }
  return static_cast<uint8_t>(best | (std::signbit(v) && best != 0 ? 8 : 0));
}

// The scale of a block whose largest magnitude is amax (before rounding to
// the scale dtype).
float BlockScale(WeightFormat f, float amax) {
  switch (f) {
    case WeightFormat::kDense:
      return 1.0f;
    case WeightFormat::kInt8:
      return amax / 127.0f;
    case WeightFormat::kInt4:  // the first candidate of Int4Scale
      return amax / 7.0f;
    case WeightFormat::kFp8E4m3Block:  // QuantizeFp8 (models/dtype/fp8_block.h)
      return 1.0f;
    case WeightFormat::kMxfp4:
      if (amax == 0.0f) return 0.0f;
      return std::ldexp(1.0f, std::clamp(static_cast<int>(std::floor(std::log2(amax))) - 2,
                                         -127, 127));
  }
  return 1.0f;
}

float Int4Code(float w, float scale) {
  return scale == 0.0f ? 0.0f : std::clamp(std::nearbyint(w / scale), -8.0f, 7.0f);
}

uint8_t Encode(WeightFormat f, float w, float scale) {
  if (f == WeightFormat::kMxfp4) return scale == 0.0f ? 0 : NearestE2m1(w / scale);
  if (f == WeightFormat::kInt4) {
    return static_cast<uint8_t>(static_cast<int8_t>(Int4Code(w, scale))) & 0x0F;
  }
  const float q = scale == 0.0f ? 0.0f : std::clamp(std::nearbyint(w / scale), -127.0f, 127.0f);
  return static_cast<uint8_t>(static_cast<int8_t>(q));
}

// `scale` as the scale dtype stores it.
float RoundScale(float scale, ScaleDType dtype) {
  alignas(8) uint8_t buf[8] = {};
  return StoreScale(scale, dtype, buf, 0);
}

// The int4 block scale (weight_quantize.h): the candidate whose stored
// scale gives the least squared error over rows [r0, r1) x columns [c0, c1).
float Int4Scale(const float* src, int64_t cols, int64_t r0, int64_t r1, int64_t c0, int64_t c1,
                ScaleDType dtype) {
  float amax = 0.0f, extreme = 0.0f;
  for (int64_t r = r0; r < r1; ++r) {
    for (int64_t c = c0; c < c1; ++c) {
      const float w = src[r * cols + c];
      if (std::fabs(w) > amax) {
        amax = std::fabs(w);
        extreme = w;
      }
    }
  }
  if (amax == 0.0f) return 0.0f;
  const float candidates[] = {amax / 7.0f, -extreme / 7.5f, -extreme / 8.0f, -extreme / 8.5f,
                              -extreme / 9.0f};
  float best = candidates[0];
  double best_err = -1.0;
  for (float candidate : candidates) {
    const float s = RoundScale(candidate, dtype);
    double err = 0.0;
    for (int64_t r = r0; r < r1; ++r) {
      for (int64_t c = c0; c < c1; ++c) {
        const float w = src[r * cols + c];
        const double d = static_cast<double>(w) - static_cast<double>(Int4Code(w, s) * s);
        err += d * d;
      }
    }
    if (best_err < 0.0 || err < best_err) {
      best = candidate;
      best_err = err;
    }
  }
  return best;
}

absl::Status CheckFinite(const float* src, int64_t rows, int64_t cols) {
  for (int64_t i = 0; i < rows * cols; ++i) {
    if (!std::isfinite(src[i])) {
      return absl::InvalidArgumentError(absl::StrCat("cannot quantize a non-finite weight at [",
                                                     i / cols, ", ", i % cols, "]"));
    }
  }
  return absl::OkStatus();
}

// E4M3 codes with fp32 scales per block_rows x group_size block, DeepSeek's
// quantizer (models/dtype/fp8_block.h): ragged edge blocks allowed.
absl::Status QuantizeFp8(const float* src, int64_t rows, int64_t cols, const WeightQuant& q,
                         uint8_t* values, void* scales) {
  if (q.scale_dtype != ScaleDType::kF32 || q.group_size <= 0 || q.block_rows <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "fp8-block needs fp32 scales and positive blocks, got ", ScaleDTypeName(q.scale_dtype),
        " scales over [", q.block_rows, ", ", q.group_size, "]"));
  }
  if (absl::Status s = CheckFinite(src, rows, cols); !s.ok()) return s;
  const models::Fp8BlockShape b{rows, cols, q.block_rows, q.group_size};
  models::QuantizeFp8Block(b, src, values, static_cast<float*>(scales));
  return absl::OkStatus();
}

}  // namespace

absl::Status QuantizeWeights(const float* src, int64_t rows, int64_t cols, const WeightQuant& q,
                             uint8_t* values, void* scales) {
  if (q.format == WeightFormat::kFp8E4m3Block) {
    return QuantizeFp8(src, rows, cols, q, values, scales);
  }
  const int64_t groups = q.scale_cols(cols), g = q.group_size, br = q.block_rows;
  const bool nibbles = WeightFormatBits(q.format) == 4;
  const uint64_t row_bytes = QuantValueBytes(q.format, 1, cols);
  std::memset(values, 0, row_bytes * rows);
  for (int64_t r0 = 0; r0 < rows; r0 += br) {
    const int64_t r1 = std::min(rows, r0 + br);
    for (int64_t b = 0; b < groups; ++b) {
      float amax = 0.0f;
      for (int64_t r = r0; r < r1; ++r) {
        for (int64_t c = b * g; c < (b + 1) * g; ++c) {
          const float w = src[r * cols + c];
          if (!std::isfinite(w)) {
            return absl::InvalidArgumentError(
                absl::StrCat("cannot quantize a non-finite weight at [", r, ", ", c, "]"));
          }
          amax = std::max(amax, std::fabs(w));
        }
      }
      const float block_scale =
          q.format == WeightFormat::kInt4
              ? Int4Scale(src, cols, r0, r1, b * g, (b + 1) * g, q.scale_dtype)
              : BlockScale(q.format, amax);
      const float scale = StoreScale(block_scale, q.scale_dtype, scales, (r0 / br) * groups + b);
      for (int64_t r = r0; r < r1; ++r) {
        uint8_t* row = values + r * row_bytes;
        for (int64_t c = b * g; c < (b + 1) * g; ++c) {
          const uint8_t code = Encode(q.format, src[r * cols + c], scale);
          if (nibbles) {
            row[c / 2] |= static_cast<uint8_t>(code << (4 * (c & 1)));
          } else {
            row[c] = code;
          }
        }
      }
    }
  }
  return absl::OkStatus();
}

const char* QuantizerRevision(WeightFormat f) {
  // int4 searched its scale from 2026-11-28 (before: amax / 7 only).
  return f == WeightFormat::kInt4 ? "int4-scale-search" : "";
}

void DequantizeWeights(const void* values, const WeightQuant& q, int64_t rows, int64_t cols,
                       float* dst) {
  const int64_t groups = q.scale_cols(cols);
  const uint64_t row_bytes = QuantValueBytes(q.format, 1, cols);
  for (int64_t r = 0; r < rows; ++r) {
    const uint8_t* row = static_cast<const uint8_t*>(values) + r * row_bytes;
    for (int64_t c = 0; c < cols; ++c) {
      const float s =
          LoadScaleF32(q.scales, q.scale_dtype, ((q.row0 + r) / q.block_rows) * groups + c / q.group_size);
      dst[r * cols + c] = DecodeQuantValue(q.format, row, c) * s;
    }
  }
}

}  // namespace expertd::engine
