#include "engine/train/micro_batch_pipeline.h"

#include <atomic>
#include <set>

#include "gtest/gtest.h"

namespace expertd::train {
namespace {

using Choice = MicroBatchProfile::Choice;

TEST(MicroBatchProfileTest, MeasuresEveryCandidateThenKeepsTheFastest) {
  MicroBatchProfile profile;
  std::set<std::pair<int, int>> seen;
  for (int i = 0; i < 14; ++i) {
    const Choice c = profile.Choose(100, 0, ActivationRestore::kAuto);
    EXPECT_TRUE(seen.insert({c.micro_batches, static_cast<int>(c.restore)}).second);
    EXPECT_GE(c.micro_batches, 2);
    EXPECT_LE(c.micro_batches, 8);
    // A parabola in n with its minimum at 5; offload a little cheaper.
    const double seconds = (c.micro_batches - 5) * (c.micro_batches - 5) + 1.0 -
                           (c.restore == ActivationRestore::kOffload ? 0.5 : 0.0);
    profile.Record(100, c, seconds);
  }
  EXPECT_EQ(seen.size(), 14u);  // n in 2..8, both strategies
  const Choice best = profile.Choose(100, 0, ActivationRestore::kAuto);
  EXPECT_EQ(best.micro_batches, 5);
  EXPECT_EQ(best.restore, ActivationRestore::kOffload);
  // The same range (64..127 rows) reuses the profile; another range starts over.
  EXPECT_EQ(profile.Choose(127, 0, ActivationRestore::kAuto).micro_batches, 5);
  const Choice other = profile.Choose(128, 0, ActivationRestore::kAuto);
  EXPECT_EQ(other.micro_batches, 2);
  EXPECT_EQ(other.restore, ActivationRestore::kRecompute);
  // Fixed choices narrow the candidates.
  const Choice fixed_n = profile.Choose(100, 3, ActivationRestore::kAuto);
  EXPECT_EQ(fixed_n.micro_batches, 3);
  EXPECT_EQ(fixed_n.restore, ActivationRestore::kOffload);
  const Choice fixed_both = profile.Choose(100, 8, ActivationRestore::kRecompute);
  EXPECT_EQ(fixed_both.micro_batches, 8);
  EXPECT_EQ(fixed_both.restore, ActivationRestore::kRecompute);
}

TEST(MicroBatchProfileTest, RangesArePowersOfTwo) {
  EXPECT_EQ(MicroBatchProfile::Range(1), 0);
  EXPECT_EQ(MicroBatchProfile::Range(2), 1);
  EXPECT_EQ(MicroBatchProfile::Range(3), 1);
  EXPECT_EQ(MicroBatchProfile::Range(1024), 10);
}

TEST(RunThreeStagesTest, StagesRunInOrderPerItemAndAFailureStopsThePipeline) {
  for (bool threaded : {false, true}) {
    constexpr size_t kCount = 50;
    std::vector<int> stage_of(kCount, -1);  // the last stage done per item
    std::atomic<bool> order_ok{true};
    auto stage = [&](int k) {
      return [&, k](size_t t) {
        if (stage_of[t] != k - 1) order_ok = false;
        stage_of[t] = k;
        return absl::OkStatus();
      };
    };
    ASSERT_TRUE(RunThreeStages(kCount, threaded, {stage(0), stage(1), stage(2)}).ok());
    EXPECT_TRUE(order_ok);
    for (int k : stage_of) EXPECT_EQ(k, 2);

    std::atomic<int> combined{0};
    const absl::Status st =
        RunThreeStages(kCount, threaded,
                       {[](size_t) { return absl::OkStatus(); },
                        [](size_t t) {
                          return t == 7 ? absl::ResourceExhaustedError("item 7") : absl::OkStatus();
                        },
                        [&](size_t) {
                          ++combined;
                          return absl::OkStatus();
                        }});
    EXPECT_EQ(st.code(), absl::StatusCode::kResourceExhausted) << st;
    // Nothing after the failing item; threaded, the combine stage may stop
    // before it has caught up with items 0..6.
    if (threaded) {
      EXPECT_LE(combined.load(), 7);
    } else {
      EXPECT_EQ(combined.load(), 7);
    }
  }
}

}  // namespace
}  // namespace expertd::train
