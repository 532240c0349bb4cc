// One unit of the CPU matmul: rows [r0, r1) x columns [c0, c1) of
// y (+)= x . w^T + bias, for any weight format (fp32 / bf16 / fp16, the
// block-quantized ones, FP8 blocks), with the ISA Matmul picks at run time.
//
// A unit performs, for each element it covers, exactly the operations Matmul
// performs for that element (the kernels are batch- and split-invariant:
// op_params.h), so callers that tile work differently (GroupedMatmul) get
// bitwise Matmul's results. It does not use a thread pool.
#ifndef EXPERTD_ENGINE_BACKEND_CPU_MATMUL_UNIT_H_
#define EXPERTD_ENGINE_BACKEND_CPU_MATMUL_UNIT_H_

#include <cstdint>

#include "engine/backend/op_params.h"

namespace expertd::engine::cpu {

// REQUIRES: 0 <= r0 <= r1 <= p.m, 0 <= c0 <= c1 <= p.w.rows; for quantized
// weights c0 is a multiple of 8 (the quantized kernels' column tile).
void MatmulUnit(const MatmulParams& p, int64_t r0, int64_t r1, int64_t c0, int64_t c1);

// The quantized half of MatmulUnit (quant_matmul.cc).
void QuantMatmulUnit(const MatmulParams& p, int64_t r0, int64_t r1, int64_t c0, int64_t c1);

}  // namespace expertd::engine::cpu

#endif  // EXPERTD_ENGINE_BACKEND_CPU_MATMUL_UNIT_H_
