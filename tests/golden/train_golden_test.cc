// The training engine against PyTorch + transformers (train_golden.json):
// gradients at the initial weights, and 10 AdamW steps with clipping, on
// every trainable fixture. Tolerances are the oracle's (fixtures README).
#include <algorithm>
#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "engine/train/trainer.h"
#include "gtest/gtest.h"
#include "tests/golden/golden_data.h"
#include "tests/golden/train_golden_data.h"

namespace expertd::golden {
namespace {

constexpr double kGradRelTol = 1e-4;      // per tensor: max |diff| / max |ref|
constexpr double kLossAbsTol = 1e-5;      // every step's losses and the final loss
constexpr double kGradNormRelTol = 1e-5;  // global norm before clipping

train::TrainBatch BatchOf(const TrainGolden& g) {
  train::TrainBatch b;
  b.batch = g.input_ids.size();
  b.seq_len = g.input_ids[0].size();
  for (const auto& seq : g.input_ids) b.input_ids.insert(b.input_ids.end(), seq.begin(), seq.end());
  return b;
}

train::TrainOptions OptionsOf(const TrainGolden& g, int threads) {
  train::TrainOptions o;
  o.lr = g.lr;
  o.adamw.weight_decay = g.weight_decay;
  o.clip_norm = g.max_norm;
  o.threads = threads;
  return o;
}

double MaxRelError(const std::vector<float>& ours, const std::vector<float>& ref) {
  double max_diff = 0, max_ref = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    max_diff = std::max(max_diff, std::fabs(static_cast<double>(ours[i]) - ref[i]));
    max_ref = std::max(max_ref, std::fabs(static_cast<double>(ref[i])));
  }
  return max_ref == 0 ? max_diff : max_diff / max_ref;
}

// Every golden gradient matches ours; parameters with no golden gradient have none.
void ExpectGradsMatch(const TrainGolden& g, const train::TrainModel& model) {
  std::set<std::string> ours;
  for (const train::Parameter& p : model.params()) {
    if (!p.has_grad) continue;
    ours.insert(p.name);
    auto it = g.grads.find(p.name);
    if (it == g.grads.end()) {
      ADD_FAILURE() << p.name << " has a gradient; the reference has none";
      continue;
    }
    ASSERT_EQ(p.shape, it->second.shape) << p.name;
    EXPECT_LT(MaxRelError(p.grad, it->second.values), kGradRelTol) << p.name;
  }
  for (const auto& [name, grad] : g.grads)
    EXPECT_TRUE(ours.count(name)) << name << " has no gradient";
}

class TrainGoldenTest : public ::testing::TestWithParam<std::string> {};

TEST_P(TrainGoldenTest, GradientsAndTenAdamWSteps) {
  auto golden = LoadTrainGolden(GetParam());
  ASSERT_TRUE(golden.ok()) << golden.status();
  auto model = train::TrainModel::Load(FixtureDir(GetParam()));
  ASSERT_TRUE(model.ok()) << model.status();
  train::Trainer trainer(model->get(), OptionsOf(*golden, 2));
  const train::TrainBatch batch = BatchOf(*golden);
  for (size_t s = 0; s < golden->steps.size(); ++s) {
    auto check_grads = [&](const train::TrainModel& m) {
      if (s == 0) ExpectGradsMatch(*golden, m);
    };
    auto report = trainer.Step({batch}, check_grads);
    ASSERT_TRUE(report.ok()) << report.status();
    const GoldenStep& ref = golden->steps[s];
    EXPECT_NEAR(report->loss.total, ref.loss.total, kLossAbsTol) << "step " << s;
    EXPECT_NEAR(report->loss.ce, ref.loss.ce, kLossAbsTol) << "step " << s;
    EXPECT_NEAR(report->loss.aux, ref.loss.aux, kLossAbsTol) << "step " << s;
    EXPECT_LT(std::fabs(report->grad_norm_before_clip - ref.grad_norm_before_clip) /
                  ref.grad_norm_before_clip,
              kGradNormRelTol)
        << "step " << s;
    if (s == 0) {
      EXPECT_NEAR(report->loss.total, golden->loss.total, kLossAbsTol);
      EXPECT_LT(std::fabs(report->grad_norm_before_clip - golden->global_l2_norm) /
                    golden->global_l2_norm,
                kGradNormRelTol);
    }
  }
  auto final_loss = trainer.Evaluate(batch);
  ASSERT_TRUE(final_loss.ok()) << final_loss.status();
  EXPECT_NEAR(final_loss->total, golden->loss_after_final_step.total, kLossAbsTol);
  EXPECT_NEAR(final_loss->ce, golden->loss_after_final_step.ce, kLossAbsTol);
}

// EXPERTS scope: routers, routed and shared experts get exactly the FULL
// gradients; nothing else gets one.
TEST_P(TrainGoldenTest, ExpertsScopeGradients) {
  auto golden = LoadTrainGolden(GetParam());
  ASSERT_TRUE(golden.ok()) << golden.status();
  auto model = train::TrainModel::Load(FixtureDir(GetParam()));
  ASSERT_TRUE(model.ok()) << model.status();
  train::TrainOptions options = OptionsOf(*golden, 1);
  options.scope = train::TrainScope::kExperts;
  train::Trainer trainer(model->get(), options);
  int with_grad = 0;
  auto check = [&](const train::TrainModel& m) {
    for (const train::Parameter& p : m.params()) {
      const bool expert_part = p.name.find(".mlp.") != std::string::npos ||
                               p.name.find(".block_sparse_moe.") != std::string::npos;
      const bool dense_mlp = p.name.find(".mlp.gate_proj") != std::string::npos ||
                             p.name.find(".mlp.up_proj") != std::string::npos ||
                             p.name.find(".mlp.down_proj") != std::string::npos;
      const bool never_grad =
          std::find(golden->params_without_grad.begin(), golden->params_without_grad.end(),
                    p.name) != golden->params_without_grad.end();
      EXPECT_EQ(p.has_grad, expert_part && !dense_mlp && !never_grad) << p.name;
      if (!p.has_grad) continue;
      ++with_grad;
      EXPECT_LT(MaxRelError(p.grad, golden->grads.at(p.name).values), kGradRelTol) << p.name;
    }
  };
  ASSERT_TRUE(trainer.Step({BatchOf(*golden)}, check).ok());
  EXPECT_GT(with_grad, 0);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, TrainGoldenTest, ::testing::ValuesIn(TrainFixtures()));

// Same data, same options -> bitwise the same weights; the thread count does
// not change the arithmetic either (every output element has one owner).
TEST(TrainDeterminismTest, BitwiseSameWeights) {
  auto golden = LoadTrainGolden("qwen2_moe_mixed");
  ASSERT_TRUE(golden.ok()) << golden.status();
  std::vector<std::vector<float>> runs[3];
  const int threads[3] = {2, 2, 1};
  for (int r = 0; r < 3; ++r) {
    auto model = train::TrainModel::Load(FixtureDir("qwen2_moe_mixed"));
    ASSERT_TRUE(model.ok()) << model.status();
    train::Trainer trainer(model->get(), OptionsOf(*golden, threads[r]));
    for (int s = 0; s < 3; ++s) ASSERT_TRUE(trainer.Step({BatchOf(*golden)}).ok());
    for (const train::Parameter& p : (*model)->params()) runs[r].push_back(p.value);
  }
  EXPECT_TRUE(runs[0] == runs[1]) << "same thread count, different weights";
  EXPECT_TRUE(runs[0] == runs[2]) << "thread count changed the weights";
  // And training moved them.
  auto fresh = train::TrainModel::Load(FixtureDir("qwen2_moe_mixed"));
  ASSERT_TRUE(fresh.ok());
  EXPECT_NE((*fresh)->params()[0].value, runs[0][0]);
}

// Accumulating the same batch twice gives the single-batch gradient (the loss
// is the mean over micro-batches).
TEST(TrainAccumulationTest, TwoMicroBatchesAverage) {
  auto golden = LoadTrainGolden("mixtral");
  ASSERT_TRUE(golden.ok()) << golden.status();
  auto model = train::TrainModel::Load(FixtureDir("mixtral"));
  ASSERT_TRUE(model.ok()) << model.status();
  train::Trainer trainer(model->get(), OptionsOf(*golden, 1));
  const train::TrainBatch batch = BatchOf(*golden);
  auto report = trainer.Step({batch, batch},
                             [&](const train::TrainModel& m) { ExpectGradsMatch(*golden, m); });
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_NEAR(report->loss.total, golden->loss.total, kLossAbsTol);
}

// nn.Embedding(padding_idx): the padding row gets no gradient from the input
// side (OLMoE's pad_token_id is 1).
TEST(TrainPaddingTest, PaddingRowGetsNoGradient) {
  auto model = train::TrainModel::Load(FixtureDir("olmoe"));
  ASSERT_TRUE(model.ok()) << model.status();
  const int32_t pad = (*model)->padding_idx();
  ASSERT_EQ(pad, 1);
  train::TrainBatch batch{1, 6, {5, pad, 9, pad, 7, 3}, {}};
  ASSERT_TRUE((*model)->Step(batch, true, 1.0f, nullptr).ok());
  const train::Parameter* embed = (*model)->Find("model.embed_tokens.weight");
  ASSERT_TRUE(embed->has_grad);
  const int64_t h = embed->shape[1];
  double pad_row = 0, other_row = 0;
  for (int64_t k = 0; k < h; ++k) {
    pad_row += std::fabs(embed->grad[pad * h + k]);
    other_row += std::fabs(embed->grad[9 * h + k]);
  }
  EXPECT_EQ(pad_row, 0.0);
  EXPECT_GT(other_row, 0.0);
}

TEST(TrainModelTest, RejectsBadBatches) {
  auto model = train::TrainModel::Load(FixtureDir("mixtral"));
  ASSERT_TRUE(model.ok()) << model.status();
  train::TrainBatch out_of_range{1, 3, {1, 2, 512}, {}};
  auto st = (*model)->Step(out_of_range, true, 1.0f, nullptr);
  EXPECT_EQ(st.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.status().message().find("512"), std::string::npos) << st.status();
  train::TrainBatch all_ignored{1, 3, {1, 2, 3}, {-100, -100, -100}};
  EXPECT_EQ((*model)->Step(all_ignored, true, 1.0f, nullptr).status().code(),
            absl::StatusCode::kInvalidArgument);
  train::TrainBatch too_short{1, 1, {1}, {}};
  EXPECT_FALSE((*model)->Step(too_short, true, 1.0f, nullptr).ok());
}

// The score correction bias only selects experts: no gradient, and AdamW
// leaves it untouched.
TEST(TrainModelTest, DeepseekScoreBiasGetsNoGradient) {
  auto golden = LoadTrainGolden("deepseek_v3");
  ASSERT_TRUE(golden.ok()) << golden.status();
  auto model = train::TrainModel::Load(FixtureDir("deepseek_v3"));
  ASSERT_TRUE(model.ok()) << model.status();
  const std::string bias = "model.layers.1.mlp.gate.e_score_correction_bias";
  ASSERT_NE((*model)->Find(bias), nullptr);
  const std::vector<float> before = (*model)->Find(bias)->value;
  train::Trainer trainer(model->get(), OptionsOf(*golden, 1));
  auto check = [&](const train::TrainModel& m) {
    for (const train::Parameter& p : m.params()) {
      if (p.name.find("e_score_correction_bias") != std::string::npos) {
        EXPECT_FALSE(p.has_grad) << p.name;
      }
    }
  };
  ASSERT_TRUE(trainer.Step({BatchOf(*golden)}, check).ok());
  EXPECT_EQ((*model)->Find(bias)->value, before);
}

}  // namespace
}  // namespace expertd::golden
