#include "engine/train/optimizer_worker.h"

#include <vector>

#include "gtest/gtest.h"

namespace expertd::train {
namespace {

// Updates run on the worker's thread in push order; Close waits for all of
// them and returns the first failure, later updates still running.
TEST(OptimizerWorkerTest, RunsInOrderAndReportsTheFirstFailure) {
  std::vector<size_t> ran;  // written by the worker's thread only, read after Close
  OptimizerWorker worker([&](size_t i) {
    ran.push_back(i);
    return i == 3 || i == 5 ? absl::InternalError("update " + std::to_string(i))
                            : absl::OkStatus();
  });
  for (size_t i = 0; i < 8; ++i) worker.Push(i);
  const absl::Status st = worker.Close();
  EXPECT_EQ(st.message(), "update 3");
  EXPECT_EQ(ran, (std::vector<size_t>{0, 1, 2, 3, 4, 5, 6, 7}));
}

TEST(OptimizerWorkerTest, ClosesWithNothingPushed) {
  OptimizerWorker worker([](size_t) { return absl::OkStatus(); });
  EXPECT_TRUE(worker.Close().ok());
}

}  // namespace
}  // namespace expertd::train
