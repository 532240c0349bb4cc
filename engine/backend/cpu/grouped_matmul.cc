// GroupedMatmul (op_params.h): every expert's GEMM of a MoE layer in one
// call, the rows already grouped per expert.
//
// One Matmul per expert parallelises inside each call, over that expert's
// (row group, column chunk) units; an expert with a few rows and a narrow
// shard gives a thread pool too few units, and every call pays a pool
// wake-up and a join. Here the work items are (expert, row tile, column
// chunk) over all experts at once, taken by the pool's threads from one
// counter, so small experts fill idle threads and there is one join.
//
// Each item runs MatmulUnit (matmul_unit.h): per element the same
// operations as the per-expert Matmul, so the result is bitwise that of one
// Matmul per expert (and batch- and thread-invariant like it).
//
// Row maps (x_rows, y_rows) pass through to the units where every expert's
// kernel takes them (matmul_rows.h); otherwise the call runs on copies: the
// mapped rows gathered once, the unmapped call, the results stored back.
#include <algorithm>
#include <cassert>
#include <cstring>
#include <vector>

#include "engine/backend/cpu/kernels.h"
#include "engine/backend/cpu/matmul_dense.h"
#include "engine/backend/cpu/matmul_unit.h"

namespace expertd::engine::cpu {
namespace {

// Rows [r0, r1) of group `group` (global row indices into x and y).
struct RowTile {
  int64_t group, r0, r1;
};

// The same row group Matmul uses: a tile's weights are streamed once for up
// to 64 rows.
constexpr int64_t kRowTile = 64;

std::vector<RowTile> RowTiles(const GroupedMatmulParams& p, int64_t* total_rows) {
  std::vector<RowTile> tiles;
  *total_rows = 0;
  for (int64_t g = 0; g < p.groups; ++g) {
    const int64_t begin = p.row_offset[g], end = p.row_offset[g + 1];
    assert(begin <= end);
    *total_rows += end - begin;
    for (int64_t r = begin; r < end; r += kRowTile)
      tiles.push_back(RowTile{g, r, std::min(end, r + kRowTile)});
  }
  return tiles;
}

// Column chunk width: Matmul's own (about 4 chunks per thread, multiples of
// 8, at least 16), so an item is exactly one of the units the per-expert
// Matmul would run and only their scheduling changes: all experts' units go
// to the pool as one job. (Whole-width items when the row tiles alone gave
// every thread 4 measured 0.56-0.87x the per-expert path on Qwen3-30B-A3B
// prefill shapes at 2 threads, one run at load ~2.5: too coarse to balance
// on a shared machine.)
int64_t ColumnChunk(int64_t n, int threads) {
  if (threads <= 1) return n;
  const int64_t want = (n + threads * 4 - 1) / (threads * 4);
  return std::max<int64_t>(16, (want + 7) / 8 * 8);
}

// Whether every expert with rows runs a kernel that takes row maps.
bool KernelsTakeRowMaps(const GroupedMatmulParams& p, const std::vector<RowTile>& tiles) {
  MatmulParams m;
  m.activations = p.activations;
  for (const RowTile& t : tiles) {
    m.w = p.w[t.group];
    if (!KernelTakesRowMaps(m)) return false;
  }
  return true;
}

// The row maps on copies: x's mapped rows gathered, the call without maps
// into a buffer, each result row then stored (or added) to its y row.
void GroupedMatmulThroughCopies(const GroupedMatmulParams& p, int64_t total_rows,
                                ThreadPool* pool) {
  // The calling thread's buffers, reached by the workers through pointers.
  thread_local std::vector<float> x_copy, y_copy;
  GroupedMatmulParams q = p;
  q.x_rows = nullptr;
  q.y_rows = nullptr;
  if (p.x_rows != nullptr) {
    x_copy.resize(static_cast<size_t>(total_rows * p.k));
    float* const xc = x_copy.data();
    GatherRows(GatherRowsParams{p.x, p.x_stride, p.x_rows, xc, total_rows, p.k}, pool);
    q.x = xc;
    q.x_stride = p.k;
  }
  if (p.y_rows != nullptr) {
    y_copy.resize(static_cast<size_t>(total_rows * p.n));
    q.y = y_copy.data();
    q.y_stride = p.n;
    q.accumulate = false;
  }
  GroupedMatmul(q, pool);
  if (p.y_rows == nullptr) return;
  const float* const yc = q.y;
  ParallelFor(pool, total_rows, std::max<int64_t>(1, 4096 / p.n), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float* v = yc + r * p.n;
      float* y = p.y + p.y_rows[r] * p.y_stride;
      if (p.accumulate) {
        for (int64_t c = 0; c < p.n; ++c) y[c] = y[c] + v[c];
      } else {
        std::memcpy(y, v, p.n * sizeof(float));
      }
    }
  });
}

}  // namespace

