// RunGroupedExperts against one gather / RunMlp / scatter per expert:
// bitwise, also when an expert's rows straddle two batches, with the rows
// read and written in place and with gathered copies.
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <vector>

#include "engine/backend/backend_factory.h"
#include "engine/model/feed_forward.h"
#include "engine/model/workspace.h"
#include "gtest/gtest.h"

namespace expertd::engine {
namespace {

constexpr int64_t kHidden = 24, kInter = 40;

std::vector<float> Random(int64_t n, std::mt19937* rng) {
  std::normal_distribution<float> d(0.0f, 0.3f);
  std::vector<float> v(n);
  for (float& f : v) f = d(*rng);
  return v;
}

// Row maps on (the GEMMs read x's rows and write the slots in place) and
// off (each batch gathered and scattered, as on a GPU).
class GroupedExpertsTest : public ::testing::TestWithParam<bool> {};

TEST_P(GroupedExpertsTest, BitwiseEqualToPerExpertAcrossBatchBoundaries) {
  BackendOptions o;
  o.threads = 3;
  o.matmul_row_maps = GetParam();
  std::unique_ptr<Backend> be = *CreateBackend(o);
  ASSERT_EQ(be->HasMatmulRowMaps(), GetParam());
  std::mt19937 rng(3);
  // 1500 + 1 + 1200 entries: the third expert straddles the 2048-row batch.
  const std::vector<int64_t> rows = {1500, 1, 1200, 7};
  const int64_t entries = std::accumulate(rows.begin(), rows.end(), int64_t{0});
  static_assert(kGroupedBatchRows < 1500 + 1 + 1200);
  const int64_t tokens = 1600;
  std::vector<std::vector<float>> storage;
  std::vector<MlpWeights> experts;
  for (size_t e = 0; e < rows.size(); ++e) {
    for (int i = 0; i < 3; ++i) storage.push_back(Random(kInter * kHidden, &rng));
    const size_t b = storage.size() - 3;
    experts.push_back(MlpWeights{WeightRef{storage[b].data(), DType::kF32, kInter, kHidden},
                                 WeightRef{storage[b + 1].data(), DType::kF32, kInter, kHidden},
                                 WeightRef{storage[b + 2].data(), DType::kF32, kHidden, kInter}});
  }
  const std::vector<float> x = Random(tokens * kHidden, &rng);
  std::vector<int32_t> gather(entries), slot(entries);
  for (int64_t i = 0; i < entries; ++i) gather[i] = static_cast<int32_t>(rng() % tokens);
  std::iota(slot.begin(), slot.end(), 0);
  std::shuffle(slot.begin(), slot.end(), rng);

  ModelDims dims;
  dims.hidden = dims.q_width = dims.k_width = dims.v_width = kHidden;
  dims.experts = dims.top_k = dims.vocab = 1;
  dims.max_intermediate = kInter;
  Workspace ws(be.get(), dims);
  ASSERT_TRUE(ws.Prepare(WorkspaceDims{entries, 1, 1}).ok());

  std::vector<float> grouped(entries * kHidden, -1.0f), per_expert(entries * kHidden, -2.0f);
  const uint64_t before = be->memory_stats().device_bytes_in_use;
  ASSERT_TRUE(RunGroupedExperts(be.get(), &ws, x.data(), gather.data(), slot.data(), grouped.data(),
                                experts, rows)
                  .ok());
  EXPECT_EQ(ws.grouped_rows(), kGroupedBatchRows);
  // The batch's buffers: gate and up, and only when copying the gathered
  // input rows and the output rows.
  const uint64_t row_bytes = kInter * 4 * 2 + (GetParam() ? 0 : kHidden * 4 * 2);
  EXPECT_EQ(be->memory_stats().device_bytes_in_use - before, kGroupedBatchRows * row_bytes);
  int64_t off = 0;
  for (size_t e = 0; e < rows.size(); ++e) {
    const int64_t n = rows[e];
    float* in = ws.f(Buf::kExpertIn);
    float* out = ws.f(Buf::kExpertOut);
    be->GatherRows(GatherRowsParams{x.data(), kHidden, gather.data() + off, in, n, kHidden});
    RunMlp(be.get(), &ws, experts[e], in, n, out, false);
    be->ScatterRows(ScatterRowsParams{out, slot.data() + off, per_expert.data(), n, kHidden});
    off += n;
  }
  ASSERT_EQ(0, std::memcmp(grouped.data(), per_expert.data(), grouped.size() * sizeof(float)));
}

INSTANTIATE_TEST_SUITE_P(RowMaps, GroupedExpertsTest, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "InPlace" : "Copies"; });

}  // namespace
}  // namespace expertd::engine
