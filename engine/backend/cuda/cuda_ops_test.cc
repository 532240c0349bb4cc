// Every non-GEMM, non-attention CUDA kernel against its CPU twin
// (engine/backend/cpu) on random inputs with odd sizes and strides. Ops with
// no transcendental function must be BITWISE equal to the CPU (they use the
// same unfused arithmetic); the others within 1e-5 relative (fp32 paths).
// Outputs start poisoned with NaN, so an unwritten element fails.
// Skips on machines without a GPU.
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "engine/backend/cpu/kernels.h"
#include "engine/backend/cpu/reference_ops.h"
#include "engine/backend/cuda/cuda_test_util.h"
#include "engine/greedy.h"
#include "gtest/gtest.h"

namespace expertd::engine {
namespace {

using cuda_test::BitwiseEqual;
using cuda_test::DeviceArray;
using cuda_test::DeviceWeight;
using cuda_test::ExpectNoDeviceError;
using cuda_test::RelError;
using cuda_test::SharedBackend;
using reference::RandomVector;
using reference::RandomWeight;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr DType kDtypes[] = {DType::kF32, DType::kBF16, DType::kF16};

TEST(CudaOpsTest, EmbeddingBitwiseForEveryDtype) {
  EXPERTD_REQUIRE_GPU();
  std::mt19937 rng(1);
  for (DType dtype : kDtypes) {
    const int64_t vocab = 50, dim = 37, rows = 7;
    reference::TestWeight table = RandomWeight(dtype, vocab, dim, &rng);
    std::vector<int32_t> ids = {0, 49, 3, 3, 17, 48, 1};
    std::vector<float> want(rows * dim, kNaN);
    cpu::Embedding(EmbeddingParams{ids.data(), rows, table.ref(), want.data()}, nullptr);
    DeviceWeight d_table(table);
    DeviceArray<int32_t> d_ids(ids);
    DeviceArray<float> d_out(rows * dim, kNaN);
    SharedBackend()->Embedding(EmbeddingParams{d_ids.get(), rows, d_table.ref(), d_out.get()});
    EXPECT_TRUE(BitwiseEqual(d_out.ToHost(), want)) << models::DTypeName(dtype);
  }
  ExpectNoDeviceError();
}

TEST(CudaOpsTest, RmsNormMatchesCpuForEveryDtypeWidthStrideAndInPlace) {
  EXPERTD_REQUIRE_GPU();
  std::mt19937 rng(2);
  for (DType dtype : kDtypes) {
    for (int64_t dim :
         {1, 37, 128, 300, 2048}) {  // warp-per-row (<= 256) and block-per-row kernels
      for (bool in_place : {false, true}) {
        const int64_t rows = 11, stride = dim + 3;
        reference::TestWeight w = RandomWeight(dtype, 1, dim, &rng);
        std::vector<float> x = RandomVector(rows * stride, &rng, 3.0f);
        std::vector<float> want = in_place ? x : std::vector<float>(rows * stride, kNaN);
        cpu::RmsNorm(
            RmsNormParams{x.data(), stride, want.data(), stride, rows, dim, w.ref(), 1e-5f},
            nullptr);
        DeviceWeight d_w(w);
        DeviceArray<float> d_x(x);
        DeviceArray<float> d_out(rows * stride, kNaN);
        float* out = in_place ? d_x.get() : d_out.get();
        SharedBackend()->RmsNorm(
            RmsNormParams{d_x.get(), stride, out, stride, rows, dim, d_w.ref(), 1e-5f});
        std::vector<float> got = in_place ? d_x.ToHost() : d_out.ToHost();
        if (!in_place) {  // compare the written columns only; the gaps stay NaN on both sides
          for (int64_t r = 0; r < rows; ++r) {
            for (int64_t i = dim; i < stride; ++i) EXPECT_TRUE(std::isnan(got[r * stride + i]));
          }
          for (int64_t r = 0; r < rows; ++r) {
            for (int64_t i = dim; i < stride; ++i) got[r * stride + i] = want[r * stride + i] = 0;
          }
        }
        EXPECT_LT(RelError(got, want), 1e-5) << models::DTypeName(dtype) << " dim " << dim;
      }
    }
  }
  ExpectNoDeviceError();
}

TEST(CudaOpsTest, RopeMatchesCpuWithPartialRotaryAndAttentionFactor) {
  EXPERTD_REQUIRE_GPU();
  std::mt19937 rng(3);
  for (int64_t rotary : {2, 6, 10, 128}) {
    const int64_t rows = 9, heads = 3, head_dim = std::max<int64_t>(10, rotary),
                  stride = heads * head_dim + 5;
    std::vector<float> x = RandomVector(rows * stride, &rng);
    std::vector<float> inv_freq(rotary / 2);
    for (int64_t i = 0; i < rotary / 2; ++i) inv_freq[i] = std::pow(10000.0f, -2.0f * i / rotary);
    std::vector<int32_t> pos = {0, 1, 2, 17, 130, 1000, 4095, 5000, 77};
    for (bool interleaved : {false, true}) {
      auto params = [&](float* px, const int32_t* ppos, const float* pf) {
        return RopeParams{px, stride, rows, heads, head_dim, rotary, ppos, pf, 1.3f, interleaved};
      };
      std::vector<float> want = x;
      cpu::Rope(params(want.data(), pos.data(), inv_freq.data()), nullptr);
      DeviceArray<float> d_x(x);
      DeviceArray<int32_t> d_pos(pos);
      DeviceArray<float> d_f(inv_freq);
      SharedBackend()->Rope(params(d_x.get(), d_pos.get(), d_f.get()));
      EXPECT_LT(RelError(d_x.ToHost(), want), 1e-5)
          << "rotary " << rotary << " interleaved " << interleaved;
    }
  }
  ExpectNoDeviceError();
}

TEST(CudaOpsTest, SoftmaxTopKMatchesCpuIdsAndWeights) {
  EXPERTD_REQUIRE_GPU();
  std::mt19937 rng(4);
  for (int64_t experts : {2, 8, 37, 60, 64, 128, 512}) {
    for (int64_t k : {1, 2, 4, 8}) {
      if (k > experts) continue;
      for (bool renorm : {false, true}) {
        const int64_t rows = 33;
        std::vector<float> logits = RandomVector(rows * experts, &rng, 2.0f);
        std::vector<int32_t> want_ids(rows * k, -1);
        std::vector<float> want_w(rows * k, kNaN);
        cpu::SoftmaxTopK(SoftmaxTopKParams{logits.data(), rows, experts, k, renorm, want_ids.data(),
                                           want_w.data()},
                         nullptr);
        DeviceArray<float> d_logits(logits);
        DeviceArray<int32_t> d_ids(rows * k, -1);
        DeviceArray<float> d_w(rows * k, kNaN);
        SharedBackend()->SoftmaxTopK(
            SoftmaxTopKParams{d_logits.get(), rows, experts, k, renorm, d_ids.get(), d_w.get()});
        EXPECT_EQ(d_ids.ToHost(), want_ids) << experts << " experts top-" << k;
        EXPECT_LT(RelError(d_w.ToHost(), want_w), 1e-5) << experts << " experts top-" << k;
      }
    }
  }
  ExpectNoDeviceError();
}

TEST(CudaOpsTest, SoftmaxTopKBreaksTiesTowardTheLowerExpertId) {
  EXPERTD_REQUIRE_GPU();
  const int64_t rows = 3, experts = 70, k = 6;
  std::vector<float> logits(rows * experts, 0.5f);  // row 0: all tied
  for (int64_t e = 0; e < experts; ++e)
    logits[experts + e] = (e % 5 == 3) ? 2.0f : 0.0f;  // row 1: 14-way tie
  for (int64_t e = 0; e < experts; ++e)
    logits[2 * experts + e] = (e >= 40) ? 1.0f : -1.0f;  // row 2
  std::vector<int32_t> want(rows * k);
  std::vector<float> want_w(rows * k);
  cpu::SoftmaxTopK(
      SoftmaxTopKParams{logits.data(), rows, experts, k, true, want.data(), want_w.data()},
      nullptr);
  ASSERT_EQ(std::vector<int32_t>(want.begin(), want.begin() + k),
            (std::vector<int32_t>{0, 1, 2, 3, 4, 5}));
  DeviceArray<float> d_logits(logits);
  DeviceArray<int32_t> d_ids(rows * k, -1);
  DeviceArray<float> d_w(rows * k, kNaN);
  SharedBackend()->SoftmaxTopK(
      SoftmaxTopKParams{d_logits.get(), rows, experts, k, true, d_ids.get(), d_w.get()});
  EXPECT_EQ(d_ids.ToHost(), want);
  EXPECT_LT(RelError(d_w.ToHost(), want_w), 1e-6);
  ExpectNoDeviceError();
}

TEST(CudaOpsTest, SwiGluMatchesCpuWithStridesAndInPlace) {
  EXPERTD_REQUIRE_GPU();
  std::mt19937 rng(5);
  const int64_t rows = 5, dim = 333, gs = 340, us = 350;
  std::vector<float> gate = RandomVector(rows * gs, &rng, 4.0f), up = RandomVector(rows * us, &rng);
  std::vector<float> want = gate;
  cpu::SwiGlu(SwiGluParams{want.data(), gs, up.data(), us, want.data(), gs, rows, dim}, nullptr);
  DeviceArray<float> d_gate(gate), d_up(up);
  SharedBackend()->SwiGlu(
      SwiGluParams{d_gate.get(), gs, d_up.get(), us, d_gate.get(), gs, rows, dim});
  EXPECT_LT(RelError(d_gate.ToHost(), want), 1e-6);
  ExpectNoDeviceError();
}

// gpt-oss' clamped SwiGLU (limit 7, alpha 1.702): gates and ups wide enough
// that the clamps bite on both sides.
TEST(CudaOpsTest, ClampedSwiGluMatchesCpu) {
  EXPERTD_REQUIRE_GPU();
  std::mt19937 rng(15);
  const int64_t rows = 6, dim = 257, gs = 260, us = 270;
  std::vector<float> gate = RandomVector(rows * gs, &rng, 12.0f);
  std::vector<float> up = RandomVector(rows * us, &rng, 12.0f);
  std::vector<float> want(rows * dim);
  SwiGluParams p{gate.data(), gs, up.data(), us, want.data(), dim, rows, dim};
  p.limit = 7.0f;
  p.alpha = 1.702f;
  cpu::SwiGlu(p, nullptr);
  DeviceArray<float> d_gate(gate), d_up(up), d_out(rows * dim, 0.0f);
  p.gate = d_gate.get();
  p.up = d_up.get();
  p.out = d_out.get();
  SharedBackend()->SwiGlu(p);
  EXPECT_LT(RelError(d_out.ToHost(), want), 1e-6);
  ExpectNoDeviceError();
}

TEST(CudaOpsTest, AddRowsPlainAndScaledMatchCpu) {
  EXPERTD_REQUIRE_GPU();
  std::mt19937 rng(6);
  const int64_t rows = 7, dim = 301, ys = 305, xs = 310;
  std::vector<float> y = RandomVector(rows * ys, &rng), x = RandomVector(rows * xs, &rng);
  std::vector<float> scale = RandomVector(rows * 2, &rng, 3.0f);
  struct Case {
    bool scaled;
    RowScale fn;
    bool bitwise;
  };
  for (Case c : {Case{false, RowScale::kIdentity, true}, Case{true, RowScale::kIdentity, true},
                 Case{true, RowScale::kSigmoid, false}}) {
    std::vector<float> want = y;
    cpu::AddRows(AddRowsParams{want.data(), ys, x.data(), xs, c.scaled ? scale.data() : nullptr, 2,
                               c.fn, rows, dim},
                 nullptr);
    DeviceArray<float> d_y(y), d_x(x), d_s(scale);
    SharedBackend()->AddRows(AddRowsParams{d_y.get(), ys, d_x.get(), xs,
                                           c.scaled ? d_s.get() : nullptr, 2, c.fn, rows, dim});
    if (c.bitwise) {
      EXPECT_TRUE(BitwiseEqual(d_y.ToHost(), want));
    } else {
      EXPECT_LT(RelError(d_y.ToHost(), want), 1e-6);
    }
  }
  ExpectNoDeviceError();
}

TEST(CudaOpsTest, ClampBitwise) {
  EXPERTD_REQUIRE_GPU();
  std::mt19937 rng(7);
  const int64_t rows = 6, dim = 77, stride = 80;
  std::vector<float> x = RandomVector(rows * stride, &rng, 5.0f);
  std::vector<float> want = x;
  cpu::Clamp(ClampParams{want.data(), stride, rows, dim, 1.5f}, nullptr);
  DeviceArray<float> d_x(x);
  SharedBackend()->Clamp(ClampParams{d_x.get(), stride, rows, dim, 1.5f});
  EXPECT_TRUE(BitwiseEqual(d_x.ToHost(), want));
  ExpectNoDeviceError();
}

TEST(CudaOpsTest, KvAppendBitwiseAndTouchesOnlyItsSlots) {
  EXPERTD_REQUIRE_GPU();
  std::mt19937 rng(8);
  const int64_t rows = 5, kv_heads = 3, head_dim = 9, w = kv_heads * head_dim, slots = 40,
                ks = w + 2, vs = w + 7;
  std::vector<float> k = RandomVector(rows * ks, &rng), v = RandomVector(rows * vs, &rng);
  std::vector<int64_t> slot = {39, 0, 17, 18, 5};
  std::vector<float> want_k(slots * w, kNaN), want_v(slots * w, kNaN);
  cpu::KvAppend(KvAppendParams{k.data(), ks, v.data(), vs, rows, kv_heads, head_dim, slot.data(),
                               want_k.data(), want_v.data()},
                nullptr);
  DeviceArray<float> d_k(k), d_v(v), d_kc(slots * w, kNaN), d_vc(slots * w, kNaN);
  DeviceArray<int64_t> d_slot(slot);
  SharedBackend()->KvAppend(KvAppendParams{d_k.get(), ks, d_v.get(), vs, rows, kv_heads, head_dim,
                                           d_slot.get(), d_kc.get(), d_vc.get()});
  EXPECT_TRUE(BitwiseEqual(d_kc.ToHost(), want_k));
  EXPECT_TRUE(BitwiseEqual(d_vc.ToHost(), want_v));
  ExpectNoDeviceError();
}

TEST(CudaOpsTest, GatherAndScatterRowsBitwise) {
  EXPERTD_REQUIRE_GPU();
  std::mt19937 rng(9);
  const int64_t src_rows = 12, dim = 35, src_stride = 40, rows = 6;
  std::vector<float> src = RandomVector(src_rows * src_stride, &rng);
  std::vector<int32_t> index = {11, 0, 5, 5, 2, 9};
  std::vector<float> want(rows * dim, kNaN);
  cpu::GatherRows(GatherRowsParams{src.data(), src_stride, index.data(), want.data(), rows, dim},
                  nullptr);
  DeviceArray<float> d_src(src), d_dst(rows * dim, kNaN);
  DeviceArray<int32_t> d_index(index);
  SharedBackend()->GatherRows(
      GatherRowsParams{d_src.get(), src_stride, d_index.get(), d_dst.get(), rows, dim});
  EXPECT_TRUE(BitwiseEqual(d_dst.ToHost(), want));

  std::vector<int32_t> to = {3, 10, 0, 7, 1, 12};  // distinct destinations
  std::vector<float> want_s(13 * dim, kNaN);
  cpu::ScatterRows(ScatterRowsParams{want.data(), to.data(), want_s.data(), rows, dim}, nullptr);
  DeviceArray<float> d_s(13 * dim, kNaN);
  DeviceArray<int32_t> d_to(to);
  SharedBackend()->ScatterRows(ScatterRowsParams{d_dst.get(), d_to.get(), d_s.get(), rows, dim});
  EXPECT_TRUE(BitwiseEqual(d_s.ToHost(), want_s));
  ExpectNoDeviceError();
}

TEST(CudaOpsTest, MoeCombineBitwiseInAscendingExpertOrder) {
  EXPERTD_REQUIRE_GPU();
  std::mt19937 rng(10);
  for (int64_t k : {1, 2, 8, 64}) {
    for (bool accumulate : {false, true}) {
      const int64_t rows = 9, dim = 130, out_stride = 131, experts = 100;
      std::vector<float> slots = RandomVector(rows * k * dim, &rng),
                         weights = RandomVector(rows * k, &rng);
      std::vector<int32_t> ids(rows * k);
      for (int64_t t = 0; t < rows; ++t) {  // distinct ids per token, shuffled
        std::vector<int32_t> e(experts);
        std::iota(e.begin(), e.end(), 0);
        std::shuffle(e.begin(), e.end(), rng);
        std::copy(e.begin(), e.begin() + k, ids.begin() + t * k);
      }
      std::vector<float> out = RandomVector(rows * out_stride, &rng);
      std::vector<float> want = out;
      cpu::MoeCombine(MoeCombineParams{slots.data(), weights.data(), ids.data(), want.data(),
                                       out_stride, rows, k, dim, accumulate},
                      nullptr);
      DeviceArray<float> d_slots(slots), d_w(weights), d_out(out);
      DeviceArray<int32_t> d_ids(ids);
      SharedBackend()->MoeCombine(MoeCombineParams{d_slots.get(), d_w.get(), d_ids.get(),
                                                   d_out.get(), out_stride, rows, k, dim,
                                                   accumulate});
      EXPECT_TRUE(BitwiseEqual(d_out.ToHost(), want))
          << "top-" << k << " accumulate " << accumulate;
    }
  }
  ExpectNoDeviceError();
}

TEST(CudaOpsTest, MoeScatterAddBitwiseEqualsCpuTwin) {
  EXPERTD_REQUIRE_GPU();
  std::mt19937 rng(12);
  const int64_t tokens = 9, experts = 6;
  for (int64_t k : {1, 2, 4}) {
    for (int64_t dim : {1, 130, 300}) {
      std::vector<int32_t> ids(tokens * k);
      for (int64_t t = 0; t < tokens; ++t) {  // distinct ids per token, shuffled
        std::vector<int32_t> e(experts);
        std::iota(e.begin(), e.end(), 0);
        std::shuffle(e.begin(), e.end(), rng);
        std::copy(e.begin(), e.begin() + k, ids.begin() + t * k);
      }
      const std::vector<float> weights = RandomVector(tokens * k, &rng);
      std::vector<float> want = RandomVector(tokens * dim, &rng);
      DeviceArray<float> d_w(weights), d_out(want);
      for (int32_t e = 0; e < experts; ++e) {  // one call per expert, ascending
        std::vector<int32_t> slot;
        for (int64_t s = 0; s < tokens * k; ++s)
          if (ids[s] == e) slot.push_back(static_cast<int32_t>(s));
        if (slot.empty()) continue;
        const int64_t rows = static_cast<int64_t>(slot.size());
        const std::vector<float> src = RandomVector(rows * dim, &rng, 3.0f);
        cpu::MoeScatterAdd(
            MoeScatterAddParams{src.data(), slot.data(), weights.data(), want.data(), rows, k, dim},
            nullptr);
        DeviceArray<float> d_src(src);
        DeviceArray<int32_t> d_slot(slot);
        SharedBackend()->MoeScatterAdd(
            MoeScatterAddParams{d_src.get(), d_slot.get(), d_w.get(), d_out.get(), rows, k, dim});
      }
      EXPECT_TRUE(BitwiseEqual(d_out.ToHost(), want)) << "top-" << k << " dim " << dim;
    }
  }
  ExpectNoDeviceError();
}

TEST(CudaOpsTest, ArgmaxRowsMatchesGreedyArgmaxIncludingTiesAndNaN) {
  EXPERTD_REQUIRE_GPU();
  std::mt19937 rng(11);
  const int64_t cols = 50304;
  std::vector<std::vector<float>> rows_data;
  rows_data.push_back(RandomVector(cols, &rng));
  std::vector<float> tied(cols, 1.0f);
  tied[777] = tied[40000] = 3.0f;  // first of two maxima
  rows_data.push_back(tied);
  std::vector<float> nan_first = RandomVector(cols, &rng);
  nan_first[0] = kNaN;  // the CPU scan never leaves index 0
  rows_data.push_back(nan_first);
  std::vector<float> nan_inside = RandomVector(cols, &rng);
  nan_inside[12345] = kNaN;
  rows_data.push_back(nan_inside);
  rows_data.push_back(std::vector<float>(cols, -std::numeric_limits<float>::infinity()));
  std::vector<float> all;
  std::vector<int32_t> want;
  for (const auto& r : rows_data) {
    all.insert(all.end(), r.begin(), r.end());
    want.push_back(Argmax(r));
  }
  const int64_t rows = static_cast<int64_t>(rows_data.size());
  DeviceArray<float> d_x(all);
  DeviceArray<int32_t> d_out(rows, -1);
  SharedBackend()->ArgmaxRows(d_x.get(), rows, cols, d_out.get());
  EXPECT_EQ(d_out.ToHost(), want);
  ExpectNoDeviceError();
}

}  // namespace
}  // namespace expertd::engine
