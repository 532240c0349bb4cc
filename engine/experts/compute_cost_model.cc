#include "engine/experts/compute_cost_model.h"

#include <algorithm>

namespace expertd::engine {
namespace {

// Weight of a new measurement in the moving averages: recent enough to follow
// a machine whose load changes, smooth enough to ignore one noisy sample.
constexpr double kNewSampleWeight = 0.2;

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

ComputeCostModel::Points ComputeCostModel::PointsOf(const LinearCost& line) {
  Points p;
  p.small_s = line.At(static_cast<int64_t>(p.small_n));
  p.large_s = line.At(static_cast<int64_t>(p.large_n));
  return p;
}

LinearCost ComputeCostModel::Points::Line() const {
  LinearCost c;
  if (large_n > small_n) c.per_token_s = std::max(0.0, (large_s - small_s) / (large_n - small_n));
  c.fixed_s = std::max(0.0, small_s - c.per_token_s * small_n);
  return c;
}

void ComputeCostModel::Points::Observe(int64_t tokens, double seconds) {
  const double n = static_cast<double>(tokens);
  if (tokens <= kSmallJobTokens) {
    small_n = Blend(small_n, n);
    small_s = Blend(small_s, seconds);
  } else {
    large_n = Blend(large_n, n);
    large_s = Blend(large_s, seconds);
  }
}

ComputeCostModel::ComputeCostModel(ExpertComputeMode mode, ComputeRates rates,
                                   uint64_t expert_bytes, int64_t hidden, bool overlap)
    : mode_(mode),
      expert_bytes_(expert_bytes),
      hidden_(hidden),
      overlap_(overlap),
      page_bytes_per_s_(rates.page_bytes_per_s),
      host_(PointsOf(rates.host)),
      device_(PointsOf(rates.device)) {}

double ComputeCostModel::PageSeconds() const {
  return page_bytes_per_s_ > 0 ? static_cast<double>(expert_bytes_) / page_bytes_per_s_ : 0;
}

double ComputeCostModel::HostSeconds(int64_t tokens) const {
  const double activations = 2.0 * static_cast<double>(tokens * hidden_) * sizeof(float);
  const double move = page_bytes_per_s_ > 0 ? activations / page_bytes_per_s_ : 0;
  return host_.Line().At(tokens) + move;
}

double ComputeCostModel::DeviceSeconds(int64_t tokens) const {
  return device_.Line().At(tokens);
}

ComputePlan ComputeCostModel::Plan(absl::Span<const ExpertDemand> demands) const {
  absl::ReaderMutexLock lock(&mu_);
  ComputePlan plan;
  plan.overlap = overlap_;
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
  auto layer_s = [this](double device_s, double host_s) {
    return overlap_ ? std::max(device_s, host_s) : device_s + host_s;
  };
  for (const ExpertDemand& d : missed) {
    const double on_device = plan.device_s + PageSeconds() + DeviceSeconds(d.tokens);
    const double on_host = plan.host_s + HostSeconds(d.tokens);
    bool host = mode_ == ExpertComputeMode::kHost;
    if (mode_ == ExpertComputeMode::kAuto) {
      host = layer_s(plan.device_s, on_host) < layer_s(on_device, plan.host_s);
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
  page_bytes_per_s_ = page_bytes_per_s_ > 0 ? Blend(page_bytes_per_s_, rate) : rate;
}

void ComputeCostModel::ObserveHost(int64_t tokens, double seconds) {
  if (tokens <= 0 || seconds <= 0) return;
  absl::MutexLock lock(&mu_);
  host_.Observe(tokens, seconds);
}

void ComputeCostModel::ObserveDevice(int64_t tokens, double seconds) {
  if (tokens <= 0 || seconds <= 0) return;
  absl::MutexLock lock(&mu_);
  device_.Observe(tokens, seconds);
}

ComputeRates ComputeCostModel::rates() const {
  absl::ReaderMutexLock lock(&mu_);
  ComputeRates r;
  r.page_bytes_per_s = page_bytes_per_s_;
  r.host = host_.Line();
  r.device = device_.Line();
  return r;
}

}  // namespace expertd::engine
