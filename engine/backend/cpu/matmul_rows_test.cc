// Matmul with row maps (x_rows; y_rows and row_weights) against what they
// replace:
// GatherRows, a Matmul into a buffer, MoeScatterAdd. Bitwise, for every
// weight format and activations mode, the kernels that take the maps natively
// and those that run on copies alike, at row counts on both sides of every
// tile and decode threshold, on one and several threads.
#include <algorithm>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "engine/backend/backend.h"
#include "engine/backend/cpu/kernels.h"
#include "engine/backend/cpu/test_weights.h"
#include "gtest/gtest.h"

namespace expertd::engine::cpu {
namespace {

using test_weights::ActivationModes;
using test_weights::Kind;
using test_weights::KindName;

constexpr int64_t kTokens = 300, kTopK = 3;

// One expert's call: m of the tokens (distinct, shuffled), each at one of
// its top_k slots, over a layer's [kTokens, k] input and [kTokens, n] output.
struct Routed {
  std::vector<int32_t> rows, slots;
  std::vector<float> slot_weights;  // [kTokens * kTopK]
};

Routed Route(int64_t m, std::mt19937* rng) {
  Routed r;
  std::vector<int32_t> tokens(kTokens);
  std::iota(tokens.begin(), tokens.end(), 0);
  std::shuffle(tokens.begin(), tokens.end(), *rng);
  for (int64_t i = 0; i < m; ++i) {
    r.rows.push_back(tokens[i]);
    r.slots.push_back(static_cast<int32_t>(tokens[i] * kTopK + (*rng)() % kTopK));
  }
  r.slot_weights = reference::RandomVector(kTokens * kTopK, rng, 1.0f);
  return r;
}

struct Layer {
  int64_t n, k;
  std::vector<float> x;   // [kTokens, k + 5]
  std::vector<float> y0;  // [kTokens, n + 2], what y holds before the call
};

MatmulParams Params(const Layer& l, const WeightRef& w, int64_t m, MatmulActivations act) {
  MatmulParams p;
  p.x = l.x.data();
  p.x_stride = l.k + 5;
  p.w = w;
  p.y_stride = l.n + 2;
  p.m = m;
  p.activations = act;
  return p;
}

// The maps' meaning spelled out with the ops they replace.
std::vector<float> ByGatherAndScatter(const Layer& l, const WeightRef& w, const Routed& r,
                                      int64_t m, MatmulActivations act, bool map_x, bool map_y) {
  std::vector<float> gathered(m * l.k), out(m * l.n), y = l.y0;
  MatmulParams p = Params(l, w, m, act);
  if (map_x) {
    GatherRows(GatherRowsParams{l.x.data(), l.k + 5, r.rows.data(), gathered.data(), m, l.k},
               nullptr);
    p.x = gathered.data();
    p.x_stride = l.k;
  }
  if (map_y) {
    p.y = out.data();
    p.y_stride = l.n;
  } else {
    p.y = y.data();
    p.accumulate = true;
  }
  Matmul(p, nullptr);
  if (map_y) {
    // MoeScatterAdd's out is contiguous: go through a [kTokens, n] copy.
    std::vector<float> dense(kTokens * l.n);
    for (int64_t t = 0; t < kTokens; ++t)
      std::memcpy(&dense[t * l.n], &y[t * (l.n + 2)], l.n * sizeof(float));
    MoeScatterAdd(MoeScatterAddParams{out.data(), r.slots.data(), r.slot_weights.data(),
                                      dense.data(), m, kTopK, l.n},
                  nullptr);
    for (int64_t t = 0; t < kTokens; ++t)
      std::memcpy(&y[t * (l.n + 2)], &dense[t * l.n], l.n * sizeof(float));
  }
  return y;
}

std::vector<float> WithMaps(const Layer& l, const WeightRef& w, const Routed& r, int64_t m,
                            MatmulActivations act, bool map_x, bool map_y, ThreadPool* pool) {
  std::vector<float> y = l.y0;
  MatmulParams p = Params(l, w, m, act);
  p.y = y.data();
  p.accumulate = true;
  if (map_x) {
    p.x_rows = r.rows.data();
  } else {
    p.x = l.x.data();
  }
  if (map_y) {
    p.y_rows = r.rows.data();  // the tokens the slots belong to
    p.row_weights = r.slot_weights.data();
    p.row_weight_index = r.slots.data();
  }
  Matmul(p, pool);
  return y;
}

class MatmulRowMapsTest : public ::testing::TestWithParam<Kind> {};

TEST_P(MatmulRowMapsTest, BitwiseGatherMatmulScatterAdd) {
  const Kind kind = GetParam();
  std::mt19937 rng(5);
  Layer l;
  l.n = 37;
  l.k = test_weights::IsQuantized(kind) ? 128 : 67;
  const auto w = test_weights::MakeWeight(kind, l.n, l.k, &rng);
  l.x = reference::RandomVector(kTokens * (l.k + 5), &rng);
  l.y0 = reference::RandomVector(kTokens * (l.n + 2), &rng);
  ThreadPool pool(3);
  for (MatmulActivations act : ActivationModes()) {
    // Up to 290 rows: past two of the copy kernels' 64-row gather chunks
    // and the row stores' chunks, so the pool's workers run some of them.
    for (int64_t m : {1, 2, 3, 4, 5, 13, 64, 67, 290}) {
      const Routed r = Route(m, &rng);
      for (int maps = 1; maps < 4; ++maps) {
        const bool map_x = maps & 1, map_y = maps & 2;
        const std::vector<float> want = ByGatherAndScatter(l, w->ref, r, m, act, map_x, map_y);
        for (ThreadPool* threads : {static_cast<ThreadPool*>(nullptr), &pool}) {
          const std::vector<float> got = WithMaps(l, w->ref, r, m, act, map_x, map_y, threads);
          ASSERT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * sizeof(float)))
              << KindName(kind) << " activations=" << MatmulActivationsName(act) << " m=" << m
              << " x_rows=" << map_x << " y_rows=" << map_y << " threads=" << (threads ? 3 : 1);
        }
      }
    }
  }
}

