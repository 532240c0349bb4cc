// Reads a fixture's train_golden.json (tests/data/fixtures/README.md): the
// batch, PyTorch's loss and gradients at the initial weights, and its 10
// AdamW steps. Test-only; every tolerance check derives from these numbers.
#ifndef EXPERTD_TESTS_GOLDEN_TRAIN_GOLDEN_DATA_H_
#define EXPERTD_TESTS_GOLDEN_TRAIN_GOLDEN_DATA_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace expertd::golden {

struct GoldenLoss {
  double total = 0, ce = 0, aux = 0;
};

struct GoldenStep {
  GoldenLoss loss;
  double grad_norm_before_clip = 0;
  std::vector<std::string> params_without_grad;
};

struct GoldenGrad {
  std::vector<int64_t> shape;
  std::vector<float> values;
};

struct TrainGolden {
  std::vector<std::vector<int32_t>> input_ids;  // [sequence][token]
  GoldenLoss loss;                              // at the initial weights
  std::map<std::string, GoldenGrad> grads;      // parameters with a gradient
  std::vector<std::string> params_without_grad;
  double global_l2_norm = 0;
  double lr = 0, weight_decay = 0, max_norm = 0;
  std::vector<GoldenStep> steps;
  GoldenLoss loss_after_final_step;
};

// The fixtures that carry a train_golden.json the engine can train.
std::vector<std::string> TrainFixtures();

absl::StatusOr<TrainGolden> LoadTrainGolden(const std::string& arch);

}  // namespace expertd::golden

#endif  // EXPERTD_TESTS_GOLDEN_TRAIN_GOLDEN_DATA_H_
