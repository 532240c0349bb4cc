// The scalar reference variant and the dispatch (quant_matmul.h).
#include "engine/backend/cpu/quant_matmul.h"

#include <algorithm>
#include <cassert>
#include <cmath>

#include "engine/backend/cpu/matmul_fp8.h"
#include "engine/backend/cpu/matmul_unit.h"
#include "engine/backend/cpu/quant_matmul_tile.h"
#include "engine/backend/weight_quantize.h"

namespace expertd::engine::cpu {
namespace {

// One lane: the plain sequential sums of the contract.
struct ScalarTraits {
  using V = float;
  static constexpr int kLanes = 1;
  static float Zero() { return 0.0f; }
  static float LoadX(const float* x) { return *x; }
  static float Fma(float a, float b, float c) { return std::fma(a, b, c); }
  static float Set1(float s) { return s; }
  static float Sum(float v) { return v; }
  template <WeightFormat F>
  static float LoadW(const uint8_t* row, int64_t col) {
    return DecodeQuantValue(F, row, col);
  }
};

}  // namespace

void QuantMatmulScalar(const MatmulParams& p, int64_t c0, int64_t c1) {
  QuantColumnsAnyFormat<ScalarTraits>(p, c0, c1);
}

CpuIsa QuantMatmulIsa(const MatmulParams& p, CpuIsa isa) {
  const int32_t g = p.w.quant.group_size;
  if (isa == CpuIsa::kAvx512 && (g % 16 != 0 || !CpuSupports(CpuIsa::kAvx512)))
    isa = CpuIsa::kAvx2;
  if (isa == CpuIsa::kAvx2 && g % 8 != 0) isa = CpuIsa::kScalar;
  return isa;
}

namespace {

// The FP8 variant QuantMatmul runs for `isa`.
Fp8Isa QuantFp8Isa(CpuIsa isa) {
  return isa == CpuIsa::kAvx512 && BestFp8Isa() == Fp8Isa::kAvx512 ? Fp8Isa::kAvx512
                                                                   : Fp8Isa::kAvx2;
}

using ColumnKernel = void (*)(const MatmulParams&, int64_t, int64_t);

ColumnKernel ColumnKernelFor(const MatmulParams& p, CpuIsa isa) {
  switch (QuantMatmulIsa(p, isa)) {
    case CpuIsa::kScalar:
      return QuantMatmulScalar;
    case CpuIsa::kAvx2:
      return QuantMatmulAvx2;
    case CpuIsa::kAvx512:
      return QuantMatmulAvx512;
  }
  return QuantMatmulScalar;
}

}  // namespace

void QuantMatmulUnit(const MatmulParams& p, int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
  const CpuIsa isa = BestCpuIsa();  // what Matmul -> QuantMatmul uses
  if (p.w.quant.format == WeightFormat::kFp8E4m3Block) {
    return QuantFp8Isa(isa) == Fp8Isa::kAvx512 ? internal::MatmulFp8UnitAvx512(p, r0, r1, c0, c1)
                                               : internal::MatmulFp8UnitAvx2(p, r0, r1, c0, c1);
  }
  // The column kernels cover every row of their params: give them the rows.
  MatmulParams rows = p;
  rows.x = p.x + r0 * p.x_stride;
  rows.y = p.y + r0 * p.y_stride;
  rows.m = r1 - r0;
  ColumnKernelFor(p, isa)(rows, c0, c1);
}

void QuantMatmul(const MatmulParams& p, ThreadPool* pool, CpuIsa isa) {
  if (p.w.quant.format == WeightFormat::kFp8E4m3Block) {
    // 2-D fp32 block scales, ragged column blocks: its own kernels.
    return MatmulFp8(p, pool, QuantFp8Isa(isa));
  }
  assert(p.w.quant.quantized() && p.w.quant.group_size > 0);
  assert(p.w.cols % p.w.quant.group_size == 0);
  const int64_t n = p.w.rows;
  if (p.m <= 0 || n <= 0) return;
  const ColumnKernel columns = ColumnKernelFor(p, isa);
  // Column chunks of multiples of 8 columns (the blocked kernel's tile),
  // about 4 per thread.
  const int threads = pool == nullptr ? 1 : pool->num_threads();
  int64_t chunk = n;
  if (threads > 1) {
    chunk = std::max<int64_t>(8, ((n + threads * 4 - 1) / (threads * 4) + 7) / 8 * 8);
  }
  const int64_t chunks = (n + chunk - 1) / chunk;
  const int64_t grain = p.m * n * p.w.cols < (1 << 16) ? chunks : 1;
  ParallelFor(pool, chunks, grain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) columns(p, i * chunk, std::min(n, (i + 1) * chunk));
  });
}

}  // namespace expertd::engine::cpu
