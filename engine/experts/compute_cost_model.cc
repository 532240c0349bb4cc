#include "engine/experts/compute_cost_model.h"

#include <algorithm>

namespace expertd::engine {
namespace {

// Weight of a new measurement in the moving averages: recent enough to follow
// a machine whose load changes, smooth enough to ignore one noisy sample.
constexpr double kNewSampleWeight = 0.2;
// A correction outside this range means a broken sample, not a rate.
constexpr double kMinCorrection = 0.05, kMaxCorrection = 20;

double Blend(double average, double sample) {
  return (1 - kNewSampleWeight) * average + kNewSampleWeight * sample;
}

}  // namespace

const char* ExpertComputeModeName(ExpertComputeMode mode) {
  switch (mode) {
    case ExpertComputeMode::kDevice:
      return "device";
    case ExpertComputeMode::kHost:
      return "host";
    case ExpertComputeMode::kAuto:
      return "auto";
  }
  return "?";
}

bool ParseExpertComputeMode(absl::string_view name, ExpertComputeMode* mode) {
  for (ExpertComputeMode m :
       {ExpertComputeMode::kDevice, ExpertComputeMode::kHost, ExpertComputeMode::kAuto}) {
    if (name == ExpertComputeModeName(m)) {
      *mode = m;
      return true;
    }
  }
  return false;
}

LinearCost LinearCost::Fit(int64_t n1, double t1, int64_t n2, double t2) {
  LinearCost c;
  c.per_token_s = n2 > n1 ? std::max(0.0, (t2 - t1) / static_cast<double>(n2 - n1)) : 0;
  c.fixed_s = std::max(0.0, t1 - c.per_token_s * static_cast<double>(n1));
  return c;
}

ComputeCostModel::ComputeCostModel(ExpertComputeMode mode, ComputeRates rates,
                                   uint64_t expert_bytes, int64_t hidden)
    : mode_(mode), expert_bytes_(expert_bytes), hidden_(hidden), rates_(rates) {}

double ComputeCostModel::PageSeconds() const {
  return rates_.page_bytes_per_s > 0 ? static_cast<double>(expert_bytes_) / rates_.page_bytes_per_s
                                     : 0;
}

double ComputeCostModel::HostSeconds(int64_t tokens) const {
  const double activations = 2.0 * static_cast<double>(tokens * hidden_) * sizeof(float);
  const double move = rates_.page_bytes_per_s > 0 ? activations / rates_.page_bytes_per_s : 0;
  return rates_.host.At(tokens) * host_correction_ + move;
}

double ComputeCostModel::DeviceSeconds(int64_t tokens) const {
  return rates_.device.At(tokens) * device_correction_;
}

ComputePlan ComputeCostModel::Plan(absl::Span<const ExpertDemand> demands) const {
  absl::ReaderMutexLock lock(&mu_);
  ComputePlan plan;
  std::vector<ExpertDemand> missed;
  for (const ExpertDemand& d : demands) {
    if (d.resident) {
      plan.device_s += DeviceSeconds(d.tokens);
    } else {
      missed.push_back(d);
    }
  }
  std::sort(missed.begin(), missed.end(), [](const ExpertDemand& a, const ExpertDemand& b) {
    return a.tokens != b.tokens ? a.tokens < b.tokens : a.expert < b.expert;
  });
  for (const ExpertDemand& d : missed) {
    const double on_device = plan.device_s + PageSeconds() + DeviceSeconds(d.tokens);
    const double on_host = plan.host_s + HostSeconds(d.tokens);
    bool host = mode_ == ExpertComputeMode::kHost;
    if (mode_ == ExpertComputeMode::kAuto) {
      host = std::max(plan.device_s, on_host) < std::max(on_device, plan.host_s);
    }
    if (host) {
      plan.host_s = on_host;
      plan.host.push_back(d.expert);
    } else {
      plan.device_s = on_device;
    }
  }
  std::sort(plan.host.begin(), plan.host.end());
  return plan;
}

void ComputeCostModel::ObservePage(uint64_t bytes, double seconds) {
  if (bytes == 0 || seconds <= 0) return;
  absl::MutexLock lock(&mu_);
  const double rate = static_cast<double>(bytes) / seconds;
  rates_.page_bytes_per_s =
      rates_.page_bytes_per_s > 0 ? Blend(rates_.page_bytes_per_s, rate) : rate;
}

void ComputeCostModel::ObserveHost(int64_t tokens, double seconds) {
  absl::MutexLock lock(&mu_);
  const double predicted = rates_.host.At(tokens);
  if (predicted <= 0 || seconds <= 0) return;
  host_correction_ =
      std::clamp(Blend(host_correction_, seconds / predicted), kMinCorrection, kMaxCorrection);
}

void ComputeCostModel::ObserveDevice(int64_t tokens, double seconds) {
  absl::MutexLock lock(&mu_);
  const double predicted = rates_.device.At(tokens);
  if (predicted <= 0 || seconds <= 0) return;
  device_correction_ =
      std::clamp(Blend(device_correction_, seconds / predicted), kMinCorrection, kMaxCorrection);
}

ComputeRates ComputeCostModel::rates() const {
  absl::ReaderMutexLock lock(&mu_);
  ComputeRates r = rates_;
  r.host.fixed_s *= host_correction_;
  r.host.per_token_s *= host_correction_;
  r.device.fixed_s *= device_correction_;
  r.device.per_token_s *= device_correction_;
  return r;
}

}  // namespace expertd::engine
