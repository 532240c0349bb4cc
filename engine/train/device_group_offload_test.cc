// Offloaded experts over a device group, step after step: every device runs
// its placed experts through its own slots and keeps its pinned ones cached
// between steps, counted on its own memory; the host weights change between
// steps (as AdamW changes them) and the cached copies follow; the outputs,
// input gradients and weight gradients stay bitwise those of one device, and
// what the placement models the devices to move is what they moved.
#include <cmath>
#include <random>
#include <set>
#include <string>

#include "engine/train/device_group_experts.h"
#include "engine/train/expert_placement.h"
#include "engine/train/expert_uploader.h"
#include "engine/train/scheduled_feed_forward.h"
#include "gtest/gtest.h"

namespace expertd::train {
namespace {

constexpr int64_t kN = 40, kH = 16, kF = 24, kE = 8, kK = 2;

Parameter Random(const std::string& name, std::vector<int64_t> shape, std::mt19937* rng) {
  Parameter p;
  p.name = name;
  p.shape = shape;
  std::normal_distribution<float> d(0.0f, 0.3f);
  p.value.resize(shape[0] * shape[1]);
  for (float& v : p.value) v = d(*rng);
  return p;
}

struct Block {
  std::vector<Parameter> params;
  FeedForwardParams ffn;

  Block() {
    std::mt19937 rng(5);
    params.reserve(1 + 3 * kE);
    params.push_back(Random("model.layers.0.mlp.gate.weight", {kE, kH}, &rng));
    for (int e = 0; e < kE; ++e) {
      const std::string pre = "model.layers.0.mlp.experts." + std::to_string(e) + ".";
      params.push_back(Random(pre + "gate_proj.weight", {kF, kH}, &rng));
      params.push_back(Random(pre + "up_proj.weight", {kF, kH}, &rng));
      params.push_back(Random(pre + "down_proj.weight", {kH, kF}, &rng));
    }
    ffn.moe = true;
    ffn.router = &params[0];
    ffn.top_k = kK;
    ffn.norm_topk_prob = true;
    for (int e = 0; e < kE; ++e) {
      ffn.experts.push_back({&params[1 + 3 * e], &params[2 + 3 * e], &params[3 + 3 * e]});
    }
  }

