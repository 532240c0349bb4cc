// y[m, n] (+)= x[m, k] . w[n, k]^T + bias, the CPU GEMM/GEMV: which kernel
// runs (by weight format, activation mode, rows and CPU) and how the product
// is split over threads into (row group, column chunk) units. Each unit is
// computed by one kernel call and units are disjoint, so the split changes
// no result. The kernels: matmul_avx2.cc (dense, AVX2), matmul_avx512*.cc,
// matmul_fp8*.cc, quant_matmul*.cc.
#include <algorithm>
#include <cassert>
#include <cstdint>
#include <vector>

#include "engine/backend/cpu/kernels.h"
#include "engine/backend/cpu/matmul_dense.h"
#include "engine/backend/cpu/matmul_fp8.h"
#include "engine/backend/cpu/matmul_rows.h"
#include "engine/backend/cpu/matmul_unit.h"
#include "engine/backend/cpu/quant_matmul.h"

namespace expertd::engine::cpu {
namespace {

// The product split into output units: groups of `row_group` rows x column
// chunks (multiples of `chunk_multiple`), about `chunks_per_thread` per
// thread (several balance the load when a thread is descheduled). Units are
// disjoint, so the split changes no result. unit(p, r0, r1, c0, c1)
// computes one unit.
template <typename UnitFn>
void Run(const MatmulParams& p, ThreadPool* pool, UnitFn unit, int64_t row_group,
         int64_t chunk_multiple, int64_t chunks_per_thread = 4) {
  const int64_t m = p.m, n = p.w.rows, k = p.w.cols;
  const int threads = pool == nullptr ? 1 : pool->num_threads();
  const int64_t kRowGroup = row_group;
  const int64_t row_groups = (m + kRowGroup - 1) / kRowGroup;
  int64_t chunk = n;
  if (threads > 1) {
    const int64_t units_wanted = threads * chunks_per_thread;
    int64_t want = (n + units_wanted - 1) / units_wanted;
    chunk = std::max<int64_t>(16, (want + chunk_multiple - 1) / chunk_multiple * chunk_multiple);
  }
  const int64_t col_chunks = (n + chunk - 1) / chunk;
  const int64_t units = row_groups * col_chunks;
  // Tiny products are not worth waking threads for.
  const int64_t grain = m * n * k < (1 << 16) ? units : 1;
  ParallelFor(pool, units, grain, [&](int64_t begin, int64_t end) {
    for (int64_t u = begin; u < end; ++u) {
      const int64_t rg = u / col_chunks, cc = u % col_chunks;
      const int64_t r0 = rg * kRowGroup, r1 = std::min(m, r0 + kRowGroup);
      const int64_t c0 = cc * chunk, c1 = std::min(n, c0 + chunk);
      unit(p, r0, r1, c0, c1);
    }
  });
}

}  // namespace

internal::Int8Rows QuantizeAllRowsInt8(const MatmulParams& p, int64_t rows, ThreadPool* pool) {
  const int64_t k = p.w.cols, blocks = k / 32;
  thread_local std::vector<uint8_t> buffer;
  const size_t want = static_cast<size_t>(rows * k + rows * blocks * 8 + 64);
  if (buffer.size() < want) buffer.resize(want);
  uint8_t* base = buffer.data();
  internal::Int8Rows xr;
  xr.codes = reinterpret_cast<int8_t*>(base);
  xr.d = reinterpret_cast<float*>(base + (rows * k + 3) / 4 * 4);
  xr.corr = reinterpret_cast<int32_t*>(xr.d + rows * blocks);
  // Rows are independent: about 64 KiB of x per task.
  const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(1, k));
  ParallelFor(pool, rows, grain, [&](int64_t begin, int64_t end) {
    internal::QuantizeRowsInt8(p, begin, end, xr.From(begin, k));
  });
  return xr;
}

namespace internal {

void QuantizeRowsInt8(const MatmulParams& p, int64_t r0, int64_t r1, const Int8Rows& out) {
  if (CpuSupportsInt8Dot()) return QuantizeRowsInt8Avx512Vnni(p, r0, r1, out);
  QuantizeRowsInt8Avx2(p, r0, r1, out);
}

void QuantMatmulUnitInt8Quantized(const MatmulParams& p, const Int8Rows& xr, int64_t r0, int64_t r1,
                                  int64_t c0, int64_t c1) {
  if (CpuSupportsInt8Dot()) return QuantMatmulUnitAvx512VnniQuantized(p, xr, r0, r1, c0, c1);
  QuantMatmulUnitAvx2Int8Quantized(p, xr, r0, r1, c0, c1);
}

void QuantMatmulUnitInt8(const MatmulParams& p, int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
  const int64_t k = p.w.cols, blocks = k / 32, rows = r1 - r0;
  thread_local std::vector<int8_t> codes;
  thread_local std::vector<float> d;
  thread_local std::vector<int32_t> corr;
  codes.resize(static_cast<size_t>(rows * k));
  d.resize(static_cast<size_t>(rows * blocks));
  corr.resize(static_cast<size_t>(rows * blocks));
  const Int8Rows xr{codes.data(), d.data(), corr.data()};
  QuantizeRowsInt8(p, r0, r1, xr);
  QuantMatmulUnitInt8Quantized(p, xr, r0, r1, c0, c1);
}

}  // namespace internal

