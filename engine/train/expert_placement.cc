#include "engine/train/expert_placement.h"

#include <algorithm>
#include <numeric>

#include "absl/base/internal/raw_logging.h"

namespace expertd::train {

double ExpertPlacement::makespan() const {
  return load.empty() ? 0.0 : *std::max_element(load.begin(), load.end());
}

double ExpertPlacement::imbalance() const {
  if (load.empty()) return 1.0;
  const double mean = std::accumulate(load.begin(), load.end(), 0.0) / load.size();
  return mean > 0 ? makespan() / mean : 1.0;
}

ExpertPlacement PlaceLongestFirst(const std::vector<double>& cost, int devices,
                                  const std::vector<int>& fixed) {
  ABSL_RAW_CHECK(devices >= 1, "devices must be >= 1");
  ABSL_RAW_CHECK(fixed.empty() || fixed.size() == cost.size(), "fixed: one entry per job");
  ExpertPlacement p;
  p.device.assign(cost.size(), -1);
  p.pinned.assign(cost.size(), false);
  p.load.assign(devices, 0.0);
  std::vector<int> free;
  for (size_t j = 0; j < cost.size(); ++j) {
    const int d = fixed.empty() ? -1 : fixed[j];
    ABSL_RAW_CHECK(d >= -1 && d < devices, "fixed device out of range");
    if (d < 0) {
      free.push_back(static_cast<int>(j));
      continue;
    }
    p.device[j] = d;
    p.pinned[j] = true;
    p.load[d] += cost[j];
  }
  std::stable_sort(free.begin(), free.end(), [&](int a, int b) { return cost[a] > cost[b]; });
  for (int j : free) {
    const int d = static_cast<int>(std::min_element(p.load.begin(), p.load.end()) - p.load.begin());
    p.device[j] = d;
    p.load[d] += cost[j];
  }
  return p;
}

std::vector<bool> HottestQuarter(const std::vector<int64_t>& previous_rows) {
  std::vector<int> order(previous_rows.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int a, int b) { return previous_rows[a] > previous_rows[b]; });
  std::vector<bool> hot(previous_rows.size(), false);
  const size_t count = previous_rows.size() / 4;
  for (size_t i = 0; i < count && previous_rows[order[i]] > 0; ++i) hot[order[i]] = true;
  return hot;
}

ExpertPlacer::ExpertPlacer(int devices, PlacementCostModel model)
    : devices_(devices), model_(model) {
  ABSL_RAW_CHECK(devices >= 1, "devices must be >= 1");
}

ExpertPlacement ExpertPlacer::Place(const std::vector<int64_t>& rows,
                                    const std::vector<int64_t>& expert_bytes,
                                    const std::vector<int64_t>& flops_per_row) {
  std::vector<ExpertTransfer> transfer(expert_bytes.size());
  for (size_t e = 0; e < expert_bytes.size(); ++e) {
    transfer[e] = {expert_bytes[e], 0, expert_bytes[e]};
  }
  return Place(rows, transfer, flops_per_row);
}

ExpertPlacement ExpertPlacer::Place(const std::vector<int64_t>& rows,
                                    const std::vector<ExpertTransfer>& transfer,
                                    const std::vector<int64_t>& flops_per_row) {
  ABSL_RAW_CHECK(rows.size() == transfer.size() && rows.size() == flops_per_row.size(),
                 "one entry per expert");
  const bool has_previous = previous_rows_.size() == rows.size();
  const std::vector<bool> hot =
      has_previous ? HottestQuarter(previous_rows_) : std::vector<bool>(rows.size(), false);
  const std::vector<bool> kept = HottestQuarter(rows);
  std::vector<double> cost(rows.size());
  std::vector<int64_t> bytes(rows.size(), 0);
  std::vector<int> fixed(rows.size(), -1);
  for (size_t e = 0; e < rows.size(); ++e) {
    if (rows[e] == 0) continue;  // nothing to upload or compute
    if (hot[e]) {
      fixed[e] = previous_device_[e];
      bytes[e] = transfer[e].pinned;
    } else {
      bytes[e] = kept[e] ? transfer[e].kept : transfer[e].slots;
    }
    cost[e] = static_cast<double>(rows[e]) * flops_per_row[e] / model_.flops_per_second +
              static_cast<double>(bytes[e]) / model_.upload_bytes_per_second;
  }
  ExpertPlacement p = PlaceLongestFirst(cost, devices_, fixed);
  p.kept = kept;
  for (int64_t b : bytes) p.transfer_bytes += b;
  previous_rows_ = rows;
  previous_device_ = p.device;
  return p;
}

}  // namespace expertd::train
