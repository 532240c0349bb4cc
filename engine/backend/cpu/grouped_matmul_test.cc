// GroupedMatmul against one Matmul per group (bitwise: the contract) and
// against a double-precision scalar reference, for every weight format, with
// odd widths, empty groups, one-row groups and groups past one row tile; with
// row maps, against GatherRows + GroupedMatmul + ScatterRows (bitwise).
#include <algorithm>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "engine/backend/backend.h"
#include "engine/backend/cpu/kernels.h"
#include "engine/backend/cpu/reference_ops.h"
#include "engine/backend/cpu/test_weights.h"
#include "gtest/gtest.h"

namespace expertd::engine::cpu {
namespace {

using test_weights::ActivationModes;
using test_weights::GroupWeight;
using test_weights::Kind;
using test_weights::KindName;
using test_weights::MakeWeight;

struct Problem {
  int64_t n, k;
  std::vector<int64_t> offset;  // [groups + 1]
  std::vector<std::unique_ptr<GroupWeight>> weights;
  std::vector<WeightRef> refs;
  std::vector<float> x;
  int64_t rows() const { return offset.back(); }
};

// Rows per group: empty groups, one-row groups, one past a 64-row tile.
Problem MakeProblem(Kind kind, int64_t n, int64_t k, const std::vector<int64_t>& group_rows) {
  std::mt19937 rng(11);
  Problem p{n, k, {0}, {}, {}, {}};
  for (int64_t rows : group_rows) {
    p.offset.push_back(p.offset.back() + rows);
    p.weights.push_back(MakeWeight(kind, n, k, &rng));
    p.refs.push_back(p.weights.back()->ref);
  }
  p.x = reference::RandomVector(p.rows() * (k + 3), &rng);  // x_stride = k + 3
  return p;
}

// y starts at `init` everywhere; y_stride = n + 2 (the pad must stay `init`).
std::vector<float> RunGrouped(const Problem& p, bool accumulate, ThreadPool* pool, float init) {
  std::vector<float> y(p.rows() * (p.n + 2), init);
  GroupedMatmulParams g;
  g.x = p.x.data();
  g.x_stride = p.k + 3;
  g.w = p.refs.data();
  g.row_offset = p.offset.data();
  g.groups = static_cast<int64_t>(p.refs.size());
  g.y = y.data();
  g.y_stride = p.n + 2;
  g.n = p.n;
  g.k = p.k;
  g.accumulate = accumulate;
  GroupedMatmul(g, pool);
  return y;
}

std::vector<float> RunPerGroup(const Problem& p, bool accumulate, ThreadPool* pool, float init) {
  std::vector<float> y(p.rows() * (p.n + 2), init);
  for (size_t e = 0; e < p.refs.size(); ++e) {
    MatmulParams m;
    m.x = p.x.data() + p.offset[e] * (p.k + 3);
    m.x_stride = p.k + 3;
    m.w = p.refs[e];
    m.y = y.data() + p.offset[e] * (p.n + 2);
    m.y_stride = p.n + 2;
    m.m = p.offset[e + 1] - p.offset[e];
    m.accumulate = accumulate;
    Matmul(m, pool);
  }
  return y;
}

const std::vector<int64_t> kGroupRows = {0, 1, 3, 0, 65, 1, 7, 64, 2, 0};

class GroupedMatmulTest : public ::testing::TestWithParam<Kind> {};

TEST_P(GroupedMatmulTest, BitwiseEqualToOneMatmulPerGroup) {
  const Kind kind = GetParam();
  const bool quantized = test_weights::IsQuantized(kind);
  // Odd widths; quantized k is a whole number of groups and of 64-byte lines
  // of codes (so the AVX-512 panel kernel runs where the CPU has it), FP8's
  // rows 37 / 16 end in a ragged block.
  const int64_t n = 37, k = quantized ? 128 : 67;
  const Problem p = MakeProblem(kind, n, k, kGroupRows);
  ThreadPool pool3(3);
  for (ThreadPool* pool : {static_cast<ThreadPool*>(nullptr), &pool3}) {
    for (bool accumulate : {false, true}) {
      const std::vector<float> grouped = RunGrouped(p, accumulate, pool, 0.25f);
      // The per-group reference always runs on one thread: the grouped
      // result must not depend on the thread count either.
      const std::vector<float> per_group = RunPerGroup(p, accumulate, nullptr, 0.25f);
      ASSERT_EQ(0, std::memcmp(grouped.data(), per_group.data(), grouped.size() * sizeof(float)))
          << KindName(kind) << " threads=" << (pool ? 3 : 1) << " accumulate=" << accumulate;
    }
  }
}

// The double-precision scalar reference: y = x . dequant(w_g)^T per group.
TEST_P(GroupedMatmulTest, MatchesScalarReference) {
  const Kind kind = GetParam();
  const bool quantized = test_weights::IsQuantized(kind);
  const int64_t n = 19, k = quantized ? 64 : 45;
  const Problem p = MakeProblem(kind, n, k, {2, 0, 1, 9});
  ThreadPool pool(2);
  const std::vector<float> y = RunGrouped(p, /*accumulate=*/false, &pool, -1.0f);
  for (size_t e = 0; e + 1 < p.offset.size(); ++e) {
    for (int64_t r = p.offset[e]; r < p.offset[e + 1]; ++r) {
      for (int64_t c = 0; c < n + 2; ++c) {
        const float got = y[r * (n + 2) + c];
        if (c >= n) {
          EXPECT_EQ(got, -1.0f) << "wrote past n";
          continue;
        }
        double want = 0;
        for (int64_t i = 0; i < k; ++i)
          want += static_cast<double>(p.x[r * (k + 3) + i]) * p.weights[e]->exact[c * k + i];
        // fp32 accumulation over k <= 67 terms of |x| ~ 1, |w| <= 0.5.
        EXPECT_NEAR(got, want, 1e-5 * (1 + std::fabs(want)))
            << KindName(kind) << " group " << e << " row " << r << " col " << c;
      }
    }
  }
}

// Row maps: grouped row r reads token row x_rows[r] (tokens repeat: one
// token routes to several experts) and writes output row y_rows[r]
// (distinct, shuffled, some output rows never written). The same as
// gathering the rows, the call without maps, and scattering the results
// (with accumulate, the result rows start from y's rows).
TEST_P(GroupedMatmulTest, RowMapsBitwiseEqualToGatherAndScatter) {
  const Kind kind = GetParam();
  const int64_t n = 37, k = test_weights::IsQuantized(kind) ? 128 : 67;
  const Problem p = MakeProblem(kind, n, k, kGroupRows);
  const int64_t rows = p.rows(), tokens = 50, out_rows = rows + 20;
  std::mt19937 rng(17);
  const std::vector<float> x = reference::RandomVector(tokens * (k + 3), &rng);
  const std::vector<float> y0 = reference::RandomVector(out_rows * (n + 2), &rng);
  std::vector<int32_t> x_rows(rows), y_rows(out_rows);
  for (int32_t& t : x_rows) t = static_cast<int32_t>(rng() % tokens);
  std::iota(y_rows.begin(), y_rows.end(), 0);
  std::shuffle(y_rows.begin(), y_rows.end(), rng);
  y_rows.resize(rows);
  ThreadPool pool3(3);
  for (MatmulActivations act : ActivationModes()) {
    for (int maps = 1; maps < 4; ++maps) {
      const bool map_x = maps & 1, map_y = maps & 2;
      for (bool accumulate : {false, true}) {
        // Reference: rows gathered (x always, so both sides read the same
        // values), the unmapped call into gathered result rows, scattered.
        std::vector<float> gx(rows * k), gy(rows * n), want = y0;
        GatherRows(GatherRowsParams{x.data(), k + 3, x_rows.data(), gx.data(), rows, k}, nullptr);
        GatherRows(GatherRowsParams{y0.data(), n + 2, y_rows.data(), gy.data(), rows, n}, nullptr);
        GroupedMatmulParams g;
        g.x = gx.data();
        g.x_stride = k;
        g.w = p.refs.data();
        g.row_offset = p.offset.data();
        g.groups = static_cast<int64_t>(p.refs.size());
        g.y = map_y ? gy.data() : want.data();
        g.y_stride = map_y ? n : n + 2;
        g.n = n;
        g.k = k;
        g.accumulate = accumulate;
        g.activations = act;
        GroupedMatmul(g, nullptr);
        if (map_y) {
          std::vector<float> dense(out_rows * n);
          for (int64_t r = 0; r < out_rows; ++r)
            std::memcpy(&dense[r * n], &want[r * (n + 2)], n * sizeof(float));
          ScatterRows(ScatterRowsParams{gy.data(), y_rows.data(), dense.data(), rows, n}, nullptr);
          for (int64_t r = 0; r < out_rows; ++r)
            std::memcpy(&want[r * (n + 2)], &dense[r * n], n * sizeof(float));
        }
        for (ThreadPool* pool : {static_cast<ThreadPool*>(nullptr), &pool3}) {
          std::vector<float> got = y0;
          GroupedMatmulParams m = g;
          m.x = map_x ? x.data() : gx.data();
          m.x_stride = map_x ? k + 3 : k;
          m.x_rows = map_x ? x_rows.data() : nullptr;
          m.y = got.data();
          m.y_stride = n + 2;
          m.y_rows = map_y ? y_rows.data() : nullptr;
          GroupedMatmul(m, pool);
          ASSERT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * sizeof(float)))
              << KindName(kind) << " activations=" << MatmulActivationsName(act)
              << " x_rows=" << map_x << " y_rows=" << map_y << " accumulate=" << accumulate
              << " threads=" << (pool ? 3 : 1);
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, GroupedMatmulTest,
                         ::testing::Values(Kind::kF32, Kind::kBf16, Kind::kF16, Kind::kInt8,
                                           Kind::kInt4, Kind::kMxfp4, Kind::kFp8),
                         [](const auto& info) { return KindName(info.param); });

TEST(GroupedMatmulEdgeTest, NoRowsAtAllWritesNothing) {
  const Problem p = MakeProblem(Kind::kF32, 8, 16, {0, 0, 0});
  const std::vector<float> y = RunGrouped(p, false, nullptr, 0.0f);
  EXPECT_TRUE(y.empty());
}

// Many one-row experts (decode) and a wide layer, on more threads than
// row tiles: the column split must still give each element Matmul's value.
TEST(GroupedMatmulEdgeTest, DecodeShapeOnManyThreadsEqualsPerGroup) {
  const Problem p = MakeProblem(Kind::kBf16, 200, 64, {1, 1, 0, 1});
  ThreadPool pool(4);
  const std::vector<float> grouped = RunGrouped(p, false, &pool, 0.0f);
  const std::vector<float> per_group = RunPerGroup(p, false, &pool, 0.0f);
  ASSERT_EQ(0, std::memcmp(grouped.data(), per_group.data(), grouped.size() * sizeof(float)));
}

}  // namespace
}  // namespace expertd::engine::cpu
