#include "engine/train/scheduled_feed_forward.h"

#include <cmath>
#include <cstdio>
#include <random>

#include "gtest/gtest.h"

namespace expertd::train {
namespace {

constexpr int64_t kN = 48, kH = 16, kF = 24, kE = 4, kK = 2;

Parameter Random(const std::string& name, std::vector<int64_t> shape, std::mt19937* rng,
                 float scale) {
  Parameter p;
  p.name = name;
  p.shape = shape;
  std::normal_distribution<float> d(0.0f, scale);
  p.value.resize(shape[0] * shape[1]);
  for (float& v : p.value) v = d(*rng);
  return p;
}

// A MoE block whose router sends every token to expert 0 first when `skewed`.
struct Block {
  std::vector<Parameter> params;
  FeedForwardParams ffn;

  explicit Block(bool skewed) {
    std::mt19937 rng(7);
    params.reserve(1 + 3 * kE);
    params.push_back(Random("model.layers.0.mlp.gate.weight", {kE, kH}, &rng, 0.3f));
    if (skewed) {
      for (int64_t c = 0; c < kH; ++c) params[0].value[c] = 0.0f;  // expert 0: logit 0
    }
    for (int e = 0; e < kE; ++e) {
      const std::string pre = "model.layers.0.mlp.experts." + std::to_string(e) + ".";
      params.push_back(Random(pre + "gate_proj.weight", {kF, kH}, &rng, 0.2f));
      params.push_back(Random(pre + "up_proj.weight", {kF, kH}, &rng, 0.2f));
      params.push_back(Random(pre + "down_proj.weight", {kH, kF}, &rng, 0.2f));
    }
    ffn.moe = true;
    ffn.router = &params[0];
    ffn.top_k = kK;
    ffn.norm_topk_prob = true;
    for (int e = 0; e < kE; ++e) {
      ffn.experts.push_back({&params[1 + 3 * e], &params[2 + 3 * e], &params[3 + 3 * e]});
    }
  }
};

std::vector<float> Input(bool skewed) {
  std::mt19937 rng(11);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> x(kN * kH);
  for (float& v : x) v = d(rng);
  if (skewed) {  // every row's logits for experts 1..3 are negative: expert 0 wins
    for (int64_t r = 0; r < kN; ++r) x[r * kH] = 0.0f;
  }
  return x;
}

struct Result {
  absl::Status status;
  std::vector<float> y, dx;
  std::vector<std::vector<float>> grads;
  ScheduleReport report;
  int64_t peak = 0;
};

Result RunBlock(FeedForwardExecutor* ex, bool skewed, ScheduledFeedForwardExecutor* sched = nullptr,
                DeviceMemoryTracker* device = nullptr) {
  Block b(skewed);
  const std::vector<float> x = Input(skewed);
  Result r;
  r.y.resize(kN * kH);
  r.dx.assign(kN * kH, 0.0f);
  std::vector<float> dy(kN * kH);
  for (size_t i = 0; i < dy.size(); ++i) dy[i] = std::sin(0.37f * i);
  {
    FeedForwardActivations a;
    r.status = ex->Forward(b.ffn, x.data(), kN, kH, &a, r.y.data(), nullptr);
    if (r.status.ok()) {
      r.status = ex->Backward(b.ffn, x.data(), a, dy.data(), {}, kN, kH, r.dx.data(), nullptr);
    }
  }
  for (Parameter& p : b.params) r.grads.push_back(p.has_grad ? p.grad : std::vector<float>{});
  if (sched != nullptr) sched->TakeStats(&r.report);
  if (device != nullptr) r.peak = device->peak();
  return r;
}

double MaxRel(const std::vector<float>& a, const std::vector<float>& b) {
  double diff = 0, ref = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, std::fabs(double{a[i]} - b[i]));
    ref = std::max(ref, std::fabs(double{b[i]}));
  }
  return ref == 0 ? diff : diff / ref;
}

Result RunScheduled(const TrainSchedule& s, bool offload, bool skewed) {
  DeviceMemoryTracker device(s.device_memory_bytes);
  ScheduledFeedForwardExecutor ex(s, &device, nullptr);
  ex.set_offload(offload);
  Result r = RunBlock(&ex, skewed, &ex, &device);
  EXPECT_EQ(device.in_use(), 0) << "every reservation is released after backward";
  return r;
}

