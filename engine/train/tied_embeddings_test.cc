// Tied embeddings ("tie_word_embeddings": true, no lm_head.weight): the LM
// head is the embedding matrix, one parameter whose gradient is the sum of
// its two uses. Checked on the Mixtral fixture made tied: against PyTorch
// (testdata/mixtral_tied_golden.json, written by bench/torch_tied_golden.py),
// as the sum of an untied model's two gradients, by finite differences of the
// whole model's loss; then training steps, a checkpoint without an lm_head
// that resumes bitwise, and the serving engine on that checkpoint.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <iostream>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "base/env.h"
#include "engine/engine.h"
#include "engine/greedy.h"
#include "engine/train/train_checkpoint.h"
#include "engine/train/trainer.h"
#include "gtest/gtest.h"
#include "models/checkpoint/checkpoint.h"
#include "models/safetensors/safetensors_writer.h"
#include "nlohmann/json.hpp"

namespace expertd::train {
namespace {

const char kMixtral[] = "tests/data/fixtures/mixtral";
const char kGolden[] = "engine/train/testdata/mixtral_tied_golden.json";
const char kEmbed[] = "model.embed_tokens.weight";

std::string TmpDir() { return getenv("TEST_TMPDIR") != nullptr ? getenv("TEST_TMPDIR") : "/tmp"; }

// The Mixtral fixture with "tie_word_embeddings": true and without
// lm_head.weight (what bench/torch_tied_golden.py builds too).
std::string MakeTiedModel() {
  const std::string dir = TmpDir() + "/mixtral_tied";
  Env* env = Env::Default();
  EXPECT_TRUE(CreateDirs(env, dir).ok());
  nlohmann::json config =
      nlohmann::json::parse(*ReadFileToString(env, std::string(kMixtral) + "/config.json"));
  config["tie_word_embeddings"] = true;
  EXPECT_TRUE(WriteFileAtomically(env, dir + "/config.json", config.dump(2) + "\n").ok());
  auto source = models::Checkpoint::Open(kMixtral);
  EXPECT_TRUE(source.ok()) << source.status();
  std::vector<models::TensorToWrite> tensors;
  for (const std::string& name : (*source)->Names()) {
    if (name == "lm_head.weight") continue;
    models::TensorView v = *(*source)->Get(name);
    tensors.push_back({{name, v.dtype, v.shape}, v.data});
  }
  EXPECT_TRUE(models::WriteSafetensors(dir + "/model.safetensors", tensors).ok());
  return dir;
}

std::unique_ptr<TrainModel> LoadTied() {
  auto model = TrainModel::Load(MakeTiedModel());
  EXPECT_TRUE(model.ok()) << model.status();
  return model.ok() ? *std::move(model) : nullptr;
}

struct TiedGolden {
  TrainBatch batch;
  TrainOptions options;
  nlohmann::json json;
  std::vector<float> embed_grad;
};

TiedGolden LoadGolden() {
  TiedGolden g;
  g.json = nlohmann::json::parse(*ReadFileToString(Env::Default(), kGolden));
  const auto& ids = g.json.at("input_ids");
  g.batch.batch = static_cast<int64_t>(ids.size());
  g.batch.seq_len = static_cast<int64_t>(ids[0].size());
  for (const auto& seq : ids) {
    for (const auto& id : seq) g.batch.input_ids.push_back(id.get<int32_t>());
  }
  g.options.lr = g.json.at("optimizer").at("lr").get<double>();
  g.options.adamw.weight_decay = g.json.at("optimizer").at("weight_decay").get<double>();
  g.options.clip_norm = g.json.at("optimizer").at("max_norm").get<double>();
  std::string bytes;
  EXPECT_TRUE(
      absl::Base64Unescape(g.json.at("embed_tokens_grad").at("b64").get<std::string>(), &bytes));
  g.embed_grad.resize(bytes.size() / sizeof(float));
  std::memcpy(g.embed_grad.data(), bytes.data(), bytes.size());
  return g;
}

double MaxRelError(const std::vector<float>& ours, const std::vector<float>& ref) {
  EXPECT_EQ(ours.size(), ref.size());
  double max_diff = 0, max_ref = 0;
  for (size_t i = 0; i < ref.size() && i < ours.size(); ++i) {
    max_diff = std::max(max_diff, std::fabs(static_cast<double>(ours[i]) - ref[i]));
    max_ref = std::max(max_ref, std::fabs(static_cast<double>(ref[i])));
  }
  return max_diff / max_ref;
}

// The oracle's tolerances (tests/data/fixtures/README.md, docs/training.md).
TEST(TiedEmbeddingsTest, GradientsAndTenAdamWStepsMatchPyTorch) {
  const TiedGolden g = LoadGolden();
  std::unique_ptr<TrainModel> model = LoadTied();
  ASSERT_NE(model, nullptr);
  EXPECT_EQ(model->Find("lm_head.weight"), nullptr);
  TrainOptions options = g.options;
  options.threads = 2;
  Trainer trainer(model.get(), options);
  const nlohmann::json& steps = g.json.at("steps");
  double grad_error = -1, loss_error = 0, norm_error = 0;
  for (size_t s = 0; s < steps.size(); ++s) {
    auto check_grads = [&](const TrainModel& m) {
      if (s != 0) return;
      for (const Parameter& p : m.params()) {
        if (p.name == kEmbed) grad_error = MaxRelError(p.grad, g.embed_grad);
      }
    };
    auto report = trainer.Step({g.batch}, check_grads);
    ASSERT_TRUE(report.ok()) << report.status();
    loss_error = std::max(loss_error,
                          std::fabs(report->loss.total - steps[s].at("loss_total").get<double>()));
    norm_error =
        std::max(norm_error, std::fabs(report->grad_norm_before_clip -
                                       steps[s].at("grad_norm_before_clip").get<double>()) /
                                 steps[s].at("grad_norm_before_clip").get<double>());
    EXPECT_NEAR(report->loss.total, steps[s].at("loss_total").get<double>(), 1e-5) << s;
    EXPECT_NEAR(report->loss.ce, steps[s].at("ce").get<double>(), 1e-5) << s;
    EXPECT_NEAR(report->loss.aux, steps[s].at("aux").get<double>(), 1e-5) << s;
    const double ref_norm = steps[s].at("grad_norm_before_clip").get<double>();
    EXPECT_LT(std::fabs(report->grad_norm_before_clip - ref_norm) / ref_norm, 1e-5) << s;
  }
  EXPECT_GE(grad_error, 0) << "no gradient for " << kEmbed;
  EXPECT_LT(grad_error, 1e-4);
  auto final_loss = trainer.Evaluate(g.batch);
  ASSERT_TRUE(final_loss.ok()) << final_loss.status();
  const double final_ref = g.json.at("loss_after_final_step").at("total").get<double>();
  EXPECT_NEAR(final_loss->total, final_ref, 1e-5);
  std::cerr << "tied vs PyTorch: embedding gradient " << grad_error << " relative, step losses "
            << loss_error << ", grad norms " << norm_error << " relative, final loss "
            << std::fabs(final_loss->total - final_ref) << "\n";
}

// An untied model whose lm_head holds the embedding's values computes the
// same function; the tied gradient is the sum of its two gradients and every
// other gradient is the same.
TEST(TiedEmbeddingsTest, GradientIsTheSumOfBothUses) {
  const TrainBatch batch = LoadGolden().batch;
  auto untied = TrainModel::Load(kMixtral);
  ASSERT_TRUE(untied.ok()) << untied.status();
  Parameter* head = (*untied)->Find("lm_head.weight");
  ASSERT_NE(head, nullptr);
  head->value = (*untied)->Find(kEmbed)->value;
  std::unique_ptr<TrainModel> tied = LoadTied();
  auto untied_loss = (*untied)->Step(batch, true, 1.0f, nullptr);
  auto tied_loss = tied->Step(batch, true, 1.0f, nullptr);
  ASSERT_TRUE(untied_loss.ok() && tied_loss.ok());
  EXPECT_NEAR(tied_loss->total, untied_loss->total, 1e-6 * std::fabs(untied_loss->total));

  const Parameter* embed = (*untied)->Find(kEmbed);
  ASSERT_TRUE(embed->has_grad && head->has_grad);
  std::vector<float> sum(embed->grad.size());
  for (size_t i = 0; i < sum.size(); ++i) sum[i] = embed->grad[i] + head->grad[i];
  const double sum_error = MaxRelError(tied->Find(kEmbed)->grad, sum);
  EXPECT_LT(sum_error, 1e-6);
  std::cerr << "tied gradient vs the untied sum: " << sum_error << " relative\n";
  // Both parts matter: neither alone is the tied gradient.
  EXPECT_GT(MaxRelError(embed->grad, sum), 1e-2);
  EXPECT_GT(MaxRelError(head->grad, sum), 1e-2);
  for (const Parameter& p : tied->params()) {
    if (p.name == kEmbed || !p.has_grad) continue;
    EXPECT_LT(MaxRelError(p.grad, (*untied)->Find(p.name)->grad), 1e-6) << p.name;
  }
}

// Finite differences of the whole model's loss along the tied gradient,
// split into the rows the batch feeds in (both uses) and the rows it does not
// (the LM head's use only): each directional derivative equals that part's
// norm.
TEST(TiedEmbeddingsTest, FiniteDifferencesThroughTheWholeLoss) {
  const TrainBatch batch = LoadGolden().batch;
  std::unique_ptr<TrainModel> model = LoadTied();
  ASSERT_NE(model, nullptr);
  ASSERT_TRUE(model->Step(batch, true, 1.0f, nullptr).ok());
  Parameter* embed = model->Find(kEmbed);
  const int64_t hidden = embed->shape[1];
  const std::set<int32_t> input_rows(batch.input_ids.begin(), batch.input_ids.end());
  const std::vector<float> value = embed->value;
  const std::vector<float> grad = embed->grad;
  for (bool inputs : {true, false}) {
    std::vector<double> direction(grad.size(), 0.0);
    double norm_sq = 0;
    for (int64_t row = 0; row < embed->shape[0]; ++row) {
      if ((input_rows.count(row) > 0) != inputs) continue;
      for (int64_t c = 0; c < hidden; ++c) {
        direction[row * hidden + c] = grad[row * hidden + c];
        norm_sq += static_cast<double>(grad[row * hidden + c]) * grad[row * hidden + c];
      }
    }
    const double norm = std::sqrt(norm_sq);
    ASSERT_GT(norm, 0) << (inputs ? "input rows" : "other rows");
    auto loss_at = [&](double eps) {
      for (size_t i = 0; i < value.size(); ++i) {
        embed->value[i] = static_cast<float>(value[i] + eps * direction[i] / norm);
      }
      return static_cast<double>(model->Step(batch, false, 1.0f, nullptr)->total);
    };
    const double eps = 1e-2;
    const double fd = (loss_at(eps) - loss_at(-eps)) / (2 * eps);
    EXPECT_NEAR(fd, norm, 1e-2 * norm) << (inputs ? "input rows" : "other rows");
    std::cerr << (inputs ? "input rows" : "other rows") << ": finite difference " << fd
              << ", gradient norm " << norm << "\n";
    embed->value = value;
  }
}

void ExpectSameBits(const TrainModel& a, const TrainModel& b) {
  ASSERT_EQ(a.params().size(), b.params().size());
  for (size_t i = 0; i < a.params().size(); ++i) {
    const Parameter& p = a.params()[i];
    const Parameter& q = b.params()[i];
    ASSERT_EQ(p.name, q.name);
    ASSERT_EQ(p.value.size(), q.value.size()) << p.name;
    EXPECT_EQ(std::memcmp(p.value.data(), q.value.data(), p.value.size() * sizeof(float)), 0)
        << p.name;
  }
}

// Training runs and checkpoints without an lm_head: the checkpoint has the
// source's tensor names (no lm_head.weight), resumes bitwise, and the serving
// engine's logits on it match the trainer's forward.
TEST(TiedEmbeddingsTest, TrainsAndCheckpointsWithoutALmHead) {
  const std::string source = MakeTiedModel();
  const TrainBatch batch = LoadGolden().batch;
  auto model = TrainModel::Load(source);
  ASSERT_TRUE(model.ok()) << model.status();
  TrainOptions options;
  options.lr = 1e-3;
  Trainer trainer(model->get(), options);
  TrainingProgress progress;
  std::vector<float> losses;
  for (; progress.step < 3; ++progress.step) {
    auto report = trainer.Step({batch});
    ASSERT_TRUE(report.ok()) << report.status();
    losses.push_back(report->loss.total);
  }
  EXPECT_LT(losses.back(), losses.front());
  const std::string dir = TmpDir() + "/tied_ckpt";
  ASSERT_TRUE(WriteTrainingCheckpoint(Env::Default(), **model, trainer.optimizer(), progress,
                                      CheckpointSource{source}, dir)
                  .ok());
  auto src = models::Checkpoint::Open(source);
  auto out = models::Checkpoint::Open(dir);
  ASSERT_TRUE(src.ok() && out.ok()) << out.status();
  EXPECT_EQ((*src)->Names(), (*out)->Names());
  EXPECT_TRUE((*out)->config().tie_word_embeddings);

  auto resumed_model = TrainModel::Load(dir);
  ASSERT_TRUE(resumed_model.ok()) << resumed_model.status();
  Trainer resumed(resumed_model->get(), options);
  auto restored =
      RestoreTrainingState(Env::Default(), dir, resumed_model->get(), &resumed.optimizer());
  ASSERT_TRUE(restored.ok()) << restored.status();
  resumed.RestoreStepsDone(restored->step);
  ASSERT_TRUE(trainer.Step({batch}).ok());
  ASSERT_TRUE(resumed.Step({batch}).ok());
  ExpectSameBits(**model, **resumed_model);

  const std::vector<int32_t> prompt = {1, 5, 9, 200, 31, 77};
  std::vector<float> trainer_logits;
  TrainBatch prompt_batch{1, static_cast<int64_t>(prompt.size()), prompt, {}};
  ASSERT_TRUE((*resumed_model)->Step(prompt_batch, false, 1.0f, nullptr, &trainer_logits).ok());
  const std::string final_dir = TmpDir() + "/tied_ckpt_final";
  progress.step = 4;
  ASSERT_TRUE(WriteTrainingCheckpoint(Env::Default(), **resumed_model, resumed.optimizer(),
                                      progress, CheckpointSource{source}, final_dir)
                  .ok());
  auto served_ckpt = models::Checkpoint::Open(final_dir);
  ASSERT_TRUE(served_ckpt.ok()) << served_ckpt.status();
  std::shared_ptr<const models::Checkpoint> shared(std::move(*served_ckpt));
  engine::EngineOptions eo;
  eo.backend.threads = 1;
  auto engine = engine::Engine::Create(shared, eo);
  ASSERT_TRUE(engine.ok()) << engine.status();
  auto served = engine::RunGreedy(engine->get(), 1, prompt, 0);
  ASSERT_TRUE(served.ok()) << served.status();
  const int64_t vocab = shared->config().vocab_size;
  ASSERT_EQ(served->last_logits.size(), static_cast<size_t>(vocab));
  double max_diff = 0, max_ref = 0;
  for (int64_t v = 0; v < vocab; ++v) {
    const double ref = trainer_logits[(prompt.size() - 1) * vocab + v];
    max_diff = std::max(max_diff, std::fabs(served->last_logits[v] - ref));
    max_ref = std::max(max_ref, std::fabs(ref));
  }
  EXPECT_LT(max_diff / max_ref, 1e-4);
}

}  // namespace
}  // namespace expertd::train
