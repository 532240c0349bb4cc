#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "engine/backend/cpu/kernels.h"
#include "engine/backend/cpu/reference_ops.h"
#include "engine/backend/cpu/simd.h"
#include "gtest/gtest.h"

namespace expertd::engine::cpu {
namespace {

using reference::RandomVector;

// Two sequences in a shuffled block pool, filled through KvAppend.
struct PagedCache {
  static constexpr int64_t kBlock = 4, kBlocks = 12, kMaxBlocks = 6;
  int64_t kv_heads, head_dim;
  std::vector<float> k, v;                       // [kBlocks * kBlock, kv_heads, head_dim]
  std::vector<int32_t> tables;                   // [2, kMaxBlocks]
  std::vector<std::vector<float>> keys, values;  // per sequence, [len, kv_heads*head_dim]

  PagedCache(int64_t kvh, int64_t hd, std::vector<int64_t> lens, std::mt19937* rng)
      : kv_heads(kvh), head_dim(hd) {
    const int64_t w = kv_heads * head_dim;
    k.assign(kBlocks * kBlock * w, NAN);
    v.assign(kBlocks * kBlock * w, NAN);
    tables = {7, 2, 9, 0, 11, 5, 3, 8, 1, 10, 4, 6};
    for (int s = 0; s < 2; ++s) {
      keys.push_back(RandomVector(lens[s] * w, rng));
      values.push_back(RandomVector(lens[s] * w, rng));
      std::vector<int64_t> slots;
      for (int64_t j = 0; j < lens[s]; ++j)
        slots.push_back(tables[s * kMaxBlocks + j / kBlock] * kBlock + j % kBlock);
      KvAppendParams a;
      a.k = keys[s].data();
      a.k_stride = w;
      a.v = values[s].data();
      a.v_stride = w;
      a.rows = lens[s];
      a.kv_heads = kv_heads;
      a.head_dim = head_dim;
      a.slots = slots.data();
      a.k_cache = k.data();
      a.v_cache = v.data();
      KvAppend(a, nullptr);
    }
  }
};

// window: AttentionParams::window; sinks: one logit per head, or empty.
std::vector<float> RunAttention(const PagedCache& c, const std::vector<float>& q,
                                const std::vector<int32_t>& seq, const std::vector<int32_t>& pos,
                                int64_t heads, ThreadPool* pool, int64_t window = 0,
                                const std::vector<float>& sinks = {}) {
  const int64_t rows = seq.size();
  std::vector<float> out(rows * heads * c.head_dim);
  AttentionParams p;
  p.q = q.data();
  p.q_stride = heads * c.head_dim;
  p.out = out.data();
  p.out_stride = heads * c.head_dim;
  p.rows = rows;
  p.heads = heads;
  p.kv_heads = c.kv_heads;
  p.head_dim = c.head_dim;
  p.scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  p.seq = seq.data();
  p.pos = pos.data();
  p.block_tables = c.tables.data();
  p.max_blocks_per_seq = PagedCache::kMaxBlocks;
  p.block_size = PagedCache::kBlock;
  p.k_cache = c.k.data();
  p.v_cache = c.v.data();
  p.window = window;
  if (!sinks.empty()) p.sinks = WeightRef{sinks.data(), DType::kF32, 1, heads};
  Attention(p, pool);
  return out;
}

// Hugging Face's eager attention in doubles: keys j with pos - j < window
// (all when window is 0), and gpt-oss' sinks: a last logit per head in the
// softmax whose probability is dropped.
std::vector<double> NaiveAttention(const PagedCache& c, const std::vector<float>& q,
                                   const std::vector<int32_t>& seq, const std::vector<int32_t>& pos,
                                   int64_t heads, int64_t window, const std::vector<float>& sinks) {
  const int64_t hd = c.head_dim, kv_heads = c.kv_heads;
  std::vector<double> ref(seq.size() * heads * hd);
  for (size_t t = 0; t < seq.size(); ++t) {
    for (int64_t h = 0; h < heads; ++h) {
      const int64_t g = h / (heads / kv_heads);
      const float* qh = q.data() + (t * heads + h) * hd;
      const auto& K = c.keys[seq[t]];
      const auto& V = c.values[seq[t]];
      std::vector<double> s(pos[t] + 1, -INFINITY);
      double mx = sinks.empty() ? -1e300 : sinks[h];
      for (int j = 0; j <= pos[t]; ++j) {
        if (window > 0 && pos[t] - j >= window) continue;
        double d = 0;
        for (int i = 0; i < hd; ++i)
          d += static_cast<double>(qh[i]) * K[(j * kv_heads + g) * hd + i];
        s[j] = d / std::sqrt(static_cast<double>(hd));
        mx = std::max(mx, s[j]);
      }
      double sum = sinks.empty() ? 0.0 : std::exp(sinks[h] - mx);
      for (double& x : s) sum += (x = std::exp(x - mx));
      for (int i = 0; i < hd; ++i) {
        double o = 0;
        for (int j = 0; j <= pos[t]; ++j) o += s[j] / sum * V[(j * kv_heads + g) * hd + i];
        ref[(t * heads + h) * hd + i] = o;
      }
    }
  }
  return ref;
}

TEST(AttentionTest, MatchesNaiveCausalGqa) {
  std::mt19937 rng(11);
  const int64_t heads = 4, kv_heads = 2, hd = 12;
  PagedCache cache(kv_heads, hd, {9, 21}, &rng);
  std::vector<int32_t> seq = {0, 0, 1, 1, 1}, pos = {0, 8, 3, 17, 20};
  std::vector<float> q = RandomVector(seq.size() * heads * hd, &rng);
  ThreadPool pool(3);
  std::vector<float> out = RunAttention(cache, q, seq, pos, heads, &pool);
  EXPECT_LT(reference::RelError(out, NaiveAttention(cache, q, seq, pos, heads, 0, {})), 1e-5);
}

// Sliding windows (narrower and wider than the 4-query blocks, and wider
// than every position: the same as none) and sinks, on decode rows and on a
// prefill chunk, for head dims that take the AVX-512 block path and not.
TEST(AttentionTest, SlidingWindowAndSinksMatchNaive) {
  const std::vector<float> sinks = {0.7f, -1.3f, 2.5f, 0.0f};
  for (int64_t hd : {12, 64}) {
    for (int64_t window : {0, 1, 2, 5, 64}) {
      for (bool with_sinks : {false, true}) {
        std::mt19937 rng(static_cast<uint32_t>(hd + window));
        const int64_t heads = 4, kv_heads = 2;
        PagedCache cache(kv_heads, hd, {9, 21}, &rng);
        std::vector<int32_t> seq = {0, 0, 1, 1, 1, 1, 1, 1}, pos = {0, 8, 3, 14, 15, 16, 17, 20};
        std::vector<float> q = RandomVector(seq.size() * heads * hd, &rng);
        ThreadPool pool(2);
        const std::vector<float>& s = with_sinks ? sinks : std::vector<float>{};
        std::vector<float> out = RunAttention(cache, q, seq, pos, heads, &pool, window, s);
        EXPECT_LT(reference::RelError(out, NaiveAttention(cache, q, seq, pos, heads, window, s)),
                  1e-5)
            << "hd=" << hd << " window=" << window << " sinks=" << with_sinks;
      }
    }
  }
  // A sink far above every score takes nearly all the weight: the output
  // shrinks toward zero instead of being renormalised over the keys.
  std::mt19937 rng(3);
  PagedCache cache(1, 16, {5, 5}, &rng);
  std::vector<float> q = RandomVector(16, &rng);
  std::vector<float> out = RunAttention(cache, q, {0}, {4}, 1, nullptr, 0, {30.0f});
  for (float x : out) EXPECT_LT(std::fabs(x), 1e-6f);
}

// The kernel is bitwise the sequence the file header states, spelled out
// here with one DotF32 and one AxpyF32 per key: head dims with and without
// 8-, 16- and 64-float tails, lengths across the kernels' 8-key groups,
// scattered decode rows and prefill chunks (consecutive positions of one
// sequence: the AVX-512 kernel's blocks of up to 4 queries).
TEST(AttentionTest, BitwiseTheStatedSequence) {
  struct Rows {
    std::vector<int32_t> seq, pos;
  };
  const Rows decode{{0, 0, 0, 1, 1, 0}, {0, 7, 8, 15, 16, 23}};
  const Rows prefill{{0, 0, 0, 0, 0, 0, 1, 1, 1, 0, 1, 1},
                     {10, 11, 12, 13, 14, 15, 0, 1, 2, 23, 8, 9}};
  const std::vector<float> sinks = {0.25f, -0.5f, 1.5f, -2.0f};
  struct Variant {
    int64_t window;
    bool sinks;
  };
  for (const Variant variant : {Variant{0, false}, Variant{3, false}, Variant{6, true}}) {
    for (int64_t hd : {8, 12, 16, 64, 72, 80, 128, 136}) {
      for (const Rows& rows : {decode, prefill}) {
        std::mt19937 rng(static_cast<uint32_t>(hd));
        const int64_t heads = 4, kv_heads = 2;
        PagedCache cache(kv_heads, hd, {24, 17}, &rng);
        const std::vector<int32_t>& seq = rows.seq;
        const std::vector<int32_t>& pos = rows.pos;
        std::vector<float> q = RandomVector(seq.size() * heads * hd, &rng);
        ThreadPool pool(2);
        const std::vector<float>& sink = variant.sinks ? sinks : std::vector<float>{};
        std::vector<float> out =
            RunAttention(cache, q, seq, pos, heads, &pool, variant.window, sink);
        std::vector<float> want(out.size());
        const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
        for (size_t t = 0; t < seq.size(); ++t) {
          for (int64_t h = 0; h < heads; ++h) {
            const int64_t g = h / (heads / kv_heads);
            const float* qh = q.data() + (t * heads + h) * hd;
            const auto& K = cache.keys[seq[t]];
            const auto& V = cache.values[seq[t]];
            const int first =
                variant.window > 0 ? std::max(0, pos[t] - int(variant.window) + 1) : 0;
            std::vector<float> s(pos[t] + 1 - first);
            for (int j = first; j <= pos[t]; ++j)
              s[j - first] = DotF32(qh, K.data() + (j * kv_heads + g) * hd, hd) * scale;
            float mx = s[0];
            for (float x : s) mx = std::max(mx, x);
            if (!sink.empty()) mx = std::max(mx, sink[h]);
            float sum = 0.0f;
            for (float& x : s) sum += (x = std::exp(x - mx));
            if (!sink.empty()) sum += std::exp(sink[h] - mx);
            float* o = want.data() + (t * heads + h) * hd;
            std::fill(o, o + hd, 0.0f);
            for (int j = first; j <= pos[t]; ++j)
              AxpyF32(s[j - first] / sum, V.data() + (j * kv_heads + g) * hd, o, hd);
          }
        }
        ASSERT_EQ(0, std::memcmp(out.data(), want.data(), out.size() * sizeof(float)))
            << "hd=" << hd << " rows=" << seq.size() << " window=" << variant.window
            << " sinks=" << variant.sinks;
      }
    }
  }
}

TEST(AttentionTest, RowIsBitwiseIndependentOfBatch) {
  std::mt19937 rng(5);
  const int64_t heads = 4, kv_heads = 1, hd = 20;
  PagedCache cache(kv_heads, hd, {13, 22}, &rng);
  std::vector<float> qrow = RandomVector(heads * hd, &rng);
  std::vector<float> alone = RunAttention(cache, qrow, {1}, {16}, heads, nullptr);
  std::vector<float> q = RandomVector(4 * heads * hd, &rng);
  std::memcpy(q.data() + 2 * heads * hd, qrow.data(), qrow.size() * sizeof(float));
  ThreadPool pool(2);
  std::vector<float> batch = RunAttention(cache, q, {0, 1, 1, 0}, {12, 3, 16, 5}, heads, &pool);
  EXPECT_EQ(0,
            std::memcmp(batch.data() + 2 * heads * hd, alone.data(), alone.size() * sizeof(float)));
}

}  // namespace
}  // namespace expertd::engine::cpu
