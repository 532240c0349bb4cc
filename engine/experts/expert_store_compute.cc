// Missed experts computed on the host (--expert_compute): the plan per MoE
// layer (ComputeCostModel), the host jobs (the expert's host-tier copy, or a
// pack read, then the CPU kernels on a host pool), the rates the model is fed
// (a calibration at creation, then every page, host job and device expert).
#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "base/log.h"
#include "base/status_macros.h"
#include "engine/experts/expert_store.h"

namespace expertd::engine {
namespace {

double Seconds(int64_t ns) { return static_cast<double>(ns) * 1e-9; }

}  // namespace

absl::Status ExpertStore::InitCompute() {
  if (options_.compute == ExpertComputeMode::kDevice && !options_.calibrate_compute) {
    return absl::OkStatus();
  }
  host_compute_ = std::make_unique<HostExpertCompute>(options_.host_compute_threads,
                                                      backend_->matmul_activations());
  host_jobs_ = std::make_unique<TransferPool>(1);
  ASSIGN_OR_RETURN(const ComputeRates rates, Calibrate());
  // On the CPU backend the "device" is the host's own cores: nothing overlaps.
  cost_model_ = std::make_unique<ComputeCostModel>(
      options_.compute, rates, reader_->layout().expert_bytes, config_->hidden_size,
      /*overlap=*/!backend_->host_memory_is_device_memory());
  EXPERTD_LOG(Info, "expert compute calibrated")
      .With("compute", ExpertComputeModeName(options_.compute))
      .With("host_threads", host_compute_->threads())
      .With("page_gb_per_s", rates.page_bytes_per_s * 1e-9)
      .With("host_us_fixed", rates.host.fixed_s * 1e6)
      .With("host_us_per_token", rates.host.per_token_s * 1e6)
      .With("device_us_fixed", rates.device.fixed_s * 1e6)
      .With("device_us_per_token", rates.device.per_token_s * 1e6);
  return absl::OkStatus();
}

// Times one expert (the first MoE layer's expert 0) three ways: copied into a
// device slot (the page rate), its MLP on the device and on the host, each
// at 1 and calibration_tokens tokens (the linear costs). Best of a few runs:
// the machine may be shared, and the online refinement follows the load.
absl::StatusOr<ComputeRates> ExpertStore::Calibrate() {
  const PackLayout& l = reader_->layout();
  const ExpertKey key{l.moe_layers.front(), 0};
  AlignedBuffer host(slot_bytes_);
  if (host.empty()) return absl::ResourceExhaustedError("cannot allocate a calibration buffer");
  absl::Status read = reader_->ReadExpert(key, host.data());
  if (absl::IsDataLoss(read)) read = RepairFromSource(key, host.data(), read);
  RETURN_IF_ERROR(read);
  constexpr int kRuns = 3;
  ComputeRates rates;
  int64_t best = INT64_MAX;
  for (int i = 0; i < kRuns; ++i) {
    const int64_t start = clock_->NowNanos();
    RETURN_IF_ERROR(backend_->CopyToDevice(DeviceSlot(0), host.data(), l.expert_bytes));
    RETURN_IF_ERROR(backend_->Synchronize());
    best = std::min(best, clock_->NowNanos() - start);
  }
  if (best > 0) rates.page_bytes_per_s = static_cast<double>(l.expert_bytes) / Seconds(best);

  const int64_t n = std::max<int64_t>(2, options_.calibration_tokens);
  const int64_t hidden = l.gate.cols, inter = l.gate.rows;
  std::vector<float> x(n * hidden);
  for (size_t i = 0; i < x.size(); ++i) x[i] = 0.01f * std::sin(0.1f * static_cast<float>(i));
  std::vector<float> y(n * hidden);
  const uint64_t device_floats = static_cast<uint64_t>(n * (2 * hidden + 2 * inter));
  auto scratch = backend_->Allocate(device_floats * sizeof(float));
  if (!scratch.ok()) {
    return absl::ResourceExhaustedError(
        absl::StrCat("--expert_compute: calibrating needs ", device_floats * sizeof(float),
                     " bytes of device memory beyond the expert cache: ",
                     scratch.status().message()));
  }
  float* dx = static_cast<float*>(scratch->data());
  float* dgate = dx + n * hidden;
  float* dup = dgate + n * inter;
  float* dy = dup + n * inter;
  RETURN_IF_ERROR(backend_->CopyToDevice(dx, x.data(), x.size() * sizeof(float)));
  const ExpertWeights on_device = WeightsAt(0), on_host = WeightsIn(host.data());
  double device_s[2], host_s[2];
  const int64_t tokens[2] = {1, n};
  for (int k = 0; k < 2; ++k) {
    int64_t d = INT64_MAX, h = INT64_MAX;
    for (int i = 0; i < kRuns; ++i) {
      int64_t start = clock_->NowNanos();
      ExpertMlp(backend_, on_device, dx, tokens[k], dgate, dup, dy);
      RETURN_IF_ERROR(backend_->Synchronize());
      d = std::min(d, clock_->NowNanos() - start);
      start = clock_->NowNanos();
      host_compute_->Run(on_host, ExpertExtras{}, x.data(), tokens[k], y.data());
      h = std::min(h, clock_->NowNanos() - start);
    }
    device_s[k] = Seconds(d);
    host_s[k] = Seconds(h);
  }
  rates.device = LinearCost::Fit(1, device_s[0], n, device_s[1]);
  rates.host = LinearCost::Fit(1, host_s[0], n, host_s[1]);
  return rates;
}

std::vector<int32_t> ExpertStore::PlanHostCompute(int layer, absl::Span<const int32_t> experts,
                                                  absl::Span<const int64_t> tokens) {
  layer_start_ns_ = cost_model_ != nullptr ? clock_->NowNanos() : 0;
  layer_predicted_s_ = 0;
  layer_tokens_.clear();
  for (size_t i = 0; i < experts.size() && i < tokens.size(); ++i)
    layer_tokens_[experts[i]] = tokens[i];
  if (cost_model_ == nullptr || experts.size() != tokens.size()) return {};
  absl::MutexLock lock(&mu_);
  if (layer < 0 || layer >= static_cast<int>(counters_.size())) return {};
  std::vector<ExpertDemand> demands;
  for (size_t i = 0; i < experts.size(); ++i) {
    demands.push_back(
        ExpertDemand{experts[i], tokens[i], device_.count(ExpertKey{layer, experts[i]}) > 0});
  }
  ComputePlan plan = cost_model_->Plan(demands);
  layer_predicted_s_ = plan.predicted_s();
  if (host_compute_ == nullptr) plan.host.clear();
  ExpertLayerCounters& c = Counters(layer);
  c.requests += static_cast<int64_t>(plan.host.size());
  c.host_computes += static_cast<int64_t>(plan.host.size());
  for (int32_t e : plan.host) hotness_.Add(ExpertKey{layer, e}, demand_ticks_++);
  return plan.host;
}

void ExpertStore::StartHostCompute(int layer, int expert, const float* x, int64_t rows, float* y,
                                   const ExpertExtras& extras) {
  const ExpertKey key{layer, expert};
  host_jobs_pending_.push_back(
      host_jobs_->Submit(TransferPool::kDemand, [this, key, x, rows, y, extras] {
        return HostComputeJob(key, x, rows, y, extras);
      }));
}

absl::Status ExpertStore::FinishHostCompute(int layer) {
  absl::Status first;
  for (const auto& job : host_jobs_pending_) first.Update(job->Wait());
  host_jobs_pending_.clear();
  if (cost_model_ == nullptr) return first;
  const int64_t measured = clock_->NowNanos() - layer_start_ns_;
  absl::MutexLock lock(&mu_);
  if (layer >= 0 && layer < static_cast<int>(counters_.size())) {
    ExpertLayerCounters& c = Counters(layer);
    c.predicted_expert_ns += static_cast<int64_t>(layer_predicted_s_ * 1e9);
    c.measured_expert_ns += measured;
  }
  return first;
}

absl::Status ExpertStore::HostComputeJob(ExpertKey key, const float* x, int64_t rows, float* y,
                                         const ExpertExtras& extras) {
  const int64_t start = clock_->NowNanos();
  ASSIGN_OR_RETURN(const HostCopy copy, AcquireHostCopy(key));
  const int64_t computing = clock_->NowNanos();
  host_compute_->Run(WeightsIn(copy.ptr), extras, x, rows, y);
  const int64_t end = clock_->NowNanos();
  ReleaseHostCopy(key, copy, absl::OkStatus());
  cost_model_->ObserveHost(rows, Seconds(end - computing));
  absl::MutexLock lock(&mu_);
  Counters(key.layer).host_compute_ns += end - start;
  return absl::OkStatus();
}

absl::StatusOr<ExpertStore::HostCopy> ExpertStore::AcquireHostCopy(ExpertKey key) {
  HostCopy copy;
  {
    absl::MutexLock lock(&mu_);
    auto it = host_.find(key);
    if (it != host_.end() && it->second.ready()) {
      ++it->second.users;
      SyncHostPin(key, &it->second);
      host_policy_->Touch(key);
      copy.ptr = HostSlot(it->second.slot);
      copy.in_tier = true;
      return copy;
    }
    ++Counters(key.layer).disk_reads;
    if (it == host_.end() && host_slots_ > 0) {
      const int32_t slot = TakeHostSlot();
      if (slot >= 0) {
        HostEntry& h = host_[key];
        h.slot = slot;
        h.users = 1;
        host_policy_->Insert(key);
        host_policy_->Touch(key);
        SyncHostPin(key, &h);
        copy.ptr = HostSlot(slot);
        copy.in_tier = copy.filled = true;
      }
    }
  }
  if (copy.ptr == nullptr) {  // no room in the host tier (or none): this job's scratch
    if (host_scratch_.empty()) host_scratch_ = AlignedBuffer(slot_bytes_);
    if (host_scratch_.empty()) {
      return absl::ResourceExhaustedError(
          absl::StrCat("cannot allocate a host buffer of ", slot_bytes_, " bytes"));
    }
    copy.ptr = host_scratch_.data();
  }
  uint8_t* dst = const_cast<uint8_t*>(copy.ptr);
  absl::Status s = reader_->ReadExpert(key, dst);
  if (absl::IsDataLoss(s)) s = RepairFromSource(key, dst, s);
  if (!s.ok()) {
    ReleaseHostCopy(key, copy, s);
    return s;
  }
  absl::MutexLock lock(&mu_);
  Counters(key.layer).bytes_disk_to_host += slot_bytes_;
  if (copy.filled) {
    HostEntry& h = host_.at(key);
    h.state = HostSlotState::kReady;
    SyncHostPin(key, &h);
  }
  return copy;
}

void ExpertStore::ReleaseHostCopy(ExpertKey key, const HostCopy& copy,
                                  const absl::Status& status) {
  if (!copy.in_tier) return;
  absl::MutexLock lock(&mu_);
  auto it = host_.find(key);
  if (it == host_.end()) return;
  HostEntry& h = it->second;
  --h.users;
  if (!status.ok() && copy.filled) {  // drop the half-read slot
    if (h.pinned) host_policy_->Unpin(key);
    host_policy_->Erase(key);
    free_host_slots_.push_back(h.slot);
    host_.erase(it);
    return;
  }
  SyncHostPin(key, &h);
}

void ExpertStore::NoteAcquired(int layer, int expert) {
  (void)layer;
  (void)expert;
  if (cost_model_ != nullptr) acquired_ns_ = clock_->NowNanos();
}

void ExpertStore::NoteReleased(int layer, int expert) {
  (void)layer;
  if (cost_model_ == nullptr) return;
  auto it = layer_tokens_.find(expert);
  if (it == layer_tokens_.end()) return;
  cost_model_->ObserveDevice(it->second, Seconds(clock_->NowNanos() - acquired_ns_));
}

}  // namespace expertd::engine