namespace {

// int8 / int4 / mxfp4 codes in groups of 32, 64 or 128 along k: what both
// reduced-precision quantized kernels take.
bool SmallCodesInGroupsOf32(const WeightQuant& q) {
  const bool small_codes = q.format == WeightFormat::kInt8 || q.format == WeightFormat::kInt4 ||
                           q.format == WeightFormat::kMxfp4;
  const int g = q.group_size;
  return small_codes && q.block_rows == 1 && (g == 32 || g == 64 || g == 128);
}

// FP8 E4M3 blocks whose columns come in 32-code steps that divide k: what
// the bf16-activation kernel takes (every E4M3 value is a bf16 value).
bool Fp8BlocksOf32(const WeightQuant& q, int64_t k) {
  const int g = q.group_size;
  return q.format == WeightFormat::kFp8E4m3Block && q.scale_dtype == ScaleDType::kF32 &&
         (g == 32 || g == 64 || g == 128) && k % g == 0;
}

}  // namespace

bool UsesInt8Dot(const MatmulParams& p) {
  if (p.activations != MatmulActivations::kInt8 || !SmallCodesInGroupsOf32(p.w.quant)) return false;
  assert(CpuSupportsInt8Activations());  // CreateBackend refuses kInt8 without it
  return true;
}

bool UsesBf16Dot(const MatmulParams& p) {
  if (p.activations == MatmulActivations::kF32 || UsesInt8Dot(p)) return false;
  // int8 activations on a CPU without a bf16 dot product: the rest run fp32.
  if (p.activations == MatmulActivations::kInt8 && !CpuSupportsBf16Dot()) return false;
  const WeightQuant& q = p.w.quant;
  if (q.quantized()) {
    if (!SmallCodesInGroupsOf32(q) && !Fp8BlocksOf32(q, p.w.cols)) return false;
    if (!CpuSupportsQuantBf16Dot()) return false;  // the fp32-activation kernels
  } else if (p.w.dtype != DType::kBF16) {
    return false;
  }
  assert(CpuSupportsBf16Dot());  // CreateBackend refuses kBF16 / kInt8 without it
  return true;
}

CpuIsa DenseMatmulIsa(int64_t rows, DType dtype, CpuIsa isa) {
  if (isa == CpuIsa::kAvx512 && (rows >= kDenseAvx512MinRows || dtype == DType::kBF16) &&
      CpuSupports(CpuIsa::kAvx512))
    return CpuIsa::kAvx512;
  return CpuIsa::kAvx2;
}

void DenseMatmul(const MatmulParams& p, ThreadPool* pool, CpuIsa isa) {
  if (p.m <= 0 || p.w.rows <= 0) return;
  if (UsesBf16Dot(p)) {
    // Each unit rounds its own rows (rounding all rows once first measured
    // no faster). Decode: AVX2's units (64 rows x 8-column chunks).
    // Prefill: long row groups; chunks of whole 6-column tiles.
    if (p.m < kDenseAvx512MinRows) return Run(p, pool, internal::DenseMatmulUnitAvx512Bf16, 64, 8);
    return Run(p, pool, internal::DenseMatmulUnitAvx512Bf16, kBf16DotRowGroup, 6);
  }
  if (DenseMatmulIsa(p.m, p.w.dtype, isa) == CpuIsa::kAvx512) {
    // bf16 decode (m < 4): the AVX-512 tiles read the weights directly, 2-4
    // columns at a time; AVX2's units.
    if (p.m < kDenseAvx512MinRows) return Run(p, pool, internal::DenseMatmulUnitAvx512, 64, 8);
    // Chunks of whole 12-column tiles (the AVX-512 kernel's 6 pairs); a
    // unit widens its weights once for all its rows, so groups are long.
    // (bf16, [1024, 2048] x 512 rows, 1 thread: 181 GFLOP/s with groups of
    // 64 rows, 195 with 256).
    return Run(p, pool, internal::DenseMatmulUnitAvx512, 256, 12);
  }
  Run(p, pool, internal::DenseMatmulUnitAvx2, 64, 8);
}

