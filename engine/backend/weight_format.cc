#include "engine/backend/weight_format.h"

#include <cmath>
#include <limits>

namespace expertd::engine {

const char* WeightFormatName(WeightFormat f) {
  switch (f) {
    case WeightFormat::kDense:
      return "dense";
    case WeightFormat::kInt8:
      return "int8";
    case WeightFormat::kInt4:
      return "int4";
    case WeightFormat::kMxfp4:
      return "mxfp4";
    case WeightFormat::kFp8E4m3Block:
      return "fp8-block";
  }
  return "unknown";
}

const char* ScaleDTypeName(ScaleDType s) {
  switch (s) {
    case ScaleDType::kNone:
      return "none";
    case ScaleDType::kF32:
      return "f32";
    case ScaleDType::kF16:
      return "f16";
    case ScaleDType::kBF16:
      return "bf16";
    case ScaleDType::kE8M0:
      return "e8m0";
  }
  return "unknown";
}

bool WeightFormatFromCode(uint32_t code, WeightFormat* f) {
  if (code > static_cast<uint32_t>(WeightFormat::kFp8E4m3Block)) return false;
  *f = static_cast<WeightFormat>(code);
  return true;
}

bool ScaleDTypeFromCode(uint32_t code, ScaleDType* s) {
  if (code > static_cast<uint32_t>(ScaleDType::kE8M0)) return false;
  *s = static_cast<ScaleDType>(code);
  return true;
}

uint32_t ScaleDTypeSize(ScaleDType s) {
  switch (s) {
    case ScaleDType::kNone:
      return 0;
    case ScaleDType::kF32:
      return 4;
    case ScaleDType::kF16:
    case ScaleDType::kBF16:
      return 2;
    case ScaleDType::kE8M0:
      return 1;
  }
  return 0;
}

uint32_t WeightFormatBits(WeightFormat f) {
  switch (f) {
    case WeightFormat::kDense:
      return 0;
    case WeightFormat::kInt8:
    case WeightFormat::kFp8E4m3Block:
      return 8;
    case WeightFormat::kInt4:
    case WeightFormat::kMxfp4:
      return 4;
  }
  return 0;
}

uint64_t QuantValueBytes(WeightFormat f, int64_t rows, int64_t cols) {
  const uint64_t row_bytes = (static_cast<uint64_t>(cols) * WeightFormatBits(f) + 7) / 8;
  return row_bytes * static_cast<uint64_t>(rows);
}

uint64_t QuantScaleBytes(const WeightQuant& q, int64_t rows, int64_t cols) {
  return static_cast<uint64_t>(q.scale_rows(rows) * q.scale_cols(cols)) *
         ScaleDTypeSize(q.scale_dtype);
}

float E8m0ToF32(uint8_t e) {
  if (e == 255) return std::numeric_limits<float>::quiet_NaN();
  if (e == 0) return std::ldexp(1.0f, -127);
  return models::BitsToFloat(static_cast<uint32_t>(e) << 23);
}

}  // namespace expertd::engine
