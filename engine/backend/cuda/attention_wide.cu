// Attention for wide heads (256 < head_dim <= 1024): the decode kernel of
// DeepSeek-V3's absorbed MLA, whose one shared "kv head" is the cached
// [latent (512), rope key (64)] row, 576 floats, used as both key and value
// (k_cache == v_cache). The CPU twin is engine/backend/cpu/attention.cc, the
// same op the CPU backend runs for the absorbed form.
//
// One block per (query row, kv head, <= 8 query heads of its group), one warp
// per query head. The keys go in tiles of 32 (one key per lane): the block
// stages a tile 64 dimensions at a time in shared memory (padded rows, no
// bank conflicts), each warp dots its head's query with the lane's key, an
// online softmax updates the warp's running max and sum, and the tile's
// p * v terms are added with lanes splitting the head dimension (each lane
// owns dimensions lane + 32 c: coalesced V reads). No cross-warp merge: a
// warp sees every key of its head in order, so a row's output depends only
// on its query and its sequence's cache (batch-invariant on the GPU); it
// differs from the CPU's two-pass softmax by fp32 rounding.
#include "engine/backend/cuda/attention.cuh"
#include "engine/backend/cuda/kernels.h"

namespace expertd::engine::cuda {
namespace {

constexpr int kWarps = 8;  // query heads per block, one per warp
constexpr int kThreads = kWarps * kWarpSize;
constexpr int kKeyTile = kWarpSize;  // keys per tile, one per lane
constexpr int kDimChunk = 64;        // key dimensions staged at once

constexpr int64_t SharedFloats(int dc) {
  return kWarps * kWarpSize * dc + kKeyTile * (kDimChunk + 1);
}

template <int DC>
__global__ void __launch_bounds__(kThreads) AttentionWideKernel(AttentionParams p) {
  constexpr int kDp = kWarpSize * DC;
  extern __shared__ float smem[];
  float* q_s = smem;                   // [kWarps][kDp]
  float* tile = smem + kWarps * kDp;   // [kKeyTile][kDimChunk + 1]
  __shared__ int64_t slots[kKeyTile];  // cache slot of each key of the tile; -1: none
  const int64_t t = blockIdx.x;
  const int64_t g = blockIdx.y;
  const int64_t D = p.head_dim;
  const int64_t group = p.heads / p.kv_heads;
  const int64_t first = static_cast<int64_t>(blockIdx.z) * kWarps;  // within the group
  const int nh = static_cast<int>(min(static_cast<int64_t>(kWarps), group - first));
  const int64_t h0 = g * group + first;
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  const bool active = warp < nh;  // warp-uniform

  const float* q = p.q + t * p.q_stride + h0 * D;
  for (int64_t idx = threadIdx.x; idx < kWarps * kDp; idx += kThreads) {
    const int64_t i = idx / kDp, d = idx % kDp;
    q_s[idx] = (i < nh && d < D) ? q[i * D + d] : 0.0f;
  }

  const int64_t n = static_cast<int64_t>(p.pos[t]) + 1;
  const int32_t* table = p.block_tables + static_cast<int64_t>(p.seq[t]) * p.max_blocks_per_seq;
  const int64_t kv_width = p.kv_heads * D;
  const float* k_base = p.k_cache + g * D;
  const float* v_base = p.v_cache + g * D;
  float m = -INFINITY, l = 0.0f, acc[DC];
#pragma unroll
  for (int c = 0; c < DC; ++c) acc[c] = 0.0f;

  for (int64_t j0 = 0; j0 < n; j0 += kKeyTile) {
    __syncthreads();  // the previous tile's slots are no longer read (and q_s is written)
    if (threadIdx.x < kKeyTile) {
      const int64_t j = j0 + threadIdx.x;
      slots[threadIdx.x] = j < n ? KvSlot(table, p.block_size, j) : -1;
    }
    float s = 0.0f;  // this warp's head . key j0 + lane
    for (int64_t d0 = 0; d0 < D; d0 += kDimChunk) {
      __syncthreads();  // slots written; the previous chunk's tile is consumed
      for (int idx = threadIdx.x; idx < kKeyTile * kDimChunk; idx += kThreads) {
        const int r = idx / kDimChunk, c = idx % kDimChunk;
        const int64_t d = d0 + c, slot = slots[r];
        tile[r * (kDimChunk + 1) + c] = (slot >= 0 && d < D) ? k_base[slot * kv_width + d] : 0.0f;
      }
      __syncthreads();
      if (active) {
        const int64_t dn = min(static_cast<int64_t>(kDimChunk), D - d0);
        const float* qh = q_s + warp * kDp + d0;
        const float* key = tile + lane * (kDimChunk + 1);
        for (int64_t dd = 0; dd < dn; ++dd) s = fmaf(qh[dd], key[dd], s);
      }
    }
    if (!active) continue;  // the next tile's barriers are reached at the loop top
    const bool valid = j0 + lane < n;
    float correction;
    const float prob = OnlineSoftmaxTile(valid ? s * p.scale : -INFINITY, &m, &l, &correction);
#pragma unroll
    for (int c = 0; c < DC; ++c) acc[c] *= correction;
    const int kn = static_cast<int>(min(static_cast<int64_t>(kKeyTile), n - j0));
    for (int r = 0; r < kn; ++r) {
      const float pr = __shfl_sync(kFullMask, prob, r);
      const float* v_row = v_base + slots[r] * kv_width;
#pragma unroll
      for (int c = 0; c < DC; ++c) {
        const int64_t d = lane + kWarpSize * c;
        if (d < D) acc[c] = fmaf(pr, v_row[d], acc[c]);
      }
    }
  }
  if (!active) return;
  float* out = p.out + t * p.out_stride + (h0 + warp) * D;
#pragma unroll
  for (int c = 0; c < DC; ++c) {
    const int64_t d = lane + kWarpSize * c;
    if (d < D) out[d] = acc[c] / l;
  }
}

template <int DC>
cudaError_t LaunchWide(const AttentionParams& p, cudaStream_t stream) {
  const int64_t group = p.heads / p.kv_heads;
  const dim3 grid(static_cast<unsigned>(p.rows), static_cast<unsigned>(p.kv_heads),
                  static_cast<unsigned>(CeilDiv(group, kWarps)));
  const size_t smem = SharedFloats(DC) * sizeof(float);  // <= 41 KB: no opt-in needed
  AttentionWideKernel<DC><<<grid, kThreads, smem, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace

cudaError_t LaunchAttentionWide(const AttentionParams& p, cudaStream_t stream) {
  if (p.kv_heads <= 0 || p.heads % p.kv_heads != 0 || p.head_dim <= 0) {
    return cudaErrorInvalidValue;
  }
  // No window and no sinks here (no model with heads this wide has them).
  if (p.window > 0 || p.sinks.data != nullptr) return cudaErrorInvalidValue;
  if (p.rows <= 0) return cudaSuccess;
  if (p.head_dim <= 18 * kWarpSize) return LaunchWide<18>(p, stream);  // MLA: 512 + 64
  if (p.head_dim <= kMaxWideHeadDim) return LaunchWide<32>(p, stream);
  return cudaErrorInvalidValue;
}

}  // namespace expertd::engine::cuda
