#include "engine/train/moe_memory_model.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace expertd::train {

namespace {
constexpr int64_t kF = sizeof(float);
constexpr int64_t kI = sizeof(int32_t);
}  // namespace

int64_t SliceBegin(int64_t rows, int slices, int j) { return rows * j / slices; }

int64_t MaxSliceRows(const std::vector<int64_t>& rows_per_expert, int slices) {
  int64_t best = 0;
  for (int64_t r : rows_per_expert) {
    for (int j = 0; j < slices; ++j) {
      best = std::max(best, SliceBegin(r, slices, j + 1) - SliceBegin(r, slices, j));
    }
  }
  return best;
}

int64_t RoutingBytes(const MoeShape& s) {
  return s.tokens * s.experts * kF + s.tokens * s.top_k * (kI + kF) + 2 * s.tokens * s.top_k * kI;
}

int64_t RouterBackwardBytes(const MoeShape& s) {
  return s.tokens * s.top_k * kF + 2 * s.tokens * s.experts * kF;
}

int64_t ExpertForwardBytes(const MoeShape& s, int64_t rows) {
  return rows * (2 * s.hidden + 3 * s.ffn) * kF;
}

int64_t ExpertBackwardBytes(const MoeShape& s, int64_t rows) {
  return rows * (2 * s.hidden + 3 * s.ffn) * kF;
}

int64_t ExpertSliceBackwardBytes(const MoeShape& s, int64_t rows, bool pipelined) {
  if (!pipelined) return ExpertForwardBytes(s, rows) + ExpertBackwardBytes(s, rows);
  return 2 * ExpertForwardBytes(s, rows) + ExpertBackwardBytes(s, rows) +
         3 * rows * s.hidden * kF;  // a second dy and d(input) buffer, and dy's first
}

int64_t PredictMoePeakBytes(const MoeShape& s, const std::vector<int64_t>& rows_per_expert,
                            int slices, bool pipelined) {
  const int64_t fixed = RoutingBytes(s) + RouterBackwardBytes(s);
  if (slices <= 1) {
    int64_t saved = 0, largest = 0;
    for (int64_t r : rows_per_expert) {
      saved += ExpertForwardBytes(s, r);
      largest = std::max(largest, r);
    }
    return fixed + saved + ExpertBackwardBytes(s, largest);
  }
  // Backward of one slice: its restored forward plus its gradients.
  const int64_t r = MaxSliceRows(rows_per_expert, slices);
  return fixed + ExpertSliceBackwardBytes(s, r, pipelined);
}

absl::StatusOr<int> ChooseMoeChunks(const MoeShape& s, const std::vector<int64_t>& rows_per_expert,
                                    int micro_batches, int64_t available_bytes) {
  const int mb = std::max(1, micro_batches);
  int64_t max_rows = 0;
  for (int64_t r : rows_per_expert) max_rows = std::max(max_rows, r);
  // s'_max: rows of one slice that fit beside the routing state.
  const int64_t per_row = ExpertSliceBackwardBytes(s, 1, mb > 1);
  const int64_t room = available_bytes - RoutingBytes(s) - RouterBackwardBytes(s);
  const int64_t fit_rows = room > 0 ? room / per_row : 0;
  int64_t want = fit_rows > 0 ? (max_rows + fit_rows - 1) / fit_rows : 1 << 20;
  for (int c : {1, 2, 4, 8}) {
    if (c * mb < want && c != 8) continue;
    // The estimate is a lower bound (uneven slices round up): confirm with the model.
    for (int cc = c; cc <= 8; cc *= 2) {
      if (PredictMoePeakBytes(s, rows_per_expert, cc * mb, mb > 1) <= available_bytes) return cc;
    }
    break;
  }
  return absl::ResourceExhaustedError(
      absl::StrCat("MoE activations: the busiest expert's ", max_rows, " rows need ",
                   PredictMoePeakBytes(s, rows_per_expert, 8 * mb, mb > 1),
                   " bytes even in 8 chunks; ",
                   available_bytes, " bytes of device memory are free"));
}

}  // namespace expertd::train