  // What an optimizer step does to the host weights: a deterministic change
  // of every weight with a gradient; the gradients go.
  void Update() {
    for (Parameter& p : params) {
      if (!p.has_grad) continue;
      for (size_t i = 0; i < p.value.size(); ++i) p.value[i] -= 0.05f * p.grad[i];
      p.ClearGrad();
    }
  }
};

std::vector<float> Input(int step) {
  std::mt19937 rng(100 + step);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> x(kN * kH);
  for (float& v : x) v = d(rng);
  return x;
}

struct StepResult {
  absl::Status status;
  std::vector<float> y, dx;
  std::vector<std::vector<float>> grads;
  std::vector<int64_t> rows;  // tokens per expert
};

StepResult RunStep(FeedForwardExecutor* ex, Block* b, int step) {
  const std::vector<float> x = Input(step);
  StepResult r;
  r.y.resize(kN * kH);
  r.dx.assign(kN * kH, 0.0f);
  std::vector<float> dy(kN * kH);
  for (size_t i = 0; i < dy.size(); ++i) dy[i] = std::cos(0.21f * i + step);
  FeedForwardActivations a;
  r.status = ex->Forward(b->ffn, x.data(), kN, kH, &a, r.y.data(), nullptr);
  if (!r.status.ok()) return r;
  for (const auto& rows : a.expert_rows) r.rows.push_back(static_cast<int64_t>(rows.size()));
  r.status = ex->Backward(b->ffn, x.data(), a, dy.data(), {}, kN, kH, r.dx.data(), nullptr);
  for (const Parameter& p : b->params)
    r.grads.push_back(p.has_grad ? p.grad : std::vector<float>{});
  return r;
}

int64_t SlotBytes() {  // one expert's weights and gradient
  return (2 * kF * kH + kH * kF) * 4 * 2;
}

// Several steps on 2 and 3 devices with a device smaller than the layer's
// experts: bitwise one device each step, the pins cached on the device that
// ran them and counted there, modelled bytes == measured bytes.
TEST(DeviceGroupOffloadTest, PinnedExpertsStayOnTheirDeviceAndTheBitsAreOneDevices) {
  constexpr int kSteps = 5;
  for (int devices : {2, 3}) {
    SCOPED_TRACE(std::to_string(devices) + " devices");
    Block plain_block, block;
    InMemoryFeedForwardExecutor plain;
    TrainSchedule s;
    s.train_devices = devices;
    s.offload_experts = true;
    // Two slots and the cached experts fit (at worst all on one device: the
    // pinned quarter and this step's hottest quarter); the layer's experts do not.
    s.device_memory_bytes = (2 + 2 * (kE / 4)) * SlotBytes() + SlotBytes() / 2;
    ASSERT_LT(s.device_memory_bytes, kE * SlotBytes());
    DeviceMemoryTracker first(0);  // device 0 also holds the activations: unlimited here
    ScheduledFeedForwardExecutor ex(s, &first, nullptr);
    ex.set_offload(true);
    std::vector<int64_t> previous_rows;
    int stale_refreshes_seen = 0;
    for (int step = 0; step < kSteps; ++step) {
      SCOPED_TRACE("step " + std::to_string(step));
      const StepResult ref = RunStep(&plain, &plain_block, step);
      ASSERT_TRUE(ref.status.ok()) << ref.status;
      const StepResult r = RunStep(&ex, &block, step);
      ASSERT_TRUE(r.status.ok()) << r.status;
      EXPECT_EQ(r.y, ref.y);
      EXPECT_EQ(r.dx, ref.dx);
      EXPECT_EQ(r.grads, ref.grads);
      ScheduleReport report;
      ex.TakeStats(&report);
      EXPECT_EQ(report.placed_upload_bytes, report.measured_placed_upload_bytes);
      EXPECT_EQ(report.uploaded_bytes, report.measured_placed_upload_bytes);
      EXPECT_GT(report.measured_placed_upload_bytes, 0);
      ASSERT_EQ(report.pinned_experts.size(), 1u);
      // Pinned: last step's hottest quarter, where it has tokens again.
      int expect_pinned = 0;
      if (!previous_rows.empty()) {
        const std::vector<bool> hot = HottestQuarter(previous_rows);
        for (int e = 0; e < kE; ++e) expect_pinned += hot[e] && r.rows[e] > 0;
      }
      EXPECT_EQ(report.pinned_experts[0], expect_pinned);
      stale_refreshes_seen += expect_pinned > 0;
      // Between steps: this step's hottest quarter is cached, each expert on
      // one device, and each device's memory holds exactly its cache.
      const std::vector<bool> hot = HottestQuarter(r.rows);
      ASSERT_EQ(report.device_cached_experts.size(), static_cast<size_t>(devices));
      ASSERT_EQ(report.device_peak_bytes.size(), static_cast<size_t>(devices));
      int cached = 0;
      for (int d = 0; d < devices; ++d) {
        const DeviceGroupExperts& group = *ex.device_group();
        cached += group.cache(d).size();
        EXPECT_EQ(report.device_cached_experts[d], group.cache(d).size());
        EXPECT_EQ(group.device_memory(d)->in_use(), group.cache(d).bytes()) << "device " << d;
        if (d > 0) {
          EXPECT_LE(report.device_peak_bytes[d], s.device_memory_bytes) << "device " << d;
        }
      }
      int expect_cached = 0;
      for (int e = 0; e < kE; ++e) expect_cached += hot[e];
      EXPECT_EQ(cached, expect_cached);
      EXPECT_GT(cached, 0);
      previous_rows = r.rows;
      // The optimizer step: the host weights change, the copies are stale.
      plain_block.Update();
      block.Update();
      ex.MarkExpertWeightsChanged();
    }
    EXPECT_GT(stale_refreshes_seen, 0) << "no step used a cached (refreshed) expert";
    ex.set_offload(false);  // back to resident: the caches are emptied
    for (int d = 0; d < devices; ++d) {
      EXPECT_EQ(ex.device_group()->cache(d).size(), 0);
      EXPECT_EQ(ex.device_group()->device_memory(d)->in_use(), 0);
    }
  }
}

// A device that cannot hold its experts fails the step, naming it.
TEST(DeviceGroupOffloadTest, ADeviceTooSmallForItsSlotsIsNamed) {
  Block block;
  TrainSchedule s;
  s.train_devices = 2;
  s.offload_experts = true;
  s.device_memory_bytes = SlotBytes() / 4;  // devices 1..: not even one expert's weights
  DeviceMemoryTracker first(0);
  ScheduledFeedForwardExecutor ex(s, &first, nullptr);
  ex.set_offload(true);
  const StepResult r = RunStep(&ex, &block, 0);
  EXPECT_EQ(r.status.code(), absl::StatusCode::kResourceExhausted) << r.status;
  EXPECT_NE(r.status.message().find("training device 1"), std::string::npos) << r.status;
  EXPECT_NE(r.status.message().find("model.layers.0.mlp.experts."), std::string::npos) << r.status;
  // Nothing leaks: what device 0 still holds is its cached share.
  EXPECT_EQ(first.in_use(), ex.device_group()->cache(0).bytes());
}

}  // namespace
}  // namespace expertd::train
