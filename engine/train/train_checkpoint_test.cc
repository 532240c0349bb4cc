#include "engine/train/train_checkpoint.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "base/env.h"
#include "base/fault_injection_env.h"
#include "engine/engine.h"
#include "engine/greedy.h"
#include "engine/train/data_stream.h"
#include "engine/train/trainer.h"
#include "gtest/gtest.h"
#include "models/checkpoint/checkpoint.h"

namespace expertd::train {
namespace {

const char kMixtral[] = "tests/data/fixtures/mixtral";

std::string TmpDir() { return getenv("TEST_TMPDIR") != nullptr ? getenv("TEST_TMPDIR") : "/tmp"; }

std::vector<Example> RandomExamples(int n, int32_t vocab) {
  std::mt19937 rng(11);
  std::vector<Example> out;
  for (int i = 0; i < n; ++i) {
    Example ex;
    const int len = 3 + static_cast<int>(rng() % 9);
    for (int t = 0; t < len; ++t) ex.input_ids.push_back(static_cast<int32_t>(rng() % vocab));
    ex.labels = ex.input_ids;
    out.push_back(ex);
  }
  return out;
}

TrainOptions Options(TrainScope scope) {
  TrainOptions o;
  o.lr = 2e-3;
  o.schedule = LrSchedule::kCosine;
  o.warmup_steps = 1;
  o.total_steps = 6;
  o.scope = scope;
  return o;
}

DataStream Stream() {
  DataStreamOptions d;
  d.max_seq_len = 16;
  d.rows_per_micro_batch = 2;
  d.micro_batches_per_step = 2;
  d.seed = 5;
  return DataStream(RandomExamples(12, 512), d);
}

// Runs steps [from, to) of the schedule.
void RunSteps(Trainer* trainer, const DataStream& stream, int64_t to, TrainingProgress* progress) {
  for (; progress->step < to; ++progress->step) {
    auto report = trainer->Step(stream.NextStep(&progress->cursor));
    ASSERT_TRUE(report.ok()) << report.status();
  }
}

std::unique_ptr<TrainModel> LoadBf16(const std::string& dir) {
  models::CheckpointOptions o;
  o.weights_file = "model.bf16.safetensors";
  auto model = TrainModel::Load(dir, o);
  EXPECT_TRUE(model.ok()) << model.status();
  return model.ok() ? *std::move(model) : nullptr;
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

// N steps in one go, or k steps + checkpoint + fresh objects + N-k steps:
// the same bits (bf16 weights, so fp32 masters matter; cosine schedule with
// warmup, so the schedule position matters; epochs cross, so the cursor does).
TEST(TrainCheckpointTest, ResumeIsBitwiseEqualToAnUninterruptedRun) {
  const DataStream stream = Stream();
  ASSERT_EQ(stream.steps_per_epoch(), 2);
  const int64_t kSteps = 6, kSplit = 3;  // the split falls inside the second epoch
  auto straight = LoadBf16(kMixtral);
  ASSERT_NE(straight, nullptr);
  Trainer straight_trainer(straight.get(), Options(TrainScope::kFull));
  TrainingProgress straight_progress;
  RunSteps(&straight_trainer, stream, kSteps, &straight_progress);

  const std::string dir = TmpDir() + "/resume_ckpt";
  {
    auto model = LoadBf16(kMixtral);
    Trainer trainer(model.get(), Options(TrainScope::kFull));
    TrainingProgress progress;
    progress.seed = 5;
    progress.extra = {{"note", "kept"}};
    RunSteps(&trainer, stream, kSplit, &progress);
    ASSERT_EQ(progress.cursor.epoch, 1);
    ASSERT_GT(progress.cursor.position, 0);
    CheckpointSource source{kMixtral};
    ASSERT_TRUE(
        WriteTrainingCheckpoint(Env::Default(), *model, trainer.optimizer(), progress, source, dir)
            .ok());
  }
  EXPECT_FALSE(FileExists(Env::Default(), dir + ".partial"));
  auto resumed = TrainModel::Load(dir);
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  EXPECT_EQ((*resumed)->Find("model.embed_tokens.weight")->dtype, models::DType::kBF16);
  Trainer trainer(resumed->get(), Options(TrainScope::kFull));
  auto progress = RestoreTrainingState(Env::Default(), dir, resumed->get(), &trainer.optimizer());
  ASSERT_TRUE(progress.ok()) << progress.status();
  EXPECT_EQ(progress->step, kSplit);
  EXPECT_EQ(progress->cursor.epoch, 1);
  EXPECT_EQ(progress->seed, 5u);
  EXPECT_EQ(progress->extra["note"], "kept");
  trainer.RestoreStepsDone(progress->step);
  RunSteps(&trainer, stream, kSteps, &*progress);
  ExpectSameBits(*straight, **resumed);
  // The optimizer state too (moments, masters, step counts).
  for (size_t i = 0; i < straight->params().size(); ++i) {
    const AdamWParamState& a = straight_trainer.optimizer().state()[i];
    const AdamWParamState& b = trainer.optimizer().state()[i];
    EXPECT_EQ(a.step, b.step);
    EXPECT_EQ(a.m, b.m);
    EXPECT_EQ(a.v, b.v);
    EXPECT_EQ(a.master, b.master);
  }
}

// A resume that skipped the optimizer state would differ: the test can fail.
TEST(TrainCheckpointTest, ResumingWithoutOptimizerStateDiffers) {
  const DataStream stream = Stream();
  auto straight = LoadBf16(kMixtral);
  Trainer straight_trainer(straight.get(), Options(TrainScope::kFull));
  TrainingProgress p1;
  RunSteps(&straight_trainer, stream, 3, &p1);
  auto model = LoadBf16(kMixtral);
  Trainer t1(model.get(), Options(TrainScope::kFull));
  TrainingProgress p2;
  RunSteps(&t1, stream, 2, &p2);
  Trainer t2(model.get(), Options(TrainScope::kFull));  // fresh moments
  t2.RestoreStepsDone(2);
  RunSteps(&t2, stream, 3, &p2);
  bool differs = false;
  for (size_t i = 0; i < model->params().size(); ++i) {
    differs |= model->params()[i].value != straight->params()[i].value;
  }
  EXPECT_TRUE(differs);
}

// The directory is a Hugging Face model dir: the checkpoint reader sees every
// HF tensor name of the source, the config and tokenizer-side files, and the
// serving engine's logits match the trainer's forward.
TEST(TrainCheckpointTest, WritesAServableHuggingFaceDirectory) {
  const DataStream stream = Stream();
  auto model = LoadBf16(kMixtral);
  Trainer trainer(model.get(), Options(TrainScope::kExperts));
  TrainingProgress progress;
  RunSteps(&trainer, stream, 2, &progress);
  const std::string dir = TmpDir() + "/hf_ckpt";
  ASSERT_TRUE(WriteTrainingCheckpoint(Env::Default(), *model, trainer.optimizer(), progress,
                                      CheckpointSource{kMixtral}, dir)
                  .ok());
  auto src = models::Checkpoint::Open(kMixtral);
  auto out = models::Checkpoint::Open(dir);
  ASSERT_TRUE(src.ok() && out.ok()) << out.status();
  EXPECT_EQ((*src)->Names(), (*out)->Names());
  EXPECT_EQ(*ReadFileToString(Env::Default(), std::string(kMixtral) + "/config.json"),
            *ReadFileToString(Env::Default(), dir + "/config.json"));
  // transformers' save_pretrained always writes a generation_config.json; the
  // fixture has none, so the checkpoint's is derived from its config.json.
  ASSERT_FALSE(FileExists(Env::Default(), std::string(kMixtral) + "/generation_config.json"));
  EXPECT_EQ(
      *ReadFileToString(Env::Default(), dir + "/generation_config.json"),
      "{\n  \"_from_model_config\": true,\n  \"bos_token_id\": 1,\n  \"eos_token_id\": 2\n}\n");
  auto w = (*out)->Get("model.layers.0.block_sparse_moe.experts.0.w1.weight");
  ASSERT_TRUE(w.ok());
  EXPECT_EQ(w->dtype, models::DType::kBF16);

  const std::vector<int32_t> prompt = {1, 5, 9, 200, 31, 77};
  TrainBatch batch{1, static_cast<int64_t>(prompt.size()), prompt, {}};
  std::vector<float> trainer_logits;
  ASSERT_TRUE(model->Step(batch, false, 1.0f, nullptr, &trainer_logits).ok());
  std::shared_ptr<const models::Checkpoint> shared(std::move(*out));
  engine::EngineOptions eo;
  eo.backend.threads = 1;
  auto engine = engine::Engine::Create(shared, eo);
  ASSERT_TRUE(engine.ok()) << engine.status();
  auto served = engine::RunGreedy(engine->get(), 1, prompt, 0);
  ASSERT_TRUE(served.ok()) << served.status();
  const int64_t vocab = 512;
  ASSERT_EQ(served->last_logits.size(), static_cast<size_t>(vocab));
  double max_diff = 0, max_ref = 0;
  for (int64_t v = 0; v < vocab; ++v) {
    const double ref = trainer_logits[(prompt.size() - 1) * vocab + v];
    max_diff = std::max(max_diff, std::fabs(served->last_logits[v] - ref));
    max_ref = std::max(max_ref, std::fabs(ref));
  }
  EXPECT_LT(max_diff / max_ref, 1e-4);
}

TEST(TrainCheckpointTest, LoraWritesPeftAdapterAndMergedWeights) {
  auto model = LoadBf16(kMixtral);
  LoraOptions lora;
  lora.rank = 4;
  lora.alpha = 8;
  lora.seed = 3;
  ASSERT_TRUE(AttachLora(lora, model.get()).ok());
  Trainer trainer(model.get(), Options(TrainScope::kLora));
  TrainingProgress progress;
  RunSteps(&trainer, Stream(), 2, &progress);
  const std::string dir = TmpDir() + "/lora_ckpt";
  CheckpointSource source{kMixtral, &lora, "mixtral-base"};
  ASSERT_TRUE(
      WriteTrainingCheckpoint(Env::Default(), *model, trainer.optimizer(), progress, source, dir)
          .ok());
  // The merged directory: the base names only, weights = MergeLora's.
  auto merged = TrainModel::Load(dir);
  ASSERT_TRUE(merged.ok()) << merged.status();
  for (const Parameter& p : (*merged)->params()) {
    EXPECT_EQ(p.name.rfind("base_model.model.", 0), std::string::npos) << p.name;
  }
  const TrainBatch batch{1, 5, {3, 9, 27, 81, 243}, {}};
  std::vector<float> unmerged_logits, merged_logits;
  ASSERT_TRUE(model->Step(batch, false, 1.0f, nullptr, &unmerged_logits).ok());
  ASSERT_TRUE((*merged)->Step(batch, false, 1.0f, nullptr, &merged_logits).ok());
  double max_diff = 0, max_ref = 0;
  for (size_t i = 0; i < merged_logits.size(); ++i) {
    max_diff = std::max<double>(max_diff, std::fabs(merged_logits[i] - unmerged_logits[i]));
    max_ref = std::max<double>(max_ref, std::fabs(unmerged_logits[i]));
  }
  EXPECT_LT(max_diff / max_ref, 1e-2);  // bf16 rounding of the merged weights
  // The PEFT adapter resumes bitwise onto the base model.
  auto base = LoadBf16(kMixtral);
  ASSERT_TRUE(LoadLoraAdapter(dir + "/adapter", base.get()).ok());
  Trainer resumed(base.get(), Options(TrainScope::kLora));
  auto restored = RestoreTrainingState(Env::Default(), dir, base.get(), &resumed.optimizer());
  ASSERT_TRUE(restored.ok()) << restored.status();
  resumed.RestoreStepsDone(restored->step);
  RunSteps(&resumed, Stream(), 4, &*restored);
  RunSteps(&trainer, Stream(), 4, &progress);
  ExpectSameBits(*model, *base);
}

TEST(TrainCheckpointTest, AFullDiskFailsCleanlyAndLeavesNoDirectory) {
  auto model = LoadBf16(kMixtral);
  Trainer trainer(model.get(), Options(TrainScope::kFull));
  TrainingProgress progress;
  RunSteps(&trainer, Stream(), 1, &progress);
  for (int nth : {1, 3, 6}) {
    FaultInjectionEnv env(Env::Default());
    env.FailNth(FaultOp::kWrite, nth, ENOSPC);
    const std::string dir = TmpDir() + "/full_disk_" + std::to_string(nth);
    absl::Status st = WriteTrainingCheckpoint(&env, *model, trainer.optimizer(), progress,
                                              CheckpointSource{kMixtral}, dir);
    EXPECT_EQ(st.code(), absl::StatusCode::kResourceExhausted) << nth << " " << st;
    EXPECT_FALSE(FileExists(Env::Default(), dir)) << nth;
    EXPECT_FALSE(FileExists(Env::Default(), dir + ".partial")) << nth;
  }
}

// What a kill -9 mid-write leaves (a partial directory, or a complete one the
// job never recorded) is replaced by the next write of that step.
TEST(TrainCheckpointTest, LeftoversOfACrashAreReplaced) {
  auto model = LoadBf16(kMixtral);
  Trainer trainer(model.get(), Options(TrainScope::kFull));
  TrainingProgress progress;
  RunSteps(&trainer, Stream(), 1, &progress);
  const std::string dir = TmpDir() + "/crash_ckpt";
  Env* env = Env::Default();
  ASSERT_TRUE(CreateDirs(env, dir + ".partial/adapter").ok());
  ASSERT_TRUE(WriteFileAtomically(env, dir + ".partial/model.safetensors", "torn").ok());
  ASSERT_TRUE(CreateDirs(env, dir).ok());
  ASSERT_TRUE(WriteFileAtomically(env, dir + "/stale.json", "{}").ok());
  ASSERT_TRUE(WriteTrainingCheckpoint(env, *model, trainer.optimizer(), progress,
                                      CheckpointSource{kMixtral}, dir)
                  .ok());
  EXPECT_FALSE(FileExists(env, dir + ".partial"));
  EXPECT_FALSE(FileExists(env, dir + "/stale.json"));
  auto reloaded = TrainModel::Load(dir);
  ASSERT_TRUE(reloaded.ok()) << reloaded.status();
  ExpectSameBits(*model, **reloaded);
}

TEST(TrainCheckpointTest, RestoreRefusesAStateThatDoesNotFit) {
  auto model = LoadBf16(kMixtral);
  Trainer trainer(model.get(), Options(TrainScope::kFull));
  TrainingProgress progress;
  RunSteps(&trainer, Stream(), 1, &progress);
  const std::string dir = TmpDir() + "/misfit_ckpt";
  ASSERT_TRUE(WriteTrainingCheckpoint(Env::Default(), *model, trainer.optimizer(), progress,
                                      CheckpointSource{kMixtral}, dir)
                  .ok());
  auto other = TrainModel::Load("tests/data/fixtures/qwen2_moe_mixed");
  ASSERT_TRUE(other.ok());
  AdamW optimizer(AdamWOptions{});
  auto st = RestoreTrainingState(Env::Default(), dir, other->get(), &optimizer);
  EXPECT_FALSE(st.ok());
  EXPECT_FALSE(
      RestoreTrainingState(Env::Default(), TmpDir() + "/nothing", model.get(), &trainer.optimizer())
          .ok());
}

}  // namespace
}  // namespace expertd::train
