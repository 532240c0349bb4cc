#include "server/jobs/training_executor.h"

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/clock.h"
#include "base/env.h"
#include "base/fault_injection_env.h"
#include "engine/train/train_model.h"
#include "engine/train/trainer.h"
#include "gtest/gtest.h"
#include "models/checkpoint/checkpoint.h"

namespace expertd::server::jobs {
namespace {

const char kMixtral[] = "tests/data/fixtures/mixtral";

std::string TmpDir() { return getenv("TEST_TMPDIR") != nullptr ? getenv("TEST_TMPDIR") : "/tmp"; }

std::string Read(const std::string& path) {
  auto text = ReadFileToString(Env::Default(), path);
  EXPECT_TRUE(text.ok()) << text.status();
  return text.ok() ? *text : "";
}

void Write(const std::string& path, const std::string& contents) {
  ASSERT_TRUE(CreateDirs(Env::Default(), DirName(path)).ok());
  ASSERT_TRUE(WriteFileAtomically(Env::Default(), path, contents).ok());
}

// The Mixtral fixture with bf16 weights (so fp32 master weights are in play).
std::string ModelDir() {
  const std::string dir = TmpDir() + "/model";
  if (!FileExists(Env::Default(), dir + "/model.safetensors")) {
    Write(dir + "/config.json", Read(std::string(kMixtral) + "/config.json"));
    Write(dir + "/model.safetensors", Read(std::string(kMixtral) + "/model.bf16.safetensors"));
  }
  return dir;
}

std::string TokenIdsFile(const std::string& name, int examples, unsigned seed) {
  std::mt19937 rng(seed);
  std::string text;
  for (int i = 0; i < examples; ++i) {
    text += "{\"token_ids\": [";
    const int len = 4 + static_cast<int>(rng() % 9);
    for (int t = 0; t < len; ++t) absl::StrAppend(&text, t ? ", " : "", rng() % 512);
    text += "]}\n";
  }
  const std::string path = TmpDir() + "/data/" + name;
  Write(path, text);
  return path;
}

// Moves 1 ms forward on every reading: a step (read before and after) takes 1 ms.
class TickingClock final : public Clock {
 public:
  int64_t NowNanos() const override { return now_ += 1'000'000; }
  absl::Time Now() const override { return absl::FromUnixNanos(NowNanos()); }

 private:
  mutable std::atomic<int64_t> now_{0};
};

class FakeSink : public JobSink {
 public:
  void Event(v1::FineTuneJobEvent::Level, std::string message) override {
    events.push_back(std::move(message));
  }
  void Progress(const JobProgressUpdate& p) override { progress.push_back(p); }
  absl::Status CheckpointWritten(const CheckpointRecord& record) override {
    checkpoints.push_back(record);
    return absl::OkStatus();
  }
  bool StopRequested() const override {
    return stop_after_checkpoints >= 0 &&
           static_cast<int>(checkpoints.size()) >= stop_after_checkpoints;
  }

  int stop_after_checkpoints = -1;
  std::vector<std::string> events;
  std::vector<JobProgressUpdate> progress;
  std::vector<CheckpointRecord> checkpoints;
};

class TrainingExecutorTest : public ::testing::Test {
 protected:
  std::unique_ptr<JobExecutor> Executor(Env* env = nullptr, uint64_t memory_limit = 0,
                                        uint64_t device_memory = 0) {
    TrainingExecutorOptions o;
    o.device_memory_bytes = device_memory;
    o.model_dir = ModelDir();
    o.model_name = "tiny";
    o.max_threads = 1;
    o.env = env;
    o.memory_limit_bytes = memory_limit;
    o.clock = &clock_;
    auto executor = NewTrainingExecutor(o);
    EXPECT_TRUE(executor.ok()) << executor.status();
    return executor.ok() ? *std::move(executor) : nullptr;
  }

