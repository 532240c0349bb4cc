// Both CUDA attention kernels (rows: decode; tiled: prefill) against the CPU
// twin (engine/backend/cpu/attention.cc) over a paged KV cache whose blocks
// are shuffled: several sequences of different lengths, a prefill chunk next
// to decode rows, GQA group sizes 1..16, head_dim from 16 to 256 (tiled:
// <= 128). fp32 throughout: < 1e-5 relative. Plus GPU batch invariance: a
// row's output is bitwise the same alone or in a batch. The wide kernel
// (head_dim > 256) against the same twin, in DeepSeek-V3's absorbed MLA decode
// shape: one shared 576-wide latent cache row as key and value. Sliding
// windows and sink logits on the rows and tiled kernels. Skips without a GPU.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "engine/backend/cpu/kernels.h"
#include "engine/backend/cpu/reference_ops.h"
#include "engine/backend/cuda/cuda_test_util.h"
#include "gtest/gtest.h"

namespace expertd::engine {
namespace {

using cuda_test::BitwiseEqual;
using cuda_test::DeviceArray;
using cuda_test::ExpectNoDeviceError;
using cuda_test::RelError;
using cuda_test::SharedBackend;
using reference::RandomVector;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// A step over a paged cache: sequences of `lens` tokens already cached; the
// queries are the last `query_rows[s]` positions of sequence s (a prefill
// chunk when > 1, a decode row when 1).
struct Step {
  int64_t heads, kv_heads, head_dim, block_size;
  int64_t max_blocks = 0;
  std::vector<int32_t> tables;  // [seqs, max_blocks], blocks shuffled
  std::vector<float> k_cache, v_cache;
  std::vector<float> q;
  std::vector<int32_t> seq, pos;
  // The value cache IS the key cache (one pointer for both): the absorbed MLA
  // form, whose cached latent row serves as key and value.
  bool share_cache = false;
  // AttentionParams::window and ::sinks (one logit per query head; empty: none).
  int64_t window = 0;
  std::vector<float> sinks;

  Step(int64_t h, int64_t kvh, int64_t hd, int64_t bs, const std::vector<int64_t>& lens,
       const std::vector<int64_t>& query_rows, std::mt19937* rng)
      : heads(h), kv_heads(kvh), head_dim(hd), block_size(bs) {
    const int64_t w = kv_heads * head_dim;
    for (int64_t len : lens) max_blocks = std::max(max_blocks, (len + bs - 1) / bs);
    const int64_t blocks = max_blocks * static_cast<int64_t>(lens.size()) + 3;
    std::vector<int32_t> pool(blocks);
    std::iota(pool.begin(), pool.end(), 0);
    std::shuffle(pool.begin(), pool.end(), *rng);
    tables.assign(lens.size() * max_blocks, 0);
    for (size_t s = 0; s < lens.size(); ++s) {
      for (int64_t b = 0; b < max_blocks; ++b)
        tables[s * max_blocks + b] = pool[s * max_blocks + b];
    }
    k_cache.assign(blocks * bs * w,
                   kNaN);  // unwritten slots are NaN: reading one poisons the output
    v_cache.assign(blocks * bs * w, kNaN);
    for (size_t s = 0; s < lens.size(); ++s) {
      std::vector<float> k = RandomVector(lens[s] * w, rng), v = RandomVector(lens[s] * w, rng);
      std::vector<int64_t> slots;
      for (int64_t j = 0; j < lens[s]; ++j)
        slots.push_back(tables[s * max_blocks + j / bs] * bs + j % bs);
      cpu::KvAppend(KvAppendParams{k.data(), w, v.data(), w, lens[s], kv_heads, head_dim,
                                   slots.data(), k_cache.data(), v_cache.data()},
                    nullptr);
      for (int64_t i = lens[s] - query_rows[s]; i < lens[s]; ++i) {
        seq.push_back(static_cast<int32_t>(s));
        pos.push_back(static_cast<int32_t>(i));
      }
    }
    q = RandomVector(static_cast<int64_t>(seq.size()) * heads * head_dim, rng, 2.0f);
  }
  int64_t rows() const { return static_cast<int64_t>(seq.size()); }

