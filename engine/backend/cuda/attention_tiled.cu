// Attention for prefill, flash-style: one block per (16 consecutive query
// rows, query head). The block walks the keys of the rows' sequence in tiles
// of 32 staged in shared memory (K rows padded: no bank conflicts), shared by
// all 16 queries; each warp owns 4 query rows and keeps their running max,
// denominator and output in registers (online softmax), so the scores never
// leave the chip. Causal: a query at position pos sees keys first..pos
// (first = 0, or pos - window + 1 with a sliding window); a sink logit per
// head (gpt-oss) joins each row's softmax after the keys.
//
// A tile of rows may span several sequences (steps batch many chunks): the
// block handles each run of rows of one sequence in turn, loading that
// sequence's keys. The CPU twin is engine/backend/cpu/attention.cc (two-pass
// softmax); results agree to fp32 rounding. Limit: head_dim <= 128.
#include "engine/backend/cuda/attention.cuh"
#include "engine/backend/cuda/kernels.h"

namespace expertd::engine::cuda {
namespace {

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * kWarpSize;
constexpr int kRowsPerWarp = 4;
constexpr int kRows = kWarps * kRowsPerWarp;  // query rows per block
constexpr int kKeys = kWarpSize;              // keys per tile

constexpr int64_t SharedFloats(int dc) {
  const int64_t dp = 32 * dc;
  return kRows * dp + kKeys * (dp + 1) + kKeys * dp;
}

template <int DC>
__global__ void __launch_bounds__(kThreads) AttentionTiledKernel(AttentionParams p) {
  constexpr int kDp = 32 * DC;
  extern __shared__ float smem[];
  float* q_s = smem;                     // [kRows][kDp]
  float* k_s = q_s + kRows * kDp;        // [kKeys][kDp + 1]
  float* v_s = k_s + kKeys * (kDp + 1);  // [kKeys][kDp]
  const int64_t t0 = static_cast<int64_t>(blockIdx.x) * kRows;
  const int64_t h = blockIdx.y;
  const int64_t D = p.head_dim;
  const int64_t g = h / (p.heads / p.kv_heads);
  const int tile_rows = static_cast<int>(min(static_cast<int64_t>(kRows), p.rows - t0));
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;

  for (int64_t idx = threadIdx.x; idx < kRows * kDp; idx += kThreads) {
    const int64_t r = idx / kDp, d = idx % kDp;
    q_s[idx] = (r < tile_rows && d < D) ? p.q[(t0 + r) * p.q_stride + h * D + d] : 0.0f;
  }
  int64_t my_pos[kRowsPerWarp], my_first[kRowsPerWarp];
  float m[kRowsPerWarp], l[kRowsPerWarp], acc[kRowsPerWarp][DC];
#pragma unroll
  for (int i = 0; i < kRowsPerWarp; ++i) {
    const int rr = warp * kRowsPerWarp + i;
    my_pos[i] = rr < tile_rows ? p.pos[t0 + rr] : -1;
    my_first[i] = FirstKey(p, my_pos[i]);
    m[i] = -INFINITY;
    l[i] = 0.0f;
#pragma unroll
    for (int c = 0; c < DC; ++c) acc[i][c] = 0.0f;
  }
  const int64_t kv_width = p.kv_heads * D;
  const float* k_base = p.k_cache + g * D;
  const float* v_base = p.v_cache + g * D;

  int seg_begin = 0;
  while (seg_begin < tile_rows) {  // every thread computes the same runs
    const int32_t seq = p.seq[t0 + seg_begin];
    int seg_end = seg_begin + 1;
    int64_t max_pos = p.pos[t0 + seg_begin];
    int64_t min_pos = max_pos;
    while (seg_end < tile_rows && p.seq[t0 + seg_end] == seq) {
      max_pos = max(max_pos, static_cast<int64_t>(p.pos[t0 + seg_end]));
      min_pos = min(min_pos, static_cast<int64_t>(p.pos[t0 + seg_end]));
      ++seg_end;
    }
    const int32_t* table = p.block_tables + static_cast<int64_t>(seq) * p.max_blocks_per_seq;
    for (int64_t j0 = FirstKey(p, min_pos); j0 <= max_pos; j0 += kKeys) {
      __syncthreads();  // the previous tile is consumed (and q_s written)
      for (int64_t idx = threadIdx.x; idx < kKeys * kDp; idx += kThreads) {
        const int64_t r = idx / kDp, d = idx % kDp;
        const int64_t j = j0 + r;
        float kv = 0.0f, vv = 0.0f;
        if (j <= max_pos && d < D) {
          const int64_t slot = KvSlot(table, p.block_size, j);
          kv = k_base[slot * kv_width + d];
          vv = v_base[slot * kv_width + d];
        }
        k_s[r * (kDp + 1) + d] = kv;
        v_s[r * kDp + d] = vv;
      }
      __syncthreads();
#pragma unroll
      for (int i = 0; i < kRowsPerWarp; ++i) {
        const int rr = warp * kRowsPerWarp + i;
        // Uniform per warp: the row is in this run and sees a key of this
        // tile (OnlineSoftmaxTile needs one).
        if (rr < seg_begin || rr >= seg_end || j0 > my_pos[i] || j0 + kKeys <= my_first[i])
          continue;
        float score = 0.0f;
        for (int64_t d = 0; d < D; ++d)
          score = fmaf(q_s[rr * kDp + d], k_s[lane * (kDp + 1) + d], score);
        const bool valid = j0 + lane <= my_pos[i] && j0 + lane >= my_first[i];
        float correction;
        const float prob =
            OnlineSoftmaxTile(valid ? score * p.scale : -INFINITY, &m[i], &l[i], &correction);
#pragma unroll
        for (int c = 0; c < DC; ++c) acc[i][c] *= correction;
        const int kn = static_cast<int>(min(static_cast<int64_t>(kKeys), my_pos[i] - j0 + 1));
        for (int r = 0; r < kn; ++r) {
          const float pr = __shfl_sync(kFullMask, prob, r);
#pragma unroll
          for (int c = 0; c < DC; ++c)
            acc[i][c] = fmaf(pr, v_s[r * kDp + lane + kWarpSize * c], acc[i][c]);
        }
      }
    }
    seg_begin = seg_end;
  }

#pragma unroll
  for (int i = 0; i < kRowsPerWarp; ++i) {
    const int rr = warp * kRowsPerWarp + i;
    if (rr >= tile_rows) continue;
    float* out = p.out + (t0 + rr) * p.out_stride + h * D;
    const float factor = JoinSink(p, h, &m[i], &l[i]);  // the sink adds to l only
#pragma unroll
    for (int c = 0; c < DC; ++c) {
      const int64_t d = lane + kWarpSize * c;
      if (d < D) out[d] = acc[i][c] * factor / l[i];
    }
  }
}

template <int DC>
cudaError_t LaunchTiled(const AttentionParams& p, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(CeilDiv(p.rows, kRows)), static_cast<unsigned>(p.heads));
  const size_t smem = SharedFloats(DC) * sizeof(float);
  AttentionTiledKernel<DC><<<grid, kThreads, smem, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace

cudaError_t LaunchAttentionTiled(const AttentionParams& p, cudaStream_t stream) {
  if (p.kv_heads <= 0 || p.heads % p.kv_heads != 0) return cudaErrorInvalidValue;
  if (p.rows <= 0) return cudaSuccess;
  switch (HeadDimChunks(p.head_dim)) {
    case 1:
      return LaunchTiled<1>(p, stream);
    case 2:
      return LaunchTiled<2>(p, stream);
    case 4:
      return LaunchTiled<4>(p, stream);
    default:
      return cudaErrorInvalidValue;
  }
}

}  // namespace expertd::engine::cuda
