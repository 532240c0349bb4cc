// The block-scaled FP8 E4M3 matmul (MatmulParams with w.quant.format ==
// kFp8E4m3Block; QuantMatmul dispatches here):
// y[m, n] (+)= x[m, k] . dequant(w)[n, k]^T + bias, dequantizing each weight
// element in registers as the product streams (no full-width copy).
//
// Every variant computes element (r, c) as the fp32 kernel does on the
// dequantized weights (matmul.cc): w = fl(E4m3ToF32(code) * scale), FMA over
// k in lane-width steps, a zero-padded tail last, a fixed-order horizontal
// sum, + bias, (+ y). The AVX2 variant (8 lanes) is therefore bitwise equal
// to the fp32 kernel on the dequantized weights; the AVX-512 variant (16
// lanes) sums in a different, equally fixed order. Both are batch-invariant.
//
// Conversion: an E4M3 code's magnitude bits shifted left by 7 are an IEEE
// half of value E4M3 / 256 (subnormals included), so F16C converts it exactly
// and the 256 is folded into the block scale (exact: a power of two).
//
// These are the fp32-activation kernels. With bf16 or int8 activations,
// blocks of 32, 64 or 128 columns that divide k run the bf16 dot-product
// kernel instead (Matmul's dispatch; quant_matmul_avx512bf16.cc).
#ifndef EXPERTD_ENGINE_BACKEND_CPU_MATMUL_FP8_H_
#define EXPERTD_ENGINE_BACKEND_CPU_MATMUL_FP8_H_

#include "engine/backend/cpu/thread_pool.h"
#include "engine/backend/op_params.h"

namespace expertd::engine::cpu {

enum class Fp8Isa { kAvx2, kAvx512 };

// The variant the running CPU supports best (AVX-512 F+BW+VL, else AVX2).
Fp8Isa BestFp8Isa();
const char* Fp8IsaName(Fp8Isa isa);

// REQUIRES: p.w.quant kFp8E4m3Block with fp32 scales, group_size % 16 == 0;
// isa supported by this CPU.
void MatmulFp8(const MatmulParams& p, ThreadPool* pool, Fp8Isa isa);

namespace internal {
// One unit of work: rows [r0, r1) x columns [c0, c1). In matmul_fp8.cc /
// matmul_fp8_avx512.cc (the latter compiled with AVX-512 enabled).
void MatmulFp8UnitAvx2(const MatmulParams& p, int64_t r0, int64_t r1, int64_t c0, int64_t c1);
void MatmulFp8UnitAvx512(const MatmulParams& p, int64_t r0, int64_t r1, int64_t c0, int64_t c1);
}  // namespace internal

}  // namespace expertd::engine::cpu

#endif  // EXPERTD_ENGINE_BACKEND_CPU_MATMUL_FP8_H_
