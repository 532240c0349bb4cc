// Gradient accumulation under expert offload. The trainer starts an offloaded
// expert's AdamW update during the last micro-batch's backward, as soon as
// the expert's gradient is final (provisional under clipping: kept when the
// clip coefficient is 1, else undone and redone clipped; a step after one
// that clipped defers its updates). With several micro-batches of different
// routing - the last one short, so some experts that earlier micro-batches
// used get no token in it - on a device that holds 3/4 of one layer's
// experts, the weights and AdamW state must be bitwise those of plain
// training: clipping off, never binding, always binding, and binding in the
// first steps only. The SSD tier (host budget of half a layer's experts) is
// held to the same, and so are the experts over 2 and 3 devices (each with
// that memory; the done callbacks come from several device threads at once).
#include <algorithm>
#include <cstdlib>
#include <map>
#include <ostream>
#include <string>
#include <vector>

#include <sys/stat.h>

#include "engine/train/trainer.h"
#include "gtest/gtest.h"
#include "tests/golden/golden_data.h"
#include "tests/golden/train_golden_data.h"

namespace expertd::golden {
namespace {

std::string TmpDir() { return getenv("TEST_TMPDIR") != nullptr ? getenv("TEST_TMPDIR") : "/tmp"; }

// Three micro-batches: the golden batch's two rows apart, then three tokens
// of the second row backwards (3 * top_k rows reach fewer experts than a
// layer has, on every fixture).
std::vector<train::TrainBatch> MicroBatches(const TrainGolden& g) {
  std::vector<train::TrainBatch> mbs;
  for (const std::vector<int32_t>& row : g.input_ids) {
    mbs.push_back({1, static_cast<int64_t>(row.size()), row, {}});
  }
  const std::vector<int32_t>& last = g.input_ids.back();
  mbs.push_back({1, 3, {last[5], last[3], last[1]}, {}});
  return mbs;
}

// What the model holds while training (fp32: weight, gradient, two moments:
// 16 bytes an element): the routed experts of its largest layer, the rest.
struct ModelBytes {
  int64_t layer_experts = 0, non_expert = 0;
};

ModelBytes Measure(const train::TrainModel& model) {
  ModelBytes b;
  std::map<std::string, int64_t> per_layer;
  for (const train::Parameter& p : model.params()) {
    const int64_t bytes = p.numel() * 16;
    const size_t experts = p.name.find(".experts.");
    if (experts == std::string::npos) {
      b.non_expert += bytes;
    } else {
      per_layer[p.name.substr(0, experts)] += bytes;
    }
  }
  for (const auto& [layer, bytes] : per_layer) b.layer_experts = std::max(b.layer_experts, bytes);
  return b;
}

struct Trained {
  std::vector<train::Parameter> params;
  std::vector<train::AdamWParamState> state;
  std::vector<train::StepReport> steps;
};

enum class Tier { kPlain, kHost, kSsd };

Trained Train(const std::string& arch, const TrainGolden& g, double clip, Tier tier, int steps,
              int devices = 1) {
  Trained t;
  auto model = train::TrainModel::Load(FixtureDir(arch));
  EXPECT_TRUE(model.ok()) << model.status();
  if (!model.ok()) return t;
  train::TrainOptions o;
  o.lr = g.lr;
  o.adamw.weight_decay = g.weight_decay;
  o.clip_norm = clip;
  o.threads = 2;
  o.total_steps = steps;
  const ModelBytes bytes = Measure(**model);
  const std::string ssd_dir = TmpDir() + "/accumulation_ssd_" + arch;
  if (tier != Tier::kPlain) {
    o.memory_schedule.offload_experts = true;
    o.memory_schedule.train_devices = devices;  // each device's memory as below
    o.memory_schedule.device_memory_bytes = bytes.non_expert + bytes.layer_experts * 3 / 4;
  }
  if (tier == Tier::kSsd) {
    mkdir(ssd_dir.c_str(), 0700);
    o.memory_schedule.host_memory_bytes = bytes.layer_experts / 2 + (64 << 10);
    o.memory_schedule.ssd_dir = ssd_dir;
  }
  {
    train::Trainer trainer(model->get(), o);
    const std::vector<train::TrainBatch> mbs = MicroBatches(g);
    for (int s = 0; s < steps; ++s) {
      absl::StatusOr<train::StepReport> r = trainer.Step(mbs);
      EXPECT_TRUE(r.ok()) << "step " << s << ": " << r.status();
      if (!r.ok()) return t;
      t.steps.push_back(*r);
    }
    EXPECT_TRUE(trainer.HoldExpertsOnHost().ok());
    t.state = trainer.optimizer().state();
  }  // the SSD tier removes its file
  if (tier == Tier::kSsd) {
    EXPECT_EQ(rmdir(ssd_dir.c_str()), 0) << "the SSD tier left its file";
  }
  t.params = (*model)->params();
  return t;
}

void ExpectBitwiseEqual(const Trained& plain, const Trained& off) {
  ASSERT_EQ(plain.params.size(), off.params.size());
  ASSERT_EQ(plain.state.size(), off.state.size());
  int64_t differing = 0;
  for (size_t i = 0; i < plain.params.size(); ++i) {
    const bool same = plain.params[i].value == off.params[i].value &&
                      plain.state[i].step == off.state[i].step &&
                      plain.state[i].m == off.state[i].m && plain.state[i].v == off.state[i].v;
    if (!same && differing++ < 5) ADD_FAILURE() << plain.params[i].name << " differs";
  }
  EXPECT_EQ(differing, 0);
  ASSERT_EQ(plain.steps.size(), off.steps.size());
  for (size_t s = 0; s < plain.steps.size(); ++s) {
    EXPECT_EQ(plain.steps[s].loss.total, off.steps[s].loss.total) << "step " << s;
    EXPECT_EQ(plain.steps[s].grad_norm_before_clip, off.steps[s].grad_norm_before_clip)
        << "step " << s;
    EXPECT_EQ(plain.steps[s].clip_coef, off.steps[s].clip_coef) << "step " << s;
  }
}

// Per step, what the per-expert optimizer must have done, from plain
// training's clip coefficients: a step tries early updates unless the one
// before it clipped; they stand when this step does not clip, else every one
// is redone. The SSD tier updates early only without clipping.
void ExpectEarlyUpdates(const Trained& plain, const Trained& off, double clip, Tier tier) {
  for (size_t s = 0; s < off.steps.size(); ++s) {
    SCOPED_TRACE("step " + std::to_string(s));
    const train::ScheduleReport& r = off.steps[s].memory_schedule;
    EXPECT_EQ(r.expert_placement, tier == Tier::kSsd ? "host+ssd" : "host");
    EXPECT_EQ(r.ssd_skipped_uses, 0);  // the tier's sequence was the step's real uses
    EXPECT_EQ(r.ssd_unplanned_pins, 0);
    EXPECT_LE(r.ssd_host_peak_experts, r.ssd_host_capacity_experts);  // the host budget held
    const bool clips = clip > 0 && plain.steps[s].clip_coef < 1.0f;
    const bool tries = tier == Tier::kHost
                           ? clip <= 0 || s == 0 || plain.steps[s - 1].clip_coef == 1.0f
                           : clip <= 0;
    EXPECT_EQ(r.early_expert_updates > 0, tries && !clips) << r.early_expert_updates;
    EXPECT_EQ(r.redone_expert_updates > 0, tries && clips) << r.redone_expert_updates;
  }
}

struct Case {
  std::string arch;
  Tier tier;
  int devices = 1;  // the experts over this many devices (host tier only)
};

void PrintTo(const Case& c, std::ostream* os) {
  *os << c.arch << (c.tier == Tier::kSsd ? " with the SSD tier" : " on the host tier");
  if (c.devices > 1) *os << " over " << c.devices << " devices";
}

class TrainOffloadAccumulationTest : public ::testing::TestWithParam<Case> {};

TEST_P(TrainOffloadAccumulationTest, EarlyExpertUpdatesAreBitwisePlain) {
  const Case& c = GetParam();
  auto golden = LoadTrainGolden(c.arch);
  ASSERT_TRUE(golden.ok()) << golden.status();
  constexpr int kSteps = 8;
  // Binding in the first steps only: the median of the unclipped norms.
  const Trained unclipped = Train(c.arch, *golden, 0.0, Tier::kPlain, kSteps);
  ASSERT_EQ(unclipped.steps.size(), static_cast<size_t>(kSteps));
  std::vector<float> norms;
  for (const train::StepReport& r : unclipped.steps) norms.push_back(r.grad_norm_before_clip);
  std::sort(norms.begin(), norms.end());
  const double mixed = norms[kSteps / 2];
  for (double clip : {0.0, 1e6, 1e-3, mixed}) {
    SCOPED_TRACE("clip_norm " + std::to_string(clip));
    const Trained plain = clip == 0.0 ? unclipped : Train(c.arch, *golden, clip, Tier::kPlain, kSteps);
    const Trained off = Train(c.arch, *golden, clip, c.tier, kSteps, c.devices);
    ASSERT_EQ(off.steps.size(), static_cast<size_t>(kSteps));
    ExpectBitwiseEqual(plain, off);
    ExpectEarlyUpdates(plain, off, clip, c.tier);
    if (clip == mixed) {  // the case covers a clipped step before an unclipped one and after
      int clipped = 0;
      for (const train::StepReport& r : plain.steps) clipped += r.clip_coef < 1.0f;
      EXPECT_GT(clipped, 0);
      EXPECT_LT(clipped, kSteps - 1);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Fixtures, TrainOffloadAccumulationTest,
    ::testing::Values(Case{"mixtral", Tier::kHost}, Case{"qwen2_moe_mixed", Tier::kHost},
                      Case{"deepseek_v3", Tier::kHost}, Case{"mixtral", Tier::kSsd},
                      Case{"deepseek_v3", Tier::kSsd}, Case{"mixtral", Tier::kHost, 2},
                      Case{"deepseek_v3", Tier::kHost, 3}),
    [](const ::testing::TestParamInfo<Case>& info) {
      return info.param.arch + (info.param.tier == Tier::kSsd ? "_ssd" : "_host") +
             (info.param.devices > 1 ? "_devices" + std::to_string(info.param.devices) : "");
    });

}  // namespace
}  // namespace expertd::golden
