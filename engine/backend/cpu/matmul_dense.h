// The dense matmul (fp32 / bf16 / fp16 weights, fp32 activations and
// accumulation): y[m, n] (+)= x[m, k] . w[n, k]^T + bias, per ISA.
//
// Every variant computes element (r, c) by one fixed sequence per weight
// dtype, so the variants are bitwise equal to each other, and each is batch-
// and split-invariant (a row gives the same bits alone, at any position of
// any batch, on any ISA variant and in any MatmulUnit split).
//
// fp32 and fp16 weights (simd.h's DotF32 order): an 8-lane accumulator, FMA
// over k in steps of 8 (a zero-padded tail last), simd.h's HorizontalSum,
// + bias, (+ y).
//
// bf16 weights: one 16-lane accumulator acc[0..16); for each block of 32 k
// elements kk = 0, 32, ... in order (the k % 32 tail zero-padded, x and w,
// into a last full block):
//   acc[j] = fma(x[kk + 2j],     w[kk + 2j],     acc[j])   for j < 16, then
//   acc[j] = fma(x[kk + 2j + 1], w[kk + 2j + 1], acc[j])   for j < 16;
// then s[l] = acc[l] + acc[l + 8] (l < 8), HorizontalSum(s), + bias, (+ y).
// Why: bf16 -> fp32 is exact and free on a u32 pair (the even element is
// u32 << 16, the odd one u32 & 0xFFFF0000), so one load of 32 weights gives
// the even and odd vectors with one shift and one and; x is permuted once
// per row and call into the same even / odd order (simd.h PermuteBf16X).
// reference_ops.h has the scalar form of both sequences (the tests' oracle).
//
//  - AVX2 (matmul_avx2.cc): R x C register tiles read straight from the weights;
//    the baseline. For bf16 the 16-lane accumulator is two ymm (lanes 0-7
//    from weights [kk, kk + 16), lanes 8-15 from [kk + 16, kk + 32)), each
//    fed the even then the odd products: the same FMAs per lane, in order.
//  - AVX-512 (matmul_avx512.cc), for m >= 4 rows: a column panel is widened
//    once into fp32; fp32 / fp16 lay it out so that one 16-lane register
//    holds two columns' 8-lane steps (a tile of 4 rows x 6 such column pairs
//    keeps 24 accumulators in zmm registers), bf16 as each column's even and
//    odd 16-float vectors per 32-block (a tile of 4 rows x 6 columns, one zmm
//    accumulator each). For bf16 it also runs m < 4 (decode): tiles of 2-4
//    columns read the weights directly (one 64-byte load, shift, and, two
//    FMAs per 32 weights and row).
//
// bf16 weights with MatmulActivations::kBF16 (any m; matmul_avx512bf16.cc,
// AVX-512-BF16 only): x rounded to bf16 (nearest even), then the bf16
// sequence's 16-lane accumulator and reduction with each block's step being
// one bf16 dot-product instruction per lane j:
//   acc[j] = fma(bx[kk + 2j + 1], w[kk + 2j + 1], acc[j]), then
//   acc[j] = fma(bx[kk + 2j],     w[kk + 2j],     acc[j])
// (odd first; inputs and results below FLT_MIN flushed to zero), so one
// vdpbf16ps replaces two FMAs, the shift and the and, and the weights need no
// widening. A different result from the fp32-activation sequence (x loses
// its low 16 bits), the same for every m, tile and split.
#ifndef EXPERTD_ENGINE_BACKEND_CPU_MATMUL_DENSE_H_
#define EXPERTD_ENGINE_BACKEND_CPU_MATMUL_DENSE_H_

#include <cstdint>

#include "engine/backend/cpu/cpu_features.h"
#include "engine/backend/cpu/thread_pool.h"
#include "engine/backend/op_params.h"