void GroupedMatmul(const GroupedMatmulParams& p, ThreadPool* pool) {
  if (p.groups <= 0 || p.n <= 0) return;
  assert(p.w != nullptr && p.row_offset != nullptr && p.row_offset[0] == 0);
  int64_t total_rows = 0;
  const std::vector<RowTile> tiles = RowTiles(p, &total_rows);
  if (tiles.empty()) return;
  assert(p.x != nullptr && p.y != nullptr && p.x_stride >= p.k && p.y_stride >= p.n);
  const bool row_maps = p.x_rows != nullptr || p.y_rows != nullptr;
  if (row_maps && !KernelsTakeRowMaps(p, tiles))
    return GroupedMatmulThroughCopies(p, total_rows, pool);
  const int threads = pool == nullptr ? 1 : pool->num_threads();
  const int64_t chunk = ColumnChunk(p.n, threads);
  const int64_t col_chunks = (p.n + chunk - 1) / chunk;
  const int64_t items = static_cast<int64_t>(tiles.size()) * col_chunks;
  // Tiny products are not worth waking threads for (Matmul's rule, on the
  // whole layer's product).
  const int64_t grain = total_rows * p.n * p.k < (1 << 16) ? items : 1;
  // int8 activations: x quantized once for all items when every expert with
  // rows has the same format (the quantized layout depends on it).
  MatmulParams first;
  first.x = p.x;
  first.x_stride = p.x_stride;
  first.w = p.w[tiles.front().group];
  first.activations = p.activations;
  bool int8_rows = UsesInt8Dot(first);
  for (const RowTile& t : tiles) {
    const WeightQuant& q = p.w[t.group].quant;
    int8_rows = int8_rows && q.format == first.w.quant.format &&
                q.group_size == first.w.quant.group_size && q.block_rows == 1;
  }
  internal::Int8Rows xr{};
  if (int8_rows) xr = QuantizeAllRowsInt8(first, total_rows, pool);
  // Items are expert-major: consecutive items share an expert's weights.
  ParallelFor(pool, items, grain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const RowTile& t = tiles[i / col_chunks];
      const WeightRef& w = p.w[t.group];
      assert(w.rows == p.n && w.cols == p.k);
      MatmulParams m;
      m.x = p.x;
      m.x_stride = p.x_stride;
      m.w = w;
      m.y = p.y;
      m.y_stride = p.y_stride;
      m.m = p.row_offset[p.groups];
      m.accumulate = p.accumulate;
      m.activations = p.activations;
      m.x_rows = p.x_rows;
      m.y_rows = p.y_rows;
      const int64_t c0 = (i % col_chunks) * chunk;
      if (int8_rows) {
        internal::QuantMatmulUnitInt8Quantized(m, xr.From(t.r0, p.k), t.r0, t.r1, c0,
                                               std::min(p.n, c0 + chunk));
        continue;
      }
      MatmulUnit(m, t.r0, t.r1, c0, std::min(p.n, c0 + chunk));
    }
  });
}

}  // namespace expertd::engine::cpu