  AttentionParams Params(const float* pq, float* out, const int32_t* pseq, const int32_t* ppos,
                         const int32_t* ptab, const float* kc, const float* vc, int64_t nrows,
                         const float* psinks = nullptr) const {
    AttentionParams p;
    p.window = window;
    if (psinks != nullptr) p.sinks = WeightRef{psinks, DType::kF32, 1, heads};
    p.q = pq;
    p.q_stride = heads * head_dim;
    p.out = out;
    p.out_stride = heads * head_dim;
    p.rows = nrows;
    p.heads = heads;
    p.kv_heads = kv_heads;
    p.head_dim = head_dim;
    p.scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
    p.seq = pseq;
    p.pos = ppos;
    p.block_tables = ptab;
    p.max_blocks_per_seq = max_blocks;
    p.block_size = block_size;
    p.k_cache = kc;
    p.v_cache = vc;
    return p;
  }

  std::vector<float> Cpu() const {
    std::vector<float> out(q.size(), kNaN);
    cpu::Attention(Params(q.data(), out.data(), seq.data(), pos.data(), tables.data(),
                          k_cache.data(), share_cache ? k_cache.data() : v_cache.data(), rows(),
                          sinks.empty() ? nullptr : sinks.data()),
                   nullptr);
    return out;
  }

