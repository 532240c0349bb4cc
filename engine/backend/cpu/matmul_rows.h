// Where row r of a CPU matmul reads x and writes y: row r itself, or, with
// MatmulParams' row maps, the token rows they name (op_params.h). Every
// kernel that takes the maps natively reads x and writes y only through
// these; Matmul runs the others on copies (matmul.cc, MatmulThroughCopies).
#ifndef EXPERTD_ENGINE_BACKEND_CPU_MATMUL_ROWS_H_
#define EXPERTD_ENGINE_BACKEND_CPU_MATMUL_ROWS_H_

#include <cstdint>

#include "engine/backend/cpu/simd.h"
#include "engine/backend/op_params.h"

namespace expertd::engine::cpu {

inline bool HasRowMaps(const MatmulParams& p) {
  return p.x_rows != nullptr || p.y_rows != nullptr;
}

inline const float* XRow(const MatmulParams& p, int64_t r) {
  const int64_t row = p.x_rows == nullptr ? r : p.x_rows[r];
  return p.x + row * p.x_stride;
}

inline float* YRow(const MatmulParams& p, int64_t r) {
  const int64_t row = p.y_rows == nullptr ? r : p.y_rows[r];
  return p.y + row * p.y_stride;
}

// The factor row r's results take before they are stored (only read when
// p.row_weights is set).
inline float RowWeight(const MatmulParams& p, int64_t r) {
  return p.row_weights[p.row_weight_index[r]];
}

// Finishes element (r, c) from its sum v: + bias, * the row's weight,
// (+ y). Scalar code: the kernels are compiled with -ffp-contract=off, so
// the product is rounded before the addition, as MoeScatterAdd's is.
inline void StoreElement(const MatmulParams& p, int64_t r, int64_t c, float v) {
  if (!p.bias.empty()) v = v + LoadScalar(p.bias.data, p.bias.dtype, c);
  if (p.row_weights != nullptr) v = RowWeight(p, r) * v;
  float* y = YRow(p, r) + c;
  *y = p.accumulate ? *y + v : v;
}

}  // namespace expertd::engine::cpu

#endif  // EXPERTD_ENGINE_BACKEND_CPU_MATMUL_ROWS_H_
