// Attention, one block per (query row, kv head, group of <= 8 query heads):
// the decode kernel (and the fallback for any step). The CPU twin is
// engine/backend/cpu/attention.cc; both compute softmax(q k^T * scale) v
// over keys 0..pos of the row's sequence through its block table.
//
// The group's query heads share every K/V load (GQA). Four warps split the
// keys in tiles of 32 (warp w takes tiles w, w + 4, ...), one key per lane:
// a tile's keys are staged 64 dimensions at a time in the warp's shared
// memory (padded rows: no bank conflicts), each lane dots its key with the
// group's queries, an online softmax updates the warp's running max and sum
// per head, and the tile's p * v terms are added with lanes splitting the
// head dimension (coalesced V reads). The four warps' partial results are
// merged in a fixed order, so a row's output depends only on its own query
// and its sequence's cache (batch-invariant on the GPU; it differs from the
// CPU's two-pass softmax by fp32 rounding).
#include "engine/backend/cuda/attention.cuh"
#include "engine/backend/cuda/kernels.h"

namespace expertd::engine::cuda {
namespace {

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * kWarpSize;
constexpr int kHeads = 8;      // query heads per block
constexpr int kKeyChunk = 64;  // dimensions of a key tile staged at once

constexpr int64_t SharedFloats(int dc) {
  const int64_t dp = 32 * dc;
  const int64_t keys = kWarps * kWarpSize * (kKeyChunk + 1);
  const int64_t merge = kWarps * kHeads * (dp + 2);
  return kHeads * dp + (keys > merge ? keys : merge);
}

template <int DC>
__global__ void __launch_bounds__(kThreads) AttentionRowsKernel(AttentionParams p) {
  constexpr int kDp = 32 * DC;
  extern __shared__ float smem[];
  float* q_s = smem;                  // [kHeads][kDp]
  float* work = smem + kHeads * kDp;  // per-warp key tiles, then the merge area
  const int64_t t = blockIdx.x;
  const int64_t g = blockIdx.y;
  const int64_t D = p.head_dim;
  const int64_t group = p.heads / p.kv_heads;
  const int64_t h0 = g * group + static_cast<int64_t>(blockIdx.z) * kHeads;  // first query head
  const int nh = static_cast<int>(
      min(static_cast<int64_t>(kHeads), group - static_cast<int64_t>(blockIdx.z) * kHeads));
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;

  const float* q = p.q + t * p.q_stride + h0 * D;
  for (int64_t idx = threadIdx.x; idx < kHeads * kDp; idx += kThreads) {
    const int64_t i = idx / kDp, d = idx % kDp;
    q_s[idx] = (i < nh && d < D) ? q[i * D + d] : 0.0f;
  }
  __syncthreads();

  const int64_t n = static_cast<int64_t>(p.pos[t]) + 1;
  const int64_t first = FirstKey(p, n - 1);  // keys first .. n - 1
  const int32_t* table = p.block_tables + static_cast<int64_t>(p.seq[t]) * p.max_blocks_per_seq;
  const int64_t kv_width = p.kv_heads * D;
  const float* k_base = p.k_cache + g * D;
  const float* v_base = p.v_cache + g * D;
  float m[kHeads], l[kHeads], acc[kHeads][DC];
#pragma unroll
  for (int i = 0; i < kHeads; ++i) {
    m[i] = -INFINITY;
    l[i] = 0.0f;
#pragma unroll
    for (int c = 0; c < DC; ++c) acc[i][c] = 0.0f;
  }
  float* tile = work + warp * kWarpSize * (kKeyChunk + 1);  // [32 keys][kKeyChunk + 1]

  for (int64_t j0 = first + static_cast<int64_t>(warp) * kWarpSize; j0 < n;
       j0 += kWarps * kWarpSize) {
    const int64_t j = j0 + lane;
    const bool valid = j < n;
    const int64_t slot = valid ? KvSlot(table, p.block_size, j) : 0;
    float s[kHeads];
#pragma unroll
    for (int i = 0; i < kHeads; ++i) s[i] = 0.0f;
    for (int64_t d0 = 0; d0 < D; d0 += kKeyChunk) {
      for (int r = 0; r < kWarpSize; ++r) {
        const int64_t slot_r = __shfl_sync(kFullMask, slot, r);
        const bool valid_r = j0 + r < n;
#pragma unroll
        for (int c = 0; c < kKeyChunk / kWarpSize; ++c) {
          const int64_t d = d0 + lane + kWarpSize * c;
          tile[r * (kKeyChunk + 1) + lane + kWarpSize * c] =
              (valid_r && d < D) ? k_base[slot_r * kv_width + d] : 0.0f;
        }
      }
      __syncwarp();
      const int64_t dn = min(static_cast<int64_t>(kKeyChunk), D - d0);
      for (int64_t dd = 0; dd < dn; ++dd) {
        const float kv = tile[lane * (kKeyChunk + 1) + dd];
#pragma unroll
        for (int i = 0; i < kHeads; ++i) {
          if (i < nh) s[i] = fmaf(q_s[i * kDp + d0 + dd], kv, s[i]);
        }
      }
      __syncwarp();
    }
#pragma unroll
    for (int i = 0; i < kHeads; ++i) {
      if (i >= nh) continue;  // uniform
      float correction;
      s[i] = OnlineSoftmaxTile(valid ? s[i] * p.scale : -INFINITY, &m[i], &l[i], &correction);
#pragma unroll
      for (int c = 0; c < DC; ++c) acc[i][c] *= correction;
    }
    const int kn = static_cast<int>(min(static_cast<int64_t>(kWarpSize), n - j0));
    for (int r = 0; r < kn; ++r) {
      const int64_t slot_r = __shfl_sync(kFullMask, slot, r);
      const float* v_row = v_base + slot_r * kv_width;
      float vv[DC];
#pragma unroll
      for (int c = 0; c < DC; ++c) {
        const int64_t d = lane + kWarpSize * c;
        vv[c] = d < D ? v_row[d] : 0.0f;
      }
#pragma unroll
      for (int i = 0; i < kHeads; ++i) {
        if (i >= nh) continue;
        const float pr = __shfl_sync(kFullMask, s[i], r);
#pragma unroll
        for (int c = 0; c < DC; ++c) acc[i][c] = fmaf(pr, vv[c], acc[i][c]);
      }
    }
  }

  // Merge the warps' partial softmaxes, warp 0 first.
  __syncthreads();
  constexpr int kStride = kDp + 2;
  float* merge = work;  // [kWarps][kHeads][kStride]: acc[0..kDp), m, l
#pragma unroll
  for (int i = 0; i < kHeads; ++i) {
    if (i >= nh) continue;
    float* dst = merge + (warp * kHeads + i) * kStride;
#pragma unroll
    for (int c = 0; c < DC; ++c) dst[lane + kWarpSize * c] = acc[i][c];
    if (lane == 0) {
      dst[kDp] = m[i];
      dst[kDp + 1] = l[i];
    }
  }
  __syncthreads();
  float* out = p.out + t * p.out_stride + h0 * D;
  for (int64_t idx = threadIdx.x; idx < nh * D; idx += kThreads) {
    const int64_t i = idx / D, d = idx % D;
    float mx = -INFINITY;
    for (int w = 0; w < kWarps; ++w) mx = fmaxf(mx, merge[(w * kHeads + i) * kStride + kDp]);
    float sum = 0.0f, o = 0.0f;
    for (int w = 0; w < kWarps; ++w) {
      const float* part = merge + (w * kHeads + i) * kStride;
      if (part[kDp] == -INFINITY) continue;  // this warp saw no keys
      const float f = expf(part[kDp] - mx);
      sum += part[kDp + 1] * f;
      o += part[d] * f;
    }
    o *= JoinSink(p, h0 + i, &mx, &sum);  // the sink adds to the sum only
    out[i * D + d] = o / sum;
  }
}

template <int DC>
cudaError_t LaunchRows(const AttentionParams& p, cudaStream_t stream) {
  const int64_t group = p.heads / p.kv_heads;
  const dim3 grid(static_cast<unsigned>(p.rows), static_cast<unsigned>(p.kv_heads),
                  static_cast<unsigned>(CeilDiv(group, kHeads)));
  const size_t smem = SharedFloats(DC) * sizeof(float);
  AttentionRowsKernel<DC><<<grid, kThreads, smem, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace

cudaError_t LaunchAttentionRows(const AttentionParams& p, cudaStream_t stream) {
  if (p.kv_heads <= 0 || p.heads % p.kv_heads != 0) return cudaErrorInvalidValue;
  if (p.rows <= 0) return cudaSuccess;
  switch (HeadDimChunks(p.head_dim)) {
    case 1:
      return LaunchRows<1>(p, stream);
    case 2:
      return LaunchRows<2>(p, stream);
    case 4:
      return LaunchRows<4>(p, stream);
    case 8:
      return LaunchRows<8>(p, stream);
    default:
      return cudaErrorInvalidValue;
  }
}

cudaError_t LaunchAttention(const AttentionParams& p, AttentionKernel kernel, cudaStream_t stream) {
  if (p.head_dim > 256) return LaunchAttentionWide(p, stream);  // the only kernel that wide
  switch (kernel) {
    case AttentionKernel::kRows:
      return LaunchAttentionRows(p, stream);
    case AttentionKernel::kTiled:
      return LaunchAttentionTiled(p, stream);
    case AttentionKernel::kAuto:
      break;
  }
  if (p.rows >= 32 && p.head_dim <= 128) return LaunchAttentionTiled(p, stream);
  return LaunchAttentionRows(p, stream);
}

}  // namespace expertd::engine::cuda
