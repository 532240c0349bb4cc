// The dense matmul (fp32 / bf16 / fp16 weights, fp32 activations and
// accumulation): y[m, n] (+)= x[m, k] . w[n, k]^T + bias, per ISA.
//
// Every variant computes element (r, c) by the one sequence matmul.cc
// documents: an 8-lane accumulator, FMA over k in steps of 8 (a zero-padded
// tail last), simd.h's HorizontalSum, + bias, (+ y). So the variants are
// bitwise equal to each other, and each is batch- and split-invariant.
//
//  - AVX2 (matmul.cc): R x C register tiles of 8-lane accumulators read
//    straight from the weights; the decode path (m = 1) and the baseline.
//  - AVX-512 (matmul_avx512.cc), for m >= 4 rows: a column panel is widened
//    once into fp32 and laid out so that one 16-lane register holds two
//    columns' 8-lane steps; a tile of 4 rows x 6 such column pairs keeps 24
//    accumulators (48 output elements) in zmm registers, each zmm FMA doing
//    the two columns' 8-lane FMAs. bf16 -> fp32 is exact (shift), so nothing
//    but the instruction width changes.
#ifndef EXPERTD_ENGINE_BACKEND_CPU_MATMUL_DENSE_H_
#define EXPERTD_ENGINE_BACKEND_CPU_MATMUL_DENSE_H_

#include <cstdint>

#include "engine/backend/cpu/cpu_features.h"
#include "engine/backend/cpu/thread_pool.h"
#include "engine/backend/op_params.h"

namespace expertd::engine::cpu {

// The fewest rows for which DenseMatmul runs the AVX-512 kernel.
inline constexpr int64_t kDenseAvx512MinRows = 4;

// The whole product on `pool` (threads split output (row-group,
// column-chunk) units). `isa` caps the kernel: kAvx512 (if the CPU has it)
// runs the AVX-512 kernel when p.m >= kDenseAvx512MinRows, anything else the
// AVX2 one (there is no scalar dense variant; reference_ops.h is the tests'
// reference). REQUIRES: p.w.dtype is kF32, kBF16 or kF16, not quantized.
void DenseMatmul(const MatmulParams& p, ThreadPool* pool, CpuIsa isa = BestCpuIsa());

// The variant DenseMatmul runs for `rows` rows under `isa` on this CPU.
CpuIsa DenseMatmulIsa(int64_t rows, CpuIsa isa);

namespace internal {
// Rows [r0, r1) x columns [c0, c1) of the dense product, one thread.
// Avx512 REQUIRES: CpuSupports(CpuIsa::kAvx512). Defined in matmul.cc and
// matmul_avx512.cc (the latter compiled for AVX-512).
void DenseMatmulUnitAvx2(const MatmulParams& p, int64_t r0, int64_t r1, int64_t c0, int64_t c1);
void DenseMatmulUnitAvx512(const MatmulParams& p, int64_t r0, int64_t r1, int64_t c0, int64_t c1);
}  // namespace internal

}  // namespace expertd::engine::cpu

#endif  // EXPERTD_ENGINE_BACKEND_CPU_MATMUL_DENSE_H_