namespace expertd::engine::cpu {

// The fewest rows for which DenseMatmul runs the AVX-512 kernel.
inline constexpr int64_t kDenseAvx512MinRows = 4;
// Rows per unit of the bf16-activation kernel at m >= 4 (bf16 [2048, 2048]
// x 512 rows, 2 threads: 804-806 GFLOP/s with 128, 786-792 with 64, 772-775
// with 256).
inline constexpr int64_t kBf16DotRowGroup = 128;

// Whether p runs a bf16-activation sequence: activations kBF16 and dense
// bf16 weights or FP8 E4M3 blocks of 32, 64 or 128 columns that divide k
// (fp32 scales), or int8 / int4 / mxfp4 codes with groups of 32, 64 or 128
// (quant_matmul_avx512bf16.cc; and CpuSupportsQuantBf16Dot()); or kInt8,
// the same dense and FP8 weights, on a CPU with CpuSupportsBf16Dot() (on
// others they run the fp32 sequence). REQUIRES for kBF16:
// CpuSupportsBf16Dot().
bool UsesBf16Dot(const MatmulParams& p);
// Whether p runs the int8-activation sequence: activations kInt8 and int8 /
// int4 / mxfp4 codes with groups of 32, 64 or 128 (quant_matmul_avx512vnni.cc
// where CpuSupportsInt8Dot(), else quant_matmul_avx2_int8.cc). REQUIRES
// then: CpuSupportsInt8Activations().
bool UsesInt8Dot(const MatmulParams& p);
// Whether the kernel p runs reads x and writes y through matmul_rows.h (the
// dense kernels, any activations, and the quantized bf16-dot one); Matmul
// runs the others' row maps on copies.
bool KernelTakesRowMaps(const MatmulParams& p);

// The whole product on `pool` (threads split output (row-group,
// column-chunk) units). `isa` caps the kernel: kAvx512 (if the CPU has it)
// runs the AVX-512 kernel when p.m >= kDenseAvx512MinRows or the weights are
// bf16, anything else the AVX2 one (there is no scalar dense variant; reference_ops.h is the tests'
// reference). REQUIRES: p.w.dtype is kF32, kBF16 or kF16, not quantized.
void DenseMatmul(const MatmulParams& p, ThreadPool* pool, CpuIsa isa = BestCpuIsa());

// The variant DenseMatmul runs for `rows` rows of `dtype` weights under
// `isa` on this CPU.
CpuIsa DenseMatmulIsa(int64_t rows, DType dtype, CpuIsa isa);

namespace internal {
// Rows [r0, r1) x columns [c0, c1) of the dense product, one thread.
// Avx512 REQUIRES: CpuSupports(CpuIsa::kAvx512). Defined in matmul_avx2.cc
// and matmul_avx512.cc (the latter compiled for AVX-512).
void DenseMatmulUnitAvx2(const MatmulParams& p, int64_t r0, int64_t r1, int64_t c0, int64_t c1);
void DenseMatmulUnitAvx512(const MatmulParams& p, int64_t r0, int64_t r1, int64_t c0, int64_t c1);
// The bf16-activation sequence (matmul_avx512bf16.cc). REQUIRES:
// UsesBf16Dot(p).
void DenseMatmulUnitAvx512Bf16(const MatmulParams& p, int64_t r0, int64_t r1, int64_t c0,
                               int64_t c1);
// Rows [r0, r1) of p.x rounded to bf16 (nearest even) into out, row r at
// out + (r - r0) * kp (kp >= p.w.cols, a multiple of 32; 64-byte aligned
// rows), zeros past p.w.cols. REQUIRES: CpuSupportsBf16Dot().
void RoundRowsToBf16(const MatmulParams& p, int64_t r0, int64_t r1, int64_t kp, uint16_t* out);
// Quantized weights with bf16 activations (quant_matmul_avx512bf16.cc).
// REQUIRES: UsesBf16Dot(p) and p.w.quant.quantized().
void QuantMatmulUnitAvx512Bf16(const MatmulParams& p, int64_t r0, int64_t r1, int64_t c0,
                               int64_t c1);
// Quantized weights with int8 activations: x quantized per 32-block
// (reference_ops.h QuantizeInt8Block) into Int8Rows, then exact integer
// products. Two kernels compute the same bits: AVX-512-VNNI
// (quant_matmul_avx512vnni.cc) where CpuSupportsInt8Dot(), AVX2
// (quant_matmul_avx2_int8.cc) elsewhere; the functions without an ISA in
// their name pick it. Units take columns in multiples of kInt8TileCols.
inline constexpr int kInt8TileCols = 32;
// Rows of x quantized for those kernels: row i's k bytes at codes + i * k,
// in the layout the kernel and p.w's format need (int8: as x; 4-bit
// formats, VNNI: per chunk of 128 values its even values, then its odd
// ones; AVX2: per 32-block), its 32-blocks' scales at d + i * k / 32 and
// -bias * sum(q) at corr + i * k / 32 (the bias the kernel adds to codes).
struct Int8Rows {
  int8_t* codes;
  float* d;
  int32_t* corr;
  // The view whose row 0 is this one's row `row`.
  Int8Rows From(int64_t row, int64_t k) const {
    return Int8Rows{codes + row * k, d + row * (k / 32), corr + row * (k / 32)};
  }
};
// Rows [r0, r1) of p.x into out (row r at index r - r0). REQUIRES:
// UsesInt8Dot(p).
void QuantizeRowsInt8(const MatmulParams& p, int64_t r0, int64_t r1, const Int8Rows& out);
// Rows [r0, r1) x columns [c0, c1) over rows quantized once by the caller
// for every unit: xr holds row r0 at index 0 (QuantizeRowsInt8 with p's
// format). REQUIRES: UsesInt8Dot(p).
void QuantMatmulUnitInt8Quantized(const MatmulParams& p, const Int8Rows& xr, int64_t r0, int64_t r1,
                                  int64_t c0, int64_t c1);
// The same unit quantizing its own rows first.
void QuantMatmulUnitInt8(const MatmulParams& p, int64_t r0, int64_t r1, int64_t c0, int64_t c1);
// The kernels. Avx512Vnni REQUIRES CpuSupportsInt8Dot().
void QuantizeRowsInt8Avx512Vnni(const MatmulParams& p, int64_t r0, int64_t r1, const Int8Rows& out);
void QuantMatmulUnitAvx512VnniQuantized(const MatmulParams& p, const Int8Rows& xr, int64_t r0,
                                        int64_t r1, int64_t c0, int64_t c1);
void QuantizeRowsInt8Avx2(const MatmulParams& p, int64_t r0, int64_t r1, const Int8Rows& out);
void QuantMatmulUnitAvx2Int8Quantized(const MatmulParams& p, const Int8Rows& xr, int64_t r0,
                                      int64_t r1, int64_t c0, int64_t c1);
}  // namespace internal

// Rows [0, rows) of p.x quantized by QuantizeRowsInt8 into a buffer of the
// calling thread, split over `pool`; valid until this thread's next call.
// REQUIRES: UsesInt8Dot(p).
internal::Int8Rows QuantizeAllRowsInt8(const MatmulParams& p, int64_t rows, ThreadPool* pool);

namespace internal {

// Rows [r0, r1) of p.x permuted for the bf16 sequence (simd.h PermuteBf16X)
// into a thread-local buffer, row i at the result + i * *stride (*stride =
// k rounded up to 32; 64-byte aligned). Valid until this thread's next call.
const float* PermuteBf16Rows(const MatmulParams& p, int64_t r0, int64_t r1, int64_t* stride);
}  // namespace internal

}  // namespace expertd::engine::cpu

#endif  // EXPERTD_ENGINE_BACKEND_CPU_MATMUL_DENSE_H_
