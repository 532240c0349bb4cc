#include "engine/train/step_access_plan.h"

#include <vector>

#include "gtest/gtest.h"

namespace expertd::train {
namespace {

// Two MoE layers of three experts (tier ids 0-2 and 3-5), two micro-batches.
StepAccessPlan TwoLayers() { return StepAccessPlan({{0, 1, 2}, {3, 4, 5}}, 2, {0, 1, 2, 3, 4, 5}); }

TEST(StepAccessPlanTest, PredictsEveryExpertOfEveryLayer) {
  const StepAccessPlan plan = TwoLayers();
  const std::vector<int> want = {0, 1, 2, 3, 4, 5, 3, 4, 5, 0, 1, 2,   // micro-batch 0
                                 0, 1, 2, 3, 4, 5, 3, 4, 5, 0, 1, 2,   // micro-batch 1
                                 0, 1, 2, 3, 4, 5};                    // optimizer
  EXPECT_EQ(plan.Sequence().ids(), want);
  EXPECT_EQ(plan.state_from(), 24u);
  EXPECT_EQ(plan.LayerOf(4), 1);
  EXPECT_EQ(plan.LayerOf(9), -1);
}

TEST(StepAccessPlanTest, RoutingReplacesTheLayersForwardAndBackward) {
  StepAccessPlan plan = TwoLayers();
  // Micro-batch 0: layer 0 routed to 1 only; its backward also touches the
  // idle 0 and 2 (zero gradients). Layer 1 routed to 3 and 5, no touches.
  EXPECT_EQ(plan.Route(0, 0, {1}, {1, 0, 2}), 0u);
  EXPECT_EQ(plan.Route(0, 1, {3, 5}, {3, 5}), 1u);
  const std::vector<int> want = {1, 3, 5, 3, 5, 1, 0, 2,              // micro-batch 0: routed
                                 0, 1, 2, 3, 4, 5, 3, 4, 5, 0, 1, 2,  // micro-batch 1: predicted
                                 0, 1, 2, 3, 4, 5};
  EXPECT_EQ(plan.Sequence().ids(), want);
  EXPECT_EQ(plan.state_from(), want.size() - 6);
}

TEST(StepAccessPlanTest, MergesConsecutiveUsesOfOneExpert) {
  StepAccessPlan plan({{0, 1}, {2, 3}}, 1, {0, 1, 2, 3});
  // Layer 1's forward ends with 3 and its backward starts with 3: one use.
  plan.Route(0, 0, {0, 1}, {0, 1});
  EXPECT_EQ(plan.Route(0, 1, {3}, {3, 2}), 2u);
  EXPECT_EQ(plan.Sequence().ids(), (std::vector<int>{0, 1, 3, 2, 0, 1, 0, 1, 2, 3}));
  // The tail: norm of expert 1 only, then the optimizer starting with 1:
  // merged, and the optimizer (needing the state) starts on that position.
  EXPECT_EQ(plan.SetTail({1}, {1, 2, 3}), 6u);
  EXPECT_EQ(plan.Sequence().ids(), (std::vector<int>{0, 1, 3, 2, 0, 1, 2, 3}));
  EXPECT_EQ(plan.state_from(), 5u);
}

// Per-expert updates during the last backward need the AdamW state there.
TEST(StepAccessPlanTest, StateFromTheLastBackward) {
  StepAccessPlan plan = TwoLayers();
  plan.NeedStateFromLastBackward();
  EXPECT_EQ(plan.state_from(), 18u);  // micro-batch 1: 12 + layer 0, 1 forward (6)
  plan.Route(1, 1, {4}, {4, 3, 5});
  // Layer 1's forward is expert 4 alone (position 15), and its backward
  // starts with 4 too: one use, which needs the state.
  EXPECT_EQ(plan.state_from(), 15u);
}

}  // namespace
}  // namespace expertd::train