  // Rows [first, first + n) on the GPU with `kernel` (wide: LaunchAttentionWide).
  std::vector<float> Gpu(cuda::AttentionKernel kernel, int64_t first, int64_t n,
                         bool wide = false) const {
    const int64_t width = heads * head_dim;
    DeviceArray<float> dq(
        std::vector<float>(q.begin() + first * width, q.begin() + (first + n) * width));
    DeviceArray<int32_t> dseq(std::vector<int32_t>(seq.begin() + first, seq.begin() + first + n));
    DeviceArray<int32_t> dpos(std::vector<int32_t>(pos.begin() + first, pos.begin() + first + n));
    DeviceArray<int32_t> dtab(tables);
    DeviceArray<float> dk(k_cache), dv(v_cache), dout(n * width, kNaN);
    DeviceArray<float> dsinks(sinks.empty() ? std::vector<float>{0.0f} : sinks);
    const AttentionParams p =
        Params(dq.get(), dout.get(), dseq.get(), dpos.get(), dtab.get(), dk.get(),
               share_cache ? dk.get() : dv.get(), n, sinks.empty() ? nullptr : dsinks.get());
    cudaStream_t stream = SharedBackend()->compute_stream();
    EXPECT_EQ(
        wide ? cuda::LaunchAttentionWide(p, stream) : cuda::LaunchAttention(p, kernel, stream),
        cudaSuccess);
    return dout.ToHost();
  }
};

struct Config {
  int64_t heads, kv_heads, head_dim, block_size;
};

TEST(CudaAttentionTest, BothKernelsMatchCpuOnMixedPrefillAndDecodeSteps) {
  EXPERTD_REQUIRE_GPU();
  std::mt19937 rng(1);
  for (Config c :
       {Config{4, 2, 16, 4}, Config{6, 6, 40, 16}, Config{8, 2, 64, 8}, Config{16, 1, 128, 16},
        Config{32, 4, 128, 16}, Config{4, 4, 256, 16}, Config{2, 1, 2, 3}}) {
    // Sequence 0: a 45-token prefill chunk ending at 70; 1..3: decode rows.
    Step step(c.heads, c.kv_heads, c.head_dim, c.block_size, {70, 1, 33, 129}, {45, 1, 1, 1}, &rng);
    const std::vector<float> want = step.Cpu();
    for (auto kernel : {cuda::AttentionKernel::kRows, cuda::AttentionKernel::kTiled,
                        cuda::AttentionKernel::kAuto}) {
      if (kernel == cuda::AttentionKernel::kTiled && c.head_dim > 128) continue;
      const std::vector<float> got = step.Gpu(kernel, 0, step.rows());
      EXPECT_LT(RelError(got, want), 1e-5)
          << "heads " << c.heads << "/" << c.kv_heads << " head_dim " << c.head_dim << " kernel "
          << static_cast<int>(kernel);
    }
  }
  ExpectNoDeviceError();
}

TEST(CudaAttentionTest, TiledKernelHandlesRunsOfSeveralSequencesInOneTile) {
  EXPERTD_REQUIRE_GPU();
  std::mt19937 rng(2);
  // Chunks of 3, 7, 1, 20 and 2 rows: tiles of 16 rows span sequence changes.
  Step step(8, 2, 64, 4, {3, 40, 1, 20, 90}, {3, 7, 1, 20, 2}, &rng);
  const std::vector<float> want = step.Cpu();
  EXPECT_LT(RelError(step.Gpu(cuda::AttentionKernel::kTiled, 0, step.rows()), want), 1e-5);
  EXPECT_LT(RelError(step.Gpu(cuda::AttentionKernel::kRows, 0, step.rows()), want), 1e-5);
  ExpectNoDeviceError();
}

// Sliding windows (Mixtral, gpt-oss) and sink logits (gpt-oss), alone and
// together, on both kernels: windows of one key, shorter than a 32-key tile,
// a tile and a bit, and longer than some sequences; a prefill chunk whose
// rows' windows start in different tiles, next to decode rows.
TEST(CudaAttentionTest, WindowAndSinksMatchCpu) {
  EXPERTD_REQUIRE_GPU();
  std::mt19937 rng(4);
  for (Config c : {Config{8, 2, 64, 8}, Config{4, 4, 16, 4}, Config{64, 8, 64, 16}}) {
    for (int64_t window : {0, 1, 5, 33, 100}) {
      for (bool with_sinks : {false, true}) {
        if (window == 0 && !with_sinks) continue;  // the other tests' case
        Step step(c.heads, c.kv_heads, c.head_dim, c.block_size, {70, 1, 33, 129}, {45, 1, 1, 1},
                  &rng);
        step.window = window;
        if (with_sinks) step.sinks = RandomVector(c.heads, &rng, 3.0f);
        const std::vector<float> want = step.Cpu();
        for (auto kernel : {cuda::AttentionKernel::kRows, cuda::AttentionKernel::kTiled}) {
          const std::vector<float> got = step.Gpu(kernel, 0, step.rows());
          EXPECT_LT(RelError(got, want), 1e-5)
              << "heads " << c.heads << "/" << c.kv_heads << " head_dim " << c.head_dim
              << " window " << window << " sinks " << with_sinks << " kernel "
              << static_cast<int>(kernel);
        }
      }
    }
  }
  ExpectNoDeviceError();
}

TEST(CudaAttentionTest, RowsKernelIsBatchInvariantBitwise) {
  EXPERTD_REQUIRE_GPU();
  std::mt19937 rng(3);
  Step step(8, 2, 128, 16, {300, 5, 77}, {1, 1, 1}, &rng);
  const int64_t width = step.heads * step.head_dim;
  const std::vector<float> all = step.Gpu(cuda::AttentionKernel::kRows, 0, 3);
  for (int64_t r = 0; r < 3; ++r) {
    const std::vector<float> one = step.Gpu(cuda::AttentionKernel::kRows, r, 1);
    EXPECT_TRUE(BitwiseEqual(
        one, std::vector<float>(all.begin() + r * width, all.begin() + (r + 1) * width)));
  }
  ExpectNoDeviceError();
}

TEST(CudaAttentionTest, WideKernelMatchesCpuOnMixedPrefillAndDecodeSteps) {
  EXPERTD_REQUIRE_GPU();
  std::mt19937 rng(4);
  // Widths past the rows kernel (257..1024, both instances), GQA groups that
  // span several blocks (9 heads: 8 + 1), and narrow heads the kernel also takes.
  for (Config c :
       {Config{16, 1, 576, 16}, Config{6, 2, 300, 8}, Config{3, 1, 1024, 4}, Config{9, 3, 257, 5},
        Config{9, 1, 577, 16}, Config{4, 2, 64, 16}, Config{2, 1, 2, 3}}) {
    Step step(c.heads, c.kv_heads, c.head_dim, c.block_size, {70, 1, 33, 129}, {45, 1, 1, 1}, &rng);
    const std::vector<float> want = step.Cpu();
    EXPECT_LT(RelError(step.Gpu(cuda::AttentionKernel::kAuto, 0, step.rows(), true), want), 1e-5)
        << "heads " << c.heads << "/" << c.kv_heads << " head_dim " << c.head_dim;
    if (c.head_dim > 256) {  // LaunchAttention sends every kernel choice there
      for (auto kernel : {cuda::AttentionKernel::kRows, cuda::AttentionKernel::kTiled,
                          cuda::AttentionKernel::kAuto}) {
        EXPECT_LT(RelError(step.Gpu(kernel, 0, step.rows()), want), 1e-5)
            << "head_dim " << c.head_dim << " kernel " << static_cast<int>(kernel);
      }
    }
  }
  ExpectNoDeviceError();
}

// DeepSeek-V3's absorbed decode: 128 query heads against one latent cache
// [c (512), k_pe (64)] used as key and value, long and short contexts, the
// softmax scale with YaRN's mscale folded in (any positive scale).
TEST(CudaAttentionTest, WideKernelMatchesCpuOnAbsorbedMlaDecode) {
  EXPERTD_REQUIRE_GPU();
  std::mt19937 rng(5);
  Step step(128, 1, 576, 64, {700, 1, 65, 300}, {1, 1, 1, 1}, &rng);
  step.share_cache = true;
  const std::vector<float> want = step.Cpu();
  EXPECT_LT(RelError(step.Gpu(cuda::AttentionKernel::kAuto, 0, step.rows()), want), 1e-5);
  // A prefill chunk through the same path (the engine's absorbed prefill).
  Step prefill(16, 1, 576, 16, {90, 40}, {90, 3}, &rng);
  prefill.share_cache = true;
  EXPECT_LT(RelError(prefill.Gpu(cuda::AttentionKernel::kAuto, 0, prefill.rows()), prefill.Cpu()),
            1e-5);
  ExpectNoDeviceError();
}

TEST(CudaAttentionTest, WideKernelIsBatchInvariantBitwise) {
  EXPERTD_REQUIRE_GPU();
  std::mt19937 rng(6);
  Step step(16, 1, 576, 16, {300, 5, 77}, {1, 1, 1}, &rng);
  step.share_cache = true;
  const int64_t width = step.heads * step.head_dim;
  const std::vector<float> all = step.Gpu(cuda::AttentionKernel::kAuto, 0, 3);
  for (int64_t r = 0; r < 3; ++r) {
    const std::vector<float> one = step.Gpu(cuda::AttentionKernel::kAuto, r, 1);
    EXPECT_TRUE(BitwiseEqual(
        one, std::vector<float>(all.begin() + r * width, all.begin() + (r + 1) * width)));
  }
  ExpectNoDeviceError();
}

TEST(CudaAttentionTest, HeadDimBeyondTheKernelsIsAnError) {
  EXPERTD_REQUIRE_GPU();
  AttentionParams p;
  p.rows = 1;
  p.heads = p.kv_heads = 1;
  p.head_dim = 512;
  EXPECT_EQ(cuda::LaunchAttentionRows(p, SharedBackend()->compute_stream()), cudaErrorInvalidValue);
  p.head_dim = cuda::kMaxWideHeadDim + 1;
  EXPECT_EQ(
      cuda::LaunchAttention(p, cuda::AttentionKernel::kAuto, SharedBackend()->compute_stream()),
      cudaErrorInvalidValue);
  p.head_dim = 256;
  EXPECT_EQ(
      cuda::LaunchAttention(p, cuda::AttentionKernel::kTiled, SharedBackend()->compute_stream()),
      cudaErrorInvalidValue);
}

}  // namespace
}  // namespace expertd::engine