// An expert with biases (gpt-oss) scattering its rows unweighted, as the MoE
// block does: the bias is added once, by every kernel, native maps or copies.
TEST_P(MatmulRowMapsTest, BiasWithUnweightedScatterEqualsGatherMatmulScatter) {
  const Kind kind = GetParam();
  std::mt19937 rng(17);
  const int64_t n = 37, k = test_weights::IsQuantized(kind) ? 128 : 67;
  const auto w = test_weights::MakeWeight(kind, n, k, &rng);
  const reference::TestWeight b = reference::RandomWeight(DType::kBF16, 1, n, &rng);
  const std::vector<float> x = reference::RandomVector(kTokens * k, &rng);
  for (MatmulActivations act : ActivationModes()) {
    for (int64_t m : {1, 5, 67}) {
      const Routed r = Route(m, &rng);
      std::vector<float> gathered(m * k), product(m * n), want(kTokens * n, -3.0f);
      std::vector<float> got = want;
      GatherRows(GatherRowsParams{x.data(), k, r.rows.data(), gathered.data(), m, k}, nullptr);
      MatmulParams p;
      p.x = gathered.data();
      p.x_stride = k;
      p.w = w->ref;
      p.bias = b.ref();
      p.y = product.data();
      p.y_stride = n;
      p.m = m;
      p.activations = act;
      Matmul(p, nullptr);
      ScatterRows(ScatterRowsParams{product.data(), r.rows.data(), want.data(), m, n}, nullptr);
      p.x = x.data();
      p.x_rows = r.rows.data();
      p.y = got.data();
      p.y_rows = r.rows.data();
      Matmul(p, nullptr);
      ASSERT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * sizeof(float)))
          << KindName(kind) << " activations=" << MatmulActivationsName(act) << " m=" << m;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, MatmulRowMapsTest,
                         ::testing::Values(Kind::kF32, Kind::kBf16, Kind::kF16, Kind::kInt8,
                                           Kind::kInt4, Kind::kMxfp4, Kind::kFp8),
                         [](const auto& info) { return KindName(info.param); });

// Without y_rows the output rows are the product's own, and a bias is
// allowed: x_rows alone is a gathered matmul, bias and all.
TEST(MatmulRowMapsEdgeTest, GatheredRowsWithBiasEqualAGatheredMatmul) {
  std::mt19937 rng(9);
  const int64_t n = 50, k = 40, m = 9;
  const reference::TestWeight w = reference::RandomWeight(DType::kF32, n, k, &rng);
  const reference::TestWeight b = reference::RandomWeight(DType::kF32, 1, n, &rng);
  const std::vector<float> x = reference::RandomVector(kTokens * k, &rng);
  const Routed r = Route(m, &rng);
  std::vector<float> gathered(m * k), want(m * n), got(m * n);
  GatherRows(GatherRowsParams{x.data(), k, r.rows.data(), gathered.data(), m, k}, nullptr);
  MatmulParams p;
  p.x = gathered.data();
  p.x_stride = k;
  p.w = w.ref();
  p.bias = b.ref();
  p.y = want.data();
  p.y_stride = n;
  p.m = m;
  Matmul(p, nullptr);
  p.x = x.data();
  p.x_rows = r.rows.data();
  p.y = got.data();
  Matmul(p, nullptr);
  EXPECT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * sizeof(float)));
}

// y_rows without weights and without accumulate: the product's rows
// written to the named rows (ScatterRows), every other row untouched.
TEST(MatmulRowMapsEdgeTest, UnweightedRowsAreWrittenWhereNamed) {
  std::mt19937 rng(13);
  const int64_t n = 30, k = 70, m = 11;
  const reference::TestWeight w = reference::RandomWeight(DType::kBF16, n, k, &rng);
  const std::vector<float> x = reference::RandomVector(m * k, &rng);
  const Routed r = Route(m, &rng);
  std::vector<float> product(m * n), want(kTokens * n, -2.0f), got(kTokens * n, -2.0f);
  MatmulParams p;
  p.x = x.data();
  p.x_stride = k;
  p.w = w.ref();
  p.y = product.data();
  p.y_stride = n;
  p.m = m;
  Matmul(p, nullptr);
  ScatterRows(ScatterRowsParams{product.data(), r.rows.data(), want.data(), m, n}, nullptr);
  p.y = got.data();
  p.y_rows = r.rows.data();
  Matmul(p, nullptr);
  EXPECT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * sizeof(float)));
}

}  // namespace
}  // namespace expertd::engine::cpu