void MatmulUnit(const MatmulParams& p, int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
  if (r0 >= r1 || c0 >= c1) return;
  if (UsesInt8Dot(p)) return internal::QuantMatmulUnitInt8(p, r0, r1, c0, c1);
  if (UsesBf16Dot(p)) {
    if (p.w.quant.quantized()) return internal::QuantMatmulUnitAvx512Bf16(p, r0, r1, c0, c1);
    return internal::DenseMatmulUnitAvx512Bf16(p, r0, r1, c0, c1);
  }
  if (p.w.quant.quantized()) return QuantMatmulUnit(p, r0, r1, c0, c1);
  // Every dense variant is bitwise the same: pick by this unit's rows.
  if (DenseMatmulIsa(r1 - r0, p.w.dtype, BestCpuIsa()) == CpuIsa::kAvx512) {
    return internal::DenseMatmulUnitAvx512(p, r0, r1, c0, c1);
  }
  internal::DenseMatmulUnitAvx2(p, r0, r1, c0, c1);
}

bool KernelTakesRowMaps(const MatmulParams& p) {
  if (UsesInt8Dot(p)) return false;
  if (p.w.quant.quantized()) return UsesBf16Dot(p);
  return p.w.dtype != DType::kF8E4M3;
}

namespace {

// Row maps for the other kernels: the rows gathered into a buffer, the
// product into another, then weighted and added into the token rows with
// StoreElement's arithmetic (so the result is the native kernels' bits).
void MatmulThroughCopies(const MatmulParams& p, ThreadPool* pool) {
  const int64_t m = p.m, k = p.w.cols, n = p.w.rows;
  // The calling thread's buffers: the pool's workers reach them through
  // these pointers (a thread_local named inside the lambda would be theirs).
  thread_local std::vector<float> x_copy, y_copy;
  MatmulParams q = p;
  q.x_rows = nullptr;
  q.y_rows = nullptr;
  q.row_weights = nullptr;
  if (p.x_rows != nullptr) {
    x_copy.resize(static_cast<size_t>(m * k));
    float* const xc = x_copy.data();
    GatherRows(GatherRowsParams{p.x, p.x_stride, p.x_rows, xc, m, k}, pool);
    q.x = xc;
    q.x_stride = k;
  }
  if (p.y_rows != nullptr) {
    y_copy.resize(static_cast<size_t>(m * n));
    q.y = y_copy.data();
    q.y_stride = n;
    q.accumulate = false;
    q.bias = WeightRef{};  // StoreElement adds it, as the native kernels do
  }
  Matmul(q, pool);
  if (p.y_rows == nullptr) return;
  const float* const yc = q.y;
  ParallelFor(pool, m, std::max<int64_t>(1, 4096 / n), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      for (int64_t c = 0; c < n; ++c) StoreElement(p, r, c, yc[r * n + c]);
    }
  });
}

}  // namespace

void Matmul(const MatmulParams& p, ThreadPool* pool) {
  assert(p.x != nullptr && p.y != nullptr && p.w.data != nullptr);
  assert(p.x_stride >= p.w.cols && p.y_stride >= p.w.rows);
  assert(p.bias.empty() || p.bias.rows * p.bias.cols == p.w.rows);
  assert(p.row_weights == nullptr ||
         (p.y_rows != nullptr && p.row_weight_index != nullptr && p.bias.empty()));
  if (p.m <= 0 || p.w.rows <= 0) return;
  if (HasRowMaps(p) && !KernelTakesRowMaps(p)) return MatmulThroughCopies(p, pool);
  if (UsesInt8Dot(p)) {
    // x is quantized once for every unit; a unit regroups kInt8TileCols
    // columns' codes at a time for all its rows: long row groups. Decode:
    // one column range per thread. A unit prefetches each next tile while it
    // computes one, but its own first tile starts cold (the unit before it
    // prefetched it, on whichever thread ran that one); with 4 chunks a
    // thread a quarter of the tiles did, and a one-row int4 GEMV on 2 threads
    // took 1.1x as long in the median, up to 1.6x (docs/benchmarks.md).
    const internal::Int8Rows xr = QuantizeAllRowsInt8(p, p.m, pool);
    return Run(
        p, pool,
        [&xr](const MatmulParams& q, int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
          internal::QuantMatmulUnitInt8Quantized(q, xr.From(r0, q.w.cols), r0, r1, c0, c1);
        },
        p.m < 4 ? 64 : 256, internal::kInt8TileCols, p.m < 4 ? 1 : 4);
  }
  if (p.w.quant.quantized() && UsesBf16Dot(p)) {
    // A unit decodes 6 columns at a time for all its rows: long row groups.
    return Run(p, pool, internal::QuantMatmulUnitAvx512Bf16, p.m < 4 ? 64 : 256, 8);
  }
  if (p.w.quant.quantized()) return QuantMatmul(p, pool);
  switch (p.w.dtype) {
    case DType::kF32:
    case DType::kBF16:
    case DType::kF16:
      return DenseMatmul(p, pool, BestCpuIsa());
    case DType::kF8E4M3:  // always with quant kFp8E4m3Block (asserted there)
      return MatmulFp8(p, pool, BestFp8Isa());
    case DType::kU8:  // a file dtype only (dtype.h)
      assert(false);
      return;
  }
}

}  // namespace expertd::engine::cpu