  JobRun Run(const std::string& job_id) {
    JobRun run;
    run.job_id = job_id;
    run.training_file_path = TokenIdsFile("train.jsonl", 20, 1);
    run.job_dir = TmpDir() + "/jobs/" + job_id;
    v1::Hyperparameters* h = run.spec.mutable_hyperparameters();
    h->set_n_epochs(2);
    h->set_batch_size(2);
    h->set_learning_rate(1e-3);
    h->set_max_seq_len(16);
    h->set_checkpoint_every_steps(2);
    h->set_lr_scheduler("cosine");
    h->set_warmup_steps(1);
    h->set_gradient_accumulation_steps(2);
    run.spec.set_seed(9);
    run.spec.set_suffix("mine");
    return run;
  }

  TickingClock clock_;
};

void ExpectCode(const absl::Status& st, const std::string& code, const std::string& text) {
  EXPECT_FALSE(st.ok());
  EXPECT_EQ(JobErrorCodeOf(st), code) << st;
  EXPECT_NE(st.message().find(text), std::string::npos) << st;
}

TEST_F(TrainingExecutorTest, ValidateNamesTheBadFieldOrLine) {
  auto executor = Executor();
  JobRun run = Run("validate");
  EXPECT_TRUE(executor->Validate(run).ok());
  JobRun bad = run;
  bad.spec.mutable_hyperparameters()->set_batch_size(0);
  ExpectCode(executor->Validate(bad), "invalid_spec", "hyperparameters.batch_size");
  bad = run;
  bad.spec.mutable_hyperparameters()->set_lr_scheduler("step");
  ExpectCode(executor->Validate(bad), "invalid_spec", "hyperparameters.lr_scheduler");
  bad = run;
  bad.spec.mutable_hyperparameters()->set_max_seq_len(1);
  ExpectCode(executor->Validate(bad), "invalid_spec", "hyperparameters.max_seq_len");
  bad = run;
  bad.spec.mutable_lora()->set_rank(4);
  ExpectCode(executor->Validate(bad), "invalid_spec", "TRAIN_SCOPE_LORA");
  bad = run;
  bad.spec.set_scope(v1::TRAIN_SCOPE_LORA);
  bad.spec.mutable_lora()->add_target_modules("mlp");
  ExpectCode(executor->Validate(bad), "invalid_spec", "lora.target_modules");
  // Known module names that this model (Mixtral: experts are w1/w2/w3) does
  // not have are refused at validation, the entry named, not at Run.
  bad = run;
  bad.spec.set_scope(v1::TRAIN_SCOPE_LORA);
  bad.spec.mutable_lora()->add_target_modules("q_proj");
  bad.spec.mutable_lora()->add_target_modules("gate_proj");
  ExpectCode(executor->Validate(bad), "invalid_spec",
             "lora.target_modules[1]: \"gate_proj\" matches no weight of the served model");
  EXPECT_EQ(executor->Validate(bad).code(), absl::StatusCode::kInvalidArgument);
  JobRun experts = run;
  experts.spec.set_scope(v1::TRAIN_SCOPE_LORA);
  for (const char* m : {"q_proj", "w1", "w2", "w3"}) {
    experts.spec.mutable_lora()->add_target_modules(m);
  }
  EXPECT_TRUE(executor->Validate(experts).ok()) << executor->Validate(experts);
  bad = run;
  bad.spec.mutable_schedule()->set_moe_chunks(3);
  ExpectCode(executor->Validate(bad), "invalid_spec", "schedule.moe_chunks");
  bad = run;
  bad.spec.mutable_schedule()->set_micro_batches(9);
  ExpectCode(executor->Validate(bad), "invalid_spec", "schedule.micro_batches");
  bad = run;
  Write(TmpDir() + "/data/bad.jsonl", "{\"token_ids\": [1, 2]}\n{\"text\": \"no tokenizer\"}\n");
  bad.training_file_path = TmpDir() + "/data/bad.jsonl";
  ExpectCode(executor->Validate(bad), "invalid_training_file", "line 2: text needs a tokenizer");
  bad = run;
  bad.validation_file_path = TmpDir() + "/data/missing.jsonl";
  ExpectCode(executor->Validate(bad), "invalid_training_file", "missing.jsonl");
}

TEST_F(TrainingExecutorTest, RunsReportingEveryStepAndCheckpointing) {
  auto executor = Executor();
  JobRun run = Run("full");
  run.validation_file_path = TokenIdsFile("validation.jsonl", 4, 2);
  FakeSink sink;
  ASSERT_TRUE(executor->Run(run, &sink).ok());
  // 20 examples packed into rows of 16, 4 rows a step.
  ASSERT_FALSE(sink.progress.empty());
  const uint64_t total = sink.progress.back().total_steps;
  ASSERT_EQ(sink.progress.size(), total);
  for (size_t i = 0; i < sink.progress.size(); ++i) {
    const JobProgressUpdate& p = sink.progress[i];
    EXPECT_EQ(p.step, i + 1);
    EXPECT_GT(p.train_loss, 0);
    EXPECT_GT(p.grad_norm, 0);
    EXPECT_GT(p.memory_bytes, 0u);
    const uint64_t tokens = p.trained_tokens - (i > 0 ? sink.progress[i - 1].trained_tokens : 0);
    EXPECT_GT(tokens, 0u);
    EXPECT_NEAR(p.tokens_per_second, tokens * 1000.0, 1e-6 * tokens * 1000.0) << p.step;
    EXPECT_EQ(p.validation_loss.has_value(), p.step % 2 == 0 || p.step == total) << p.step;
  }
  EXPECT_EQ(sink.progress[0].learning_rate, 0.0);  // warmup starts at 0
  EXPECT_GT(sink.progress[1].learning_rate, 0.0);
  EXPECT_GT(sink.progress.back().trained_tokens, 0u);
  // Expert load on the first step: 3 MoE layers of 8 experts, top-2 per token.
  ASSERT_EQ(sink.progress[0].expert_load.size(), 3u);
  uint64_t routed = 0;
  for (uint64_t n : sink.progress[0].expert_load[0]) routed += n;
  EXPECT_EQ(routed % 2, 0u);
  EXPECT_GT(routed, 0u);
  ASSERT_EQ(sink.checkpoints.size(), (total + 1) / 2);
  const CheckpointRecord& last = sink.checkpoints.back();
  EXPECT_EQ(last.step, total);
  EXPECT_EQ(last.model_name, "tiny:ft-mine");
  EXPECT_EQ(last.id, absl::StrCat("ckpt-full-", total));
  EXPECT_EQ(last.path, absl::StrCat(run.job_dir, "/checkpoints/step-", total));
  for (const char* f :
       {"config.json", "model.safetensors", "training_state.json", "training_state.safetensors"}) {
    EXPECT_TRUE(FileExists(Env::Default(), last.path + "/" + f)) << f;
  }
  auto served = models::Checkpoint::Open(last.path);
  EXPECT_TRUE(served.ok()) << served.status();
}

// Cancel after the first checkpoint, resume from it in a fresh executor:
// the final weights and optimizer state are the uninterrupted run's, bitwise.
TEST_F(TrainingExecutorTest, ResumeAfterStopIsBitwiseEqualToAnUninterruptedRun) {
  FakeSink straight;
  ASSERT_TRUE(Executor()->Run(Run("straight"), &straight).ok());
  JobRun interrupted = Run("interrupted");
  FakeSink first;
  first.stop_after_checkpoints = 1;
  const absl::Status st = Executor()->Run(interrupted, &first);
  EXPECT_EQ(st.code(), absl::StatusCode::kCancelled) << st;
  ASSERT_EQ(first.checkpoints.size(), 1u);
  ASSERT_LT(first.checkpoints[0].step, straight.checkpoints.back().step);
  interrupted.resume_from = first.checkpoints[0];
  FakeSink second;
  ASSERT_TRUE(Executor()->Run(interrupted, &second).ok());
  EXPECT_EQ(second.progress.front().step, first.checkpoints[0].step + 1);
  const std::string a = straight.checkpoints.back().path, b = second.checkpoints.back().path;
  EXPECT_TRUE(Read(a + "/model.safetensors") == Read(b + "/model.safetensors"));
  EXPECT_TRUE(Read(a + "/training_state.safetensors") == Read(b + "/training_state.safetensors"));
  // Losses after the resume match the uninterrupted run's step by step.
  for (const JobProgressUpdate& p : second.progress) {
    EXPECT_EQ(p.train_loss, straight.progress[p.step - 1].train_loss) << p.step;
  }
}

TEST_F(TrainingExecutorTest, ExpertOffloadJobEqualsThePlainJobBitwise) {
  FakeSink plain;
  ASSERT_TRUE(Executor()->Run(Run("plain"), &plain).ok());
  JobRun offloaded = Run("offloaded");
  offloaded.spec.mutable_schedule()->set_offload_experts(true);
  FakeSink sink;
  ASSERT_TRUE(Executor()->Run(offloaded, &sink).ok());
  bool placement_reported = false;
  for (const std::string& e : sink.events) {
    placement_reported = placement_reported || e.rfind("experts ", 0) == 0;
  }
  EXPECT_TRUE(placement_reported);
  const std::string a = plain.checkpoints.back().path, b = sink.checkpoints.back().path;
  EXPECT_TRUE(Read(a + "/model.safetensors") == Read(b + "/model.safetensors"));
}

// MPMoE in a job: the events say how the micro-batches were restored and
// count the traffic.
TEST_F(TrainingExecutorTest, MicroBatchedJobReportsItsRestore) {
  JobRun run = Run("micro_batched");
  run.spec.mutable_schedule()->set_micro_batches(2);
  FakeSink sink;
  ASSERT_TRUE(Executor()->Run(run, &sink).ok());
  int reported = 0;
  for (const std::string& e : sink.events) {
    if (e.rfind("micro-batches ", 0) != 0) continue;
    ++reported;
    EXPECT_NE(e.find("bytes offloaded"), std::string::npos) << e;
    EXPECT_NE(e.find("FLOPs recomputed"), std::string::npos) << e;
  }
  EXPECT_GE(reported, 1);
}

// A device that holds the non-expert training state and 3/4 of one layer's
// experts' (so the experts go to the host), and a host budget of two experts'
// training state (so the rest go to the SSD tier).
struct SsdBudgets {
  uint64_t device = 0, host = 0;
};

SsdBudgets MeasureSsdBudgets() {
  SsdBudgets b;
  auto model = train::TrainModel::Load(ModelDir());
  EXPECT_TRUE(model.ok()) << model.status();
  if (!model.ok()) return b;
  std::set<const train::Parameter*> experts;
  int64_t layer_experts = 0;
  for (const train::LayerParams& l : (*model)->layers()) {
    int64_t layer = 0;
    for (const train::MlpParams& e : l.ffn.experts) {
      for (const train::Parameter* w : {e.gate, e.up, e.down}) {
        experts.insert(w);
        layer += w->numel() * 20;  // weight, gradient, moments, fp32 master
      }
    }
    layer_experts = std::max(layer_experts, layer);
  }
  int64_t other = 0;
  for (const train::Parameter& p : (*model)->params()) {
    if (!experts.count(&p)) other += p.numel() * 20;
  }
  b.device = static_cast<uint64_t>(other + layer_experts * 3 / 4);
  b.host = static_cast<uint64_t>(train::Trainer::MinHostMemoryBytes(**model));
  return b;
}

// schedule.host_memory_bytes: past it the experts' training state goes to an
// SSD tier file in the job's directory; the job is bitwise the plain one, its
// events say host+ssd and why, and the file is gone when the job ends.
TEST_F(TrainingExecutorTest, SsdTierJobEqualsThePlainJobBitwise) {
  const SsdBudgets budgets = MeasureSsdBudgets();
  ASSERT_GT(budgets.host, 0u);
  FakeSink plain;
  ASSERT_TRUE(Executor()->Run(Run("plain_for_ssd"), &plain).ok());
  JobRun tiered = Run("ssd");
  tiered.spec.mutable_schedule()->set_offload_experts(true);
  tiered.spec.mutable_schedule()->set_host_memory_bytes(budgets.host);
  FakeSink sink;
  absl::Status st = Executor(nullptr, 0, budgets.device)->Run(tiered, &sink);
  ASSERT_TRUE(st.ok()) << st;
  std::string placement;
  for (const std::string& e : sink.events) {
    if (e.rfind("experts ", 0) == 0) placement = e;
  }
  EXPECT_EQ(placement.rfind("experts host+ssd: ", 0), 0u) << placement;
  EXPECT_NE(placement.find(tiered.job_dir + "/expert_training_state.bin"), std::string::npos)
      << placement;
  EXPECT_FALSE(FileExists(Env::Default(), tiered.job_dir + "/expert_training_state.bin"));
  ASSERT_FALSE(plain.checkpoints.empty());
  ASSERT_FALSE(sink.checkpoints.empty());
  const std::string a = plain.checkpoints.back().path, b = sink.checkpoints.back().path;
  EXPECT_TRUE(Read(a + "/model.safetensors") == Read(b + "/model.safetensors"));
}

TEST_F(TrainingExecutorTest, AHostBudgetIsValidated) {
  const SsdBudgets budgets = MeasureSsdBudgets();
  ASSERT_GT(budgets.host, 0u);
  JobRun run = Run("host_budget");
  run.spec.mutable_schedule()->set_host_memory_bytes(budgets.host);
  ExpectCode(Executor()->Validate(run), "invalid_spec", "schedule.host_memory_bytes");
  run.spec.mutable_schedule()->set_offload_experts(true);
  run.spec.mutable_schedule()->set_host_memory_bytes(budgets.host - 1);
  FakeSink sink;
  ExpectCode(Executor(nullptr, 0, budgets.device)->Run(run, &sink), "invalid_spec",
             "schedule.host_memory_bytes");
  EXPECT_TRUE(sink.progress.empty());
}

TEST_F(TrainingExecutorTest, ResumeRefusesACheckpointOfAnotherSpec) {
  JobRun run = Run("mismatch");
  FakeSink sink;
  sink.stop_after_checkpoints = 1;
  EXPECT_EQ(Executor()->Run(run, &sink).code(), absl::StatusCode::kCancelled);
  run.resume_from = sink.checkpoints[0];
  run.spec.mutable_hyperparameters()->set_learning_rate(5e-4);
  FakeSink again;
  ExpectCode(Executor()->Run(run, &again), "checkpoint_mismatch", "different spec");
}

TEST_F(TrainingExecutorTest, LoraJobSavesThePeftAdapterAndAServableMergedModel) {
  JobRun run = Run("lora");
  run.spec.set_scope(v1::TRAIN_SCOPE_LORA);
  run.spec.mutable_lora()->set_rank(4);
  run.spec.mutable_hyperparameters()->set_learning_rate(1e-2);
  FakeSink sink;
  ASSERT_TRUE(Executor()->Run(run, &sink).ok());
  const std::string dir = sink.checkpoints.back().path;
  const std::string adapter_config = Read(dir + "/adapter/adapter_config.json");
  EXPECT_NE(adapter_config.find("\"peft_type\": \"LORA\""), std::string::npos);
  EXPECT_NE(adapter_config.find("\"lora_alpha\": 8.0"), std::string::npos) << adapter_config;
  auto merged = train::TrainModel::Load(dir);
  ASSERT_TRUE(merged.ok()) << merged.status();
  auto base = train::TrainModel::Load(ModelDir());
  const train::Parameter* q = (*merged)->Find("model.layers.0.self_attn.q_proj.weight");
  ASSERT_NE(q, nullptr);
  EXPECT_NE(q->value, (*base)->Find("model.layers.0.self_attn.q_proj.weight")->value);
  EXPECT_EQ((*merged)->Find("model.layers.0.block_sparse_moe.gate.weight")->value,
            (*base)->Find("model.layers.0.block_sparse_moe.gate.weight")->value);
}

TEST_F(TrainingExecutorTest, AFullDiskOrAFailingDiskFailsTheJobWithItsCode) {
  {
    FaultInjectionEnv env(Env::Default());
    env.FailNth(FaultOp::kWrite, 1, ENOSPC, /*sticky=*/true);
    FakeSink sink;
    JobRun run = Run("disk_full");
    ExpectCode(Executor(&env)->Run(run, &sink), "disk_full", "No space left");
    EXPECT_TRUE(sink.checkpoints.empty());
    EXPECT_FALSE(FileExists(Env::Default(), run.job_dir + "/checkpoints/step-2"));
  }
  {
    FaultInjectionEnv env(Env::Default());
    env.FailNth(FaultOp::kSync, 1, EIO, /*sticky=*/true);
    FakeSink sink;
    ExpectCode(Executor(&env)->Run(Run("eio"), &sink), "checkpoint_write_failed", "");
    EXPECT_TRUE(sink.checkpoints.empty());
  }
}

TEST_F(TrainingExecutorTest, ATrainingStateOverTheMemoryLimitIsOutOfMemory) {
  FakeSink sink;
  ExpectCode(Executor(nullptr, 1 << 20)->Run(Run("oom"), &sink), "out_of_memory",
             "optimizer state");
  EXPECT_TRUE(sink.progress.empty());
}

// PREGATE: heads trained by distillation, written where the `pregate`
// prefetcher reads them, with their prediction quality reported.
TEST_F(TrainingExecutorTest, PregateJobWritesTrainedHeads) {
  JobRun run = Run("pregate");
  run.spec.set_scope(v1::TRAIN_SCOPE_PREGATE);
  run.spec.mutable_hyperparameters()->clear_learning_rate();
  run.spec.mutable_hyperparameters()->set_n_epochs(1);
  run.spec.mutable_hyperparameters()->clear_checkpoint_every_steps();  // once per epoch
  FakeSink sink;
  ASSERT_TRUE(Executor()->Run(run, &sink).ok());
  ASSERT_EQ(sink.checkpoints.size(), 1u);
  auto ckpt = models::Checkpoint::Open(sink.checkpoints[0].path);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  EXPECT_TRUE((*ckpt)->Get("model.layers.0.block_sparse_moe.pregate.weight").ok());
  EXPECT_NE(Read(sink.checkpoints[0].path + "/config.json").find("\"expertd_pregate\": true"),
            std::string::npos);
  bool reported = false;
  for (const std::string& e : sink.events) {
    reported |= e.find("trained pre-gate precision") != std::string::npos;
  }
  EXPECT_TRUE(reported);
  ASSERT_EQ(sink.progress.size(), 1u);
  EXPECT_GT(sink.progress[0].train_loss, 0.0);
}

// PREGATE checkpoints at the job's cadence (in distillation steps), stops
// between steps, and a resumed job restarts cleanly: it writes only the
// checkpoints not recorded yet and ends with bitwise the heads of an
// uninterrupted run.
TEST_F(TrainingExecutorTest, PregateJobCheckpointsAtItsCadenceAndRestartsBitwise) {
  auto pregate_run = [&](const std::string& id) {
    JobRun run = Run(id);
    run.spec.set_scope(v1::TRAIN_SCOPE_PREGATE);
    run.spec.mutable_hyperparameters()->clear_learning_rate();
    run.spec.mutable_hyperparameters()->set_n_epochs(1);
    run.spec.mutable_hyperparameters()->set_checkpoint_every_steps(50);  // of 200
    return run;
  };
  JobRun whole = pregate_run("pregate-whole");
  FakeSink uninterrupted;
  ASSERT_TRUE(Executor()->Run(whole, &uninterrupted).ok());
  ASSERT_EQ(uninterrupted.checkpoints.size(), 4u);
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(uninterrupted.checkpoints[i].step, 50 * (i + 1));
  EXPECT_EQ(uninterrupted.progress.size(), 4u);

  JobRun part = pregate_run("pregate-part");
  FakeSink first;
  first.stop_after_checkpoints = 2;
  const absl::Status stopped = Executor()->Run(part, &first);
  EXPECT_TRUE(absl::IsCancelled(stopped)) << stopped;
  ASSERT_EQ(first.checkpoints.size(), 2u);
  EXPECT_EQ(first.checkpoints[1].step, 100u);
  // The intermediate heads are a servable pre-gate checkpoint already.
  auto mid = models::Checkpoint::Open(first.checkpoints[1].path);
  ASSERT_TRUE(mid.ok()) << mid.status();
  EXPECT_TRUE((*mid)->Get("model.layers.0.block_sparse_moe.pregate.weight").ok());

  part.resume_from = first.checkpoints[1];
  FakeSink second;
  ASSERT_TRUE(Executor()->Run(part, &second).ok());
  ASSERT_EQ(second.checkpoints.size(), 2u);  // 150 and 200: 50 and 100 are recorded
  EXPECT_EQ(second.checkpoints[0].step, 150u);
  EXPECT_EQ(second.checkpoints[1].step, 200u);
  EXPECT_EQ(Read(second.checkpoints[1].path + "/model.safetensors"),
            Read(uninterrupted.checkpoints[3].path + "/model.safetensors"));
  EXPECT_EQ(Read(second.checkpoints[0].path + "/model.safetensors"),
            Read(uninterrupted.checkpoints[2].path + "/model.safetensors"));
  bool restarted = false;
  for (const std::string& e : second.events) {
    restarted |= e.find("restarts from step 0") != std::string::npos;
  }
  EXPECT_TRUE(restarted);
}

// Text and prompt/completion lines through the zoo model's own tokenizer; the
// fine-tuned directory is served by models::Checkpoint with its tokenizer
// files beside the weights.
TEST_F(TrainingExecutorTest, TextJobOnAModelWithATokenizer) {
  TrainingExecutorOptions o;
  o.model_dir = "tests/data/zoo_default";
  o.model_name = "zoo";
  o.clock = &clock_;
  auto executor = NewTrainingExecutor(o);
  ASSERT_TRUE(executor.ok()) << executor.status();
  JobRun run;
  run.job_id = "text";
  run.job_dir = TmpDir() + "/jobs/text";
  run.training_file_path = TmpDir() + "/data/text.jsonl";
  Write(run.training_file_path,
        "{\"text\": \"The quick brown fox jumps over the lazy dog.\"}\n"
        "{\"prompt\": \"Capital of France?\", \"completion\": \" Paris.\"}\n"
        "{\"text\": \"Experts route tokens.\"}\n");
  run.spec.mutable_hyperparameters()->set_batch_size(2);
  run.spec.mutable_hyperparameters()->set_max_seq_len(32);
  run.spec.mutable_hyperparameters()->set_learning_rate(1e-3);
  ASSERT_TRUE((*executor)->Validate(run).ok());
  FakeSink sink;
  ASSERT_TRUE((*executor)->Run(run, &sink).ok());
  ASSERT_EQ(sink.checkpoints.size(), 1u);
  EXPECT_EQ(sink.checkpoints[0].model_name, "zoo:ft-text");
  const std::string dir = sink.checkpoints[0].path;
  for (const char* f : {"tokenizer.json", "tokenizer_config.json", "generation_config.json"}) {
    EXPECT_EQ(Read(dir + "/" + f), Read(std::string("tests/data/zoo_default/") + f)) << f;
  }
  auto served = models::Checkpoint::Open(dir);
  ASSERT_TRUE(served.ok()) << served.status();
  auto source = models::Checkpoint::Open("tests/data/zoo_default");
  EXPECT_EQ((*served)->Names(), (*source)->Names());
}

TEST_F(TrainingExecutorTest, StopBeforeTheFirstStepIsCancelled) {
  FakeSink sink;
  sink.stop_after_checkpoints = 0;
  EXPECT_EQ(Executor()->Run(Run("stop"), &sink).code(), absl::StatusCode::kCancelled);
  EXPECT_TRUE(sink.progress.empty());
}

}  // namespace
}  // namespace expertd::server::jobs
