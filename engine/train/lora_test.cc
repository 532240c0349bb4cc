// LoRA: adapter gradients against finite differences, the PEFT layout on
// disk, and the merged model's logits against the unmerged forward.
#include "engine/train/lora.h"

#include <cmath>
#include <fstream>
#include <random>
#include <sstream>

#include "engine/train/linear.h"
#include "engine/train/trainer.h"
#include "gtest/gtest.h"
#include "models/safetensors/safetensors_reader.h"
#include "nlohmann/json.hpp"

namespace expertd::train {
namespace {

const char kMixtral[] = "tests/data/fixtures/mixtral";
const char kQwenMixed[] = "tests/data/fixtures/qwen2_moe_mixed";

std::string TmpDir() { return getenv("TEST_TMPDIR") != nullptr ? getenv("TEST_TMPDIR") : "/tmp"; }

TrainBatch SomeBatch() {
  TrainBatch b{2, 9, {}, {}};
  std::mt19937 rng(5);
  for (int i = 0; i < 18; ++i) b.input_ids.push_back(static_cast<int32_t>(rng() % 512));
  return b;
}

// Makes B non-zero so every adapter gradient (A's too) is non-trivial.
void RandomizeB(TrainModel* model, float scale) {
  std::mt19937 rng(11);
  std::normal_distribution<float> dist(0.0f, scale);
  for (Parameter& p : model->params()) {
    if (p.name.find(".lora_B.") != std::string::npos) {
      for (float& v : p.value) v = dist(rng);
    }
  }
}

std::unique_ptr<TrainModel> LoadWithLora(const char* dir, float b_scale) {
  auto model = TrainModel::Load(dir);
  EXPECT_TRUE(model.ok()) << model.status();
  LoraOptions options;
  options.rank = 4;
  options.alpha = 8;
  EXPECT_TRUE(AttachLora(options, model->get()).ok());
  if (b_scale > 0) RandomizeB(model->get(), b_scale);
  return std::move(*model);
}

TEST(LoraTest, LinearAdapterFiniteDifferences) {
  std::mt19937 rng(3);
  std::normal_distribution<float> dist;
  Parameter w, a, b;
  w.shape = {5, 6};
  a.shape = {2, 6};
  b.shape = {5, 2};
  for (Parameter* p : {&w, &a, &b}) {
    p->value.resize(p->shape[0] * p->shape[1]);
    for (float& v : p->value) v = dist(rng);
  }
  w.lora_a = &a;
  w.lora_b = &b;
  w.lora_scaling = 1.5f;
  const int64_t n = 3;
  std::vector<float> x(n * 6), r(n * 5), y(n * 5), dx(n * 6, 0.0f);
  for (float& v : x) v = dist(rng);
  for (float& v : r) v = dist(rng);
  auto loss = [&] {
    ParamLinearForward(w, nullptr, x.data(), y.data(), n, nullptr);
    double s = 0;
    for (size_t i = 0; i < y.size(); ++i) s += static_cast<double>(y[i]) * r[i];
    return s;
  };
  ParamLinearBackward(&w, nullptr, x.data(), r.data(), dx.data(), n, nullptr);
  for (auto [values, grad] : {std::pair{&a.value, &a.grad}, {&b.value, &b.grad}, {&x, &dx}}) {
    double max_diff = 0, max_ref = 0;
    for (size_t i = 0; i < values->size(); ++i) {
      const float saved = (*values)[i];
      (*values)[i] = saved + 1e-2f;
      const double plus = loss();
      (*values)[i] = saved - 1e-2f;
      const double minus = loss();
      (*values)[i] = saved;
      max_diff = std::max(max_diff, std::fabs((plus - minus) / 2e-2 - (*grad)[i]));
      max_ref = std::max(max_ref, std::fabs(static_cast<double>((*grad)[i])));
    }
    EXPECT_GT(max_ref, 0);
    EXPECT_LT(max_diff / max_ref, 1e-2);
  }
}

// The whole model: the directional derivative of the loss along the adapter
// gradient equals the gradient's norm.
TEST(LoraTest, ModelAdapterGradientsFiniteDifferences) {
  for (const char* dir : {kMixtral, kQwenMixed}) {
    std::unique_ptr<TrainModel> model = LoadWithLora(dir, 0.05f);
    ApplyScope(TrainScope::kLora, model.get());
    const TrainBatch batch = SomeBatch();
    ASSERT_TRUE(model->Step(batch, true, 1.0f, nullptr).ok());
    double norm_sq = 0;
    int adapters = 0;
    for (const Parameter& p : model->params()) {
      const bool adapter = p.name.rfind("base_model.model.", 0) == 0;
      EXPECT_EQ(p.has_grad, adapter) << p.name;
      if (!p.has_grad) continue;
      ++adapters;
      for (float g : p.grad) norm_sq += static_cast<double>(g) * g;
    }
    ASSERT_GT(adapters, 0);
    const double norm = std::sqrt(norm_sq);
    std::vector<std::vector<float>> saved;
    for (const Parameter& p : model->params()) saved.push_back(p.value);
    auto loss_at = [&](double eps) {
      for (size_t i = 0; i < model->params().size(); ++i) {
        Parameter& p = model->params()[i];
        if (!p.has_grad) continue;
        for (size_t k = 0; k < p.value.size(); ++k) {
          p.value[k] = static_cast<float>(saved[i][k] + eps * p.grad[k] / norm);
        }
      }
      return static_cast<double>(model->Step(batch, false, 1.0f, nullptr)->total);
    };
    const double eps = 1e-2;
    const double fd = (loss_at(eps) - loss_at(-eps)) / (2 * eps);
    EXPECT_NEAR(fd, norm, 1e-2 * norm) << dir;
  }
}

TEST(LoraTest, PeftLayoutRoundTrip) {
  std::unique_ptr<TrainModel> model = LoadWithLora(kMixtral, 0.05f);
  LoraOptions options;
  options.rank = 4;
  options.alpha = 8;
  const std::string dir = TmpDir() + "/adapter";
  ASSERT_TRUE(WriteLoraAdapter(*model, options, kMixtral, dir).ok());
  std::ifstream in(dir + "/adapter_config.json");
  std::stringstream text;
  text << in.rdbuf();
  const nlohmann::json config = nlohmann::json::parse(text.str());
  EXPECT_EQ(config.at("peft_type"), "LORA");
  EXPECT_EQ(config.at("r"), 4);
  EXPECT_EQ(config.at("lora_alpha"), 8.0);
  EXPECT_EQ(config.at("task_type"), "CAUSAL_LM");
  auto file = models::SafetensorsFile::Open(dir + "/adapter_model.safetensors");
  ASSERT_TRUE(file.ok()) << file.status();
  const models::SafetensorsEntry* a =
      (*file)->Find("base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight");
  const models::SafetensorsEntry* b =
      (*file)->Find("base_model.model.model.layers.0.block_sparse_moe.experts.3.w2.lora_B.weight");
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(a->shape, (std::vector<int64_t>{4, 64}));  // (r, in)
  EXPECT_EQ(b->shape, (std::vector<int64_t>{64, 4}));  // (out, r)
  EXPECT_EQ((*file)->Find("base_model.model.model.layers.0.block_sparse_moe.gate.lora_A.weight"),
            nullptr);  // routers are not targets
  // A fresh model with the loaded adapter computes the same logits, bitwise.
  auto loaded = TrainModel::Load(kMixtral);
  ASSERT_TRUE(loaded.ok());
  ASSERT_TRUE(LoadLoraAdapter(dir, loaded->get()).ok());
  std::vector<float> want, got;
  ASSERT_TRUE(model->Step(SomeBatch(), false, 1.0f, nullptr, &want).ok());
  ASSERT_TRUE((*loaded)->Step(SomeBatch(), false, 1.0f, nullptr, &got).ok());
  EXPECT_EQ(want, got);
  // A directory that is not an adapter is refused with its name.
  auto again = TrainModel::Load(kMixtral);
  absl::Status st = LoadLoraAdapter(TmpDir() + "/nowhere", again->get());
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("nowhere"), std::string::npos) << st;
}

TEST(LoraTest, MergedLogitsEqualUnmergedForward) {
  for (const char* dir : {kMixtral, kQwenMixed}) {
    std::unique_ptr<TrainModel> model = LoadWithLora(dir, 0.05f);
    std::vector<float> unmerged, merged;
    ASSERT_TRUE(model->Step(SomeBatch(), false, 1.0f, nullptr, &unmerged).ok());
    MergeLora(model.get());
    ASSERT_TRUE(model->Step(SomeBatch(), false, 1.0f, nullptr, &merged).ok());
    double max_diff = 0, max_ref = 0;
    for (size_t i = 0; i < merged.size(); ++i) {
      max_diff = std::max(max_diff, std::fabs(static_cast<double>(merged[i]) - unmerged[i]));
      max_ref = std::max(max_ref, std::fabs(static_cast<double>(unmerged[i])));
    }
    EXPECT_LT(max_diff / max_ref, 1e-5) << dir;
    EXPECT_GT(max_diff, 0.0) << "merging changed nothing: the test would not see a bad merge";
  }
}

// LoRA training moves only the adapters; the loss goes down.
TEST(LoraTest, TrainsOnlyTheAdapters) {
  std::unique_ptr<TrainModel> model = LoadWithLora(kMixtral, 0.0f);
  std::vector<std::vector<float>> before;
  for (const Parameter& p : model->params()) before.push_back(p.value);
  TrainOptions options;
  options.scope = TrainScope::kLora;
  options.lr = 1e-2;
  Trainer trainer(model.get(), options);
  const TrainBatch batch = SomeBatch();
  auto first = trainer.Step({batch});
  ASSERT_TRUE(first.ok()) << first.status();
  for (int s = 0; s < 4; ++s) ASSERT_TRUE(trainer.Step({batch}).ok());
  auto last = trainer.Evaluate(batch);
  ASSERT_TRUE(last.ok());
  EXPECT_LT(last->total, first->loss.total - 0.1);
  for (size_t i = 0; i < before.size(); ++i) {
    const Parameter& p = model->params()[i];
    const bool adapter = p.name.rfind("base_model.model.", 0) == 0;
    if (adapter && p.name.find("lora_B") != std::string::npos) {
      EXPECT_NE(p.value, before[i]) << p.name;
    } else if (!adapter) {
      EXPECT_EQ(p.value, before[i]) << p.name;
    }
  }
}

}  // namespace
}  // namespace expertd::train