// Several devices run the experts resident or offloaded (bitwise one device
// either way), not sliced by micro-batches: that fails, naming the combination.
TEST(ScheduledFeedForwardTest, SeveralDevicesOffloadAndRefuseMicroBatches) {
  InMemoryFeedForwardExecutor plain;
  const Result ref = RunBlock(&plain, false);
  TrainSchedule s;
  s.train_devices = 2;
  Result r;
  {
    DeviceMemoryTracker device(0);
    ScheduledFeedForwardExecutor ex(s, &device, nullptr);
    ex.set_offload(true);
    r = RunBlock(&ex, false, &ex, &device);
    // What stays is the cache of device 0's share of the hottest quarter.
    EXPECT_EQ(device.in_use(), ex.device_group()->cache(0).bytes());
  }
  ASSERT_TRUE(r.status.ok()) << r.status;
  EXPECT_EQ(r.y, ref.y);
  EXPECT_EQ(r.dx, ref.dx);
  EXPECT_EQ(r.grads, ref.grads);
  EXPECT_EQ(r.report.placed_upload_bytes, r.report.measured_placed_upload_bytes);
  EXPECT_EQ(r.report.uploaded_bytes, r.report.measured_placed_upload_bytes);
  s.micro_batches = 2;
  r = RunScheduled(s, /*offload=*/false, false);
  EXPECT_EQ(r.status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(r.status.message().find("train_devices=2 combined with micro-batches"),
            std::string::npos)
      << r.status;
  s.micro_batches = 1;
  EXPECT_TRUE(RunScheduled(s, /*offload=*/false, false).status.ok());
}

TEST(ScheduledFeedForwardTest, OffloadIsBitwisePlain) {
  InMemoryFeedForwardExecutor plain;
  const Result ref = RunBlock(&plain, false);
  TrainSchedule s;
  s.offload_experts = true;
  // 68000: two expert slots in forward, one (weights and gradient) in backward.
  for (int64_t budget : {int64_t{0}, int64_t{68000}}) {
    s.device_memory_bytes = budget;
    const Result r = RunScheduled(s, /*offload=*/true, false);
    ASSERT_TRUE(r.status.ok()) << r.status;
    EXPECT_EQ(r.y, ref.y);
    EXPECT_EQ(r.dx, ref.dx);
    EXPECT_EQ(r.grads, ref.grads);
    EXPECT_EQ(r.report.uploaded_bytes, 2 * kE * 3 * kF * kH * 4 + kE * 3 * kF * kH * 4);
    if (budget > 0) EXPECT_LE(r.peak, budget);
  }
}

TEST(ScheduledFeedForwardTest, OneSlotWhenTwoDoNotFitAndANamedErrorWhenNoneDoes) {
  InMemoryFeedForwardExecutor plain;
  const Result ref = RunBlock(&plain, false);
  TrainSchedule s;
  s.offload_experts = true;
  s.moe_chunks = 2;
  // Activations of 2 chunks take ~10 KB; one expert slot with gradients 9216 bytes.
  s.device_memory_bytes = 32000;
  Result r = RunScheduled(s, true, false);
  ASSERT_TRUE(r.status.ok()) << r.status;
  EXPECT_EQ(r.y, ref.y);
  EXPECT_LE(r.peak, s.device_memory_bytes);
  s.device_memory_bytes = 12000;
  r = RunScheduled(s, true, false);
  EXPECT_EQ(r.status.code(), absl::StatusCode::kResourceExhausted) << r.status;
}

TEST(ScheduledFeedForwardTest, ChunksAndMicroBatchesKeepOutputsBitwiseAndGradsClose) {
  InMemoryFeedForwardExecutor plain;
  const Result ref = RunBlock(&plain, false);
  for (int chunks : {1, 2, 4}) {
    for (int mb : {1, 2, 3}) {
      TrainSchedule s;
      s.moe_chunks = chunks;
      s.micro_batches = mb;
      const Result r = RunScheduled(s, false, false);
      ASSERT_TRUE(r.status.ok()) << r.status;
      EXPECT_EQ(r.y, ref.y) << chunks << "x" << mb;
      EXPECT_EQ(r.dx, ref.dx) << chunks << "x" << mb;
      for (size_t i = 0; i < ref.grads.size(); ++i) {
        EXPECT_LT(MaxRel(r.grads[i], ref.grads[i]), 1e-6) << i << " " << chunks << "x" << mb;
      }
      EXPECT_EQ(r.report.recomputed_flops > 0, chunks * mb > 1);
    }
  }
}

// MPMoE: n micro-batches pipelined in forward and backward, each restore
// strategy. Outputs and input gradients bitwise plain; weight gradients
// within 1e-6 (slices add partial sums) and bitwise equal across strategies.
TEST(ScheduledFeedForwardTest, MicroBatchRestoreStrategiesAgree) {
  InMemoryFeedForwardExecutor plain;
  const Result ref = RunBlock(&plain, false);
  for (int mb = 2; mb <= 8; ++mb) {
    std::vector<std::vector<float>> recomputed_grads;
    for (ActivationRestore restore : {ActivationRestore::kRecompute, ActivationRestore::kOffload}) {
      TrainSchedule s;
      s.micro_batches = mb;
      s.activation_restore = restore;
      const Result r = RunScheduled(s, false, false);
      const std::string what = std::to_string(mb) + " " + ActivationRestoreName(restore);
      ASSERT_TRUE(r.status.ok()) << r.status << what;
      EXPECT_EQ(r.y, ref.y) << what;
      EXPECT_EQ(r.dx, ref.dx) << what;
      for (size_t i = 0; i < ref.grads.size(); ++i) {
        EXPECT_LT(MaxRel(r.grads[i], ref.grads[i]), 1e-6) << i << " " << what;
      }
      ASSERT_EQ(r.report.activation_restore.size(), 1u);
      EXPECT_EQ(r.report.activation_restore[0], ActivationRestoreName(restore));
      if (restore == ActivationRestore::kRecompute) {
        // Every routed row's forward once more: 6 * H * F FLOPs a row.
        EXPECT_EQ(r.report.recomputed_flops, 6 * kN * kK * kH * kF) << what;
        EXPECT_EQ(r.report.offloaded_activation_bytes, 0) << what;
        recomputed_grads = r.grads;
      } else {
        // gate, up, act (F) and out (H) of every routed row, there and back.
        EXPECT_EQ(r.report.offloaded_activation_bytes, kN * kK * (3 * kF + kH) * 4) << what;
        EXPECT_EQ(r.report.restored_activation_bytes, r.report.offloaded_activation_bytes);
        EXPECT_EQ(r.report.recomputed_flops, 0) << what;
        EXPECT_EQ(r.grads, recomputed_grads) << what;
      }
    }
  }
}

// Activation memory falls about 1/n with n micro-batches (two reused buffers
// per stage boundary whatever n), and the model predicts it exactly.
TEST(ScheduledFeedForwardTest, ActivationMemoryFallsWithMicroBatches) {
  std::vector<double> measured;
  for (int mb : {1, 2, 4, 8}) {
    TrainSchedule s;
    s.micro_batches = mb;
    s.activation_restore = ActivationRestore::kOffload;
    const Result r = RunScheduled(s, false, false);
    ASSERT_TRUE(r.status.ok()) << r.status;
    EXPECT_EQ(r.report.measured_peak_activation_bytes, r.report.predicted_peak_activation_bytes)
        << mb;
    measured.push_back(r.report.measured_peak_activation_bytes);
    std::printf("micro_batches=%d: peak activation %lld bytes\n", mb,
                static_cast<long long>(r.report.measured_peak_activation_bytes));
  }
  for (size_t i = 1; i < measured.size(); ++i) EXPECT_LT(measured[i], measured[i - 1]);
}

// ES-MoE over a device group: bitwise one device's outputs and gradients,
// with more devices than experts too, and with chunks; micro-batches do not
// combine with it.
TEST(ScheduledFeedForwardTest, DeviceGroupIsBitwiseOneDevice) {
  for (bool skewed : {false, true}) {
    InMemoryFeedForwardExecutor plain;
    const Result ref = RunBlock(&plain, skewed);
    for (int devices : {2, 3, 5}) {
      TrainSchedule s;
      s.train_devices = devices;
      const Result r = RunScheduled(s, false, skewed);
      ASSERT_TRUE(r.status.ok()) << r.status;
      EXPECT_EQ(r.y, ref.y) << devices;
      EXPECT_EQ(r.dx, ref.dx) << devices;
      EXPECT_EQ(r.grads, ref.grads) << devices;
      ASSERT_EQ(r.report.device_imbalance.size(), 1u);
      EXPECT_GE(r.report.device_imbalance[0], 1.0);
      EXPECT_LE(r.report.device_imbalance[0], devices);
      EXPECT_EQ(r.report.pinned_experts[0], 0);  // a first step has nothing to pin
      EXPECT_GT(r.report.placed_upload_bytes, 0);
      EXPECT_EQ(r.report.measured_peak_activation_bytes,
                r.report.predicted_peak_activation_bytes);
    }
  }
  // MemFine's chunks on every device: bitwise the single-device chunked run.
  for (int chunks : {2, 4}) {
    TrainSchedule one;
    one.moe_chunks = chunks;
    const Result ref = RunScheduled(one, false, true);
    ASSERT_TRUE(ref.status.ok()) << ref.status;
    TrainSchedule s = one;
    s.train_devices = 3;
    const Result r = RunScheduled(s, false, true);
    ASSERT_TRUE(r.status.ok()) << r.status;
    EXPECT_EQ(r.y, ref.y) << chunks;
    EXPECT_EQ(r.dx, ref.dx) << chunks;
    EXPECT_EQ(r.grads, ref.grads) << chunks;
    EXPECT_EQ(r.report.recomputed_flops, ref.report.recomputed_flops) << chunks;
    EXPECT_EQ(r.report.measured_peak_activation_bytes, r.report.predicted_peak_activation_bytes);
  }
  TrainSchedule s;
  s.train_devices = 2;
  s.micro_batches = 2;
  EXPECT_EQ(RunScheduled(s, false, false).status.code(), absl::StatusCode::kFailedPrecondition);
}

TEST(ScheduledFeedForwardTest, SkewedRoutingFailsUnchunkedAndFitsAtTheChosenChunks) {
  const MoeShape shape{kN, kH, kF, kE, kK};
  // The skewed router sends all kN rows to expert 0.
  std::vector<int64_t> rows = {kN, kN / 3, kN / 3, kN - 2 * (kN / 3)};
  const int64_t c1 = PredictMoePeakBytes(shape, rows, 1);
  const int64_t c4 = PredictMoePeakBytes(shape, rows, 4);
  ASSERT_LT(c4, c1);
  TrainSchedule s;
  s.device_memory_bytes = (c1 + c4) / 2;
  s.moe_chunks = 1;
  Result r = RunScheduled(s, false, true);
  ASSERT_EQ(r.status.code(), absl::StatusCode::kResourceExhausted) << r.status;
  EXPECT_NE(r.status.message().find("--moe_chunks"), std::string::npos) << r.status;

  s.moe_chunks = 0;  // MemFine chooses c
  r = RunScheduled(s, false, true);
  ASSERT_TRUE(r.status.ok()) << r.status;
  ASSERT_EQ(r.report.moe_chunks.size(), 1u);
  EXPECT_GT(r.report.moe_chunks[0], 1);
  EXPECT_LE(r.peak, s.device_memory_bytes);
  // The memory model against the buffers the layer really held.
  const double predicted = r.report.predicted_peak_activation_bytes;
  const double measured = r.report.measured_peak_activation_bytes;
  EXPECT_GT(measured, 0);
  EXPECT_LT(std::fabs(measured - predicted) / predicted, 0.10) << measured << " vs " << predicted;
  std::printf("skewed: c=%d measured %.0f predicted %.0f bytes\n", r.report.moe_chunks[0], measured,
              predicted);
  InMemoryFeedForwardExecutor plain;
  const Result ref = RunBlock(&plain, true);
  EXPECT_EQ(r.y, ref.y);
}

TEST(MoeMemoryModelTest, ChunksSnapToPowersOfTwoAndFailPastEight) {
  const MoeShape shape{kN, kH, kF, kE, kK};
  const std::vector<int64_t> rows = {kN, 16, 16, 16};
  for (int want : {1, 2, 4, 8}) {
    const int64_t budget = PredictMoePeakBytes(shape, rows, want);
    absl::StatusOr<int> c = ChooseMoeChunks(shape, rows, 1, budget);
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_LE(*c, want);
    EXPECT_LE(PredictMoePeakBytes(shape, rows, *c), budget);
  }
  EXPECT_EQ(
      ChooseMoeChunks(shape, rows, 1, PredictMoePeakBytes(shape, rows, 8) - 1).status().code(),
      absl::StatusCode::kResourceExhausted);
}

}  // namespace
}  // namespace expertd::train
