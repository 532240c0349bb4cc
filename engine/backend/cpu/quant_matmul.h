// y[m, n] (+)= x[m, k] . dequant(w)[n, k]^T + bias[n] for block-quantized
// weights (engine/backend/weight_format.h: int8, int4, mxfp4), dequantizing
// inside the product: no full-width copy of the weight is ever made.
//
// Every variant computes element (r, c) as
//   sum over groups b of  scale[c, b] * (sum over the group of x[r, i] * q[c, i])
// with fp32 FMA, the inner sums kept in vector lanes and one horizontal sum
// at the end, so a row's result does not depend on m, on the other rows or
// on the thread split (batch invariance, op_params.h). Variants differ from
// each other (lane count and lane order) by fp32 rounding only: each is
// tested against the scalar one, which is the reference.
#ifndef EXPERTD_ENGINE_BACKEND_CPU_QUANT_MATMUL_H_
#define EXPERTD_ENGINE_BACKEND_CPU_QUANT_MATMUL_H_

#include <cstdint>

#include "engine/backend/cpu/cpu_features.h"
#include "engine/backend/cpu/thread_pool.h"
#include "engine/backend/op_params.h"

namespace expertd::engine::cpu {

// Columns [c0, c1) of the product, every row. REQUIRES: p.w.quant.quantized(),
// group_size divides k; the AVX2 variant needs group_size % 8 == 0, the
// AVX-512 one % 16 == 0 (QuantMatmul picks a variant that fits).
void QuantMatmulScalar(const MatmulParams& p, int64_t c0, int64_t c1);
void QuantMatmulAvx2(const MatmulParams& p, int64_t c0, int64_t c1);
void QuantMatmulAvx512(const MatmulParams& p, int64_t c0, int64_t c1);
// The two halves of QuantMatmulAvx512. Blocked: group size 32, 64 or 128 and
// k a whole number of 64-byte lines of codes (and k / group_size <= 512); it
// returns false, computing nothing, for any other weight. Generic: any group
// size % 16 == 0 (the per-group tile loop the AVX2 variant also runs).
bool QuantMatmulAvx512Blocked(const MatmulParams& p, int64_t c0, int64_t c1);
void QuantMatmulAvx512Generic(const MatmulParams& p, int64_t c0, int64_t c1);

// The widest variant `isa` allows that fits the weight's group size.
CpuIsa QuantMatmulIsa(const MatmulParams& p, CpuIsa isa);

// The whole product on `pool` (threads split columns) with QuantMatmulIsa(p, isa);
// kFp8E4m3Block runs MatmulFp8 (matmul_fp8.h; AVX-512 when `isa` allows it, else AVX2).
void QuantMatmul(const MatmulParams& p, ThreadPool* pool, CpuIsa isa = BestCpuIsa());

}  // namespace expertd::engine::cpu

#endif  // EXPERTD_ENGINE_BACKEND_CPU_QUANT_MATMUL_H_
