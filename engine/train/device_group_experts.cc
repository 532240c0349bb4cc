#include "engine/train/device_group_experts.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "engine/parallel/in_process_collectives.h"
#include "engine/train/expert_feed.h"
#include "engine/train/expert_uploader.h"
#include "engine/train/moe_memory_model.h"

namespace expertd::train {

namespace {

using engine::parallel::Collectives;

// Where each expert's rows start in a buffer packed by expert.
std::vector<int64_t> PackedOffsets(const FeedForwardActivations& a) {
  std::vector<int64_t> offset(a.expert_rows.size() + 1, 0);
  for (size_t e = 0; e < a.expert_rows.size(); ++e) {
    offset[e + 1] = offset[e] + static_cast<int64_t>(a.expert_rows[e].size());
  }
  return offset;
}

double MaxOverMean(const std::vector<double>& v) {
  const double mean = std::accumulate(v.begin(), v.end(), 0.0) / v.size();
  return mean > 0 ? *std::max_element(v.begin(), v.end()) / mean : 1.0;
}

// Device 0's copy of `src` (n floats) on every device, in `dst`.
absl::Status BroadcastFromFirst(const float* src, int64_t n, int rank, Collectives* c,
                                std::vector<float>* dst) {
  dst->resize(n);
  if (rank == 0) std::memcpy(dst->data(), src, n * sizeof(float));
  return c->Broadcast(dst->data(), n * static_cast<int64_t>(sizeof(float)), 0);
}

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// The experts device `rank` runs: placed there and with rows, in index order.
std::vector<int> ExpertsOf(int rank, const std::vector<int>& device,
                           const std::vector<int64_t>& rows) {
  std::vector<int> mine;
  for (size_t e = 0; e < device.size(); ++e) {
    if (device[e] == rank && rows[e] > 0) mine.push_back(static_cast<int>(e));
  }
  return mine;
}

// A device's failure to hold its experts names the device.
absl::Status OnDevice(int rank, absl::Status st) {
  if (!absl::IsResourceExhausted(st) || st.message().find("training device") == 0) return st;
  return absl::ResourceExhaustedError(absl::StrCat("training device ", rank, ": ", st.message()));
}

}  // namespace

DeviceGroupExperts::DeviceGroupExperts(int devices, PlacementCostModel model,
                                       DeviceGroupMemory memory)
    : threads_(devices), model_(model), trace_(memory.trace) {
  for (int d = 0; d < devices; ++d) {
    DeviceMemoryTracker* tracker = d == 0 ? memory.first_device : nullptr;
    if (tracker == nullptr) {
      own_trackers_.push_back(
          std::make_unique<DeviceMemoryTracker>(d == 0 ? 0 : memory.device_bytes));
      tracker = own_trackers_.back().get();
    }
    trackers_.push_back(tracker);
    caches_.push_back(
        std::make_unique<DeviceExpertCache>(tracker, absl::StrCat("training device ", d)));
  }
}

void DeviceGroupExperts::set_offload(bool offload) {
  offload_ = offload;
  if (!offload) DropCachedExperts();
}

void DeviceGroupExperts::DropCachedExperts() {
  for (auto& c : caches_) c->Clear();
}

void DeviceGroupExperts::MarkCachedExpertsStale() {
  for (auto& c : caches_) c->MarkStale();
}

void DeviceGroupExperts::TakeMoved(int64_t* bytes, double* seconds) {
  *bytes += moved_bytes_;
  *seconds += moved_seconds_;
  moved_bytes_ = 0;
  moved_seconds_ = 0;
}

absl::Status DeviceGroupExperts::RunGroup(
    const std::function<absl::Status(int, Collectives*)>& fn) {
  auto group = engine::parallel::InProcessGroup::Create(devices());
  std::vector<std::unique_ptr<Collectives>> ends;
  for (int r = 0; r < devices(); ++r) ends.push_back(group->Join(r));
  const std::vector<absl::Status> status = threads_.Run([&](int rank) {
    absl::Status s = OnDevice(rank, fn(rank, ends[rank].get()));
    if (!s.ok()) ends[rank]->Abort(s);  // releases the peers waiting in a collective
    return s;
  });
  absl::Status first;
  for (const absl::Status& s : status) {
    if (s.ok()) continue;
    if (first.ok() || (absl::IsAborted(first) && !absl::IsAborted(s))) first = s;
  }
  return first;
}

absl::Status DeviceGroupExperts::Forward(const FeedForwardParams& p, const MoeShape& s, int layer,
                                         const float* x, FeedForwardActivations* a, float* y) {
  const int64_t h = s.hidden, k = s.top_k;
  const int slices = a->expert_slices;
  const std::vector<int64_t> offset = PackedOffsets(*a);
  std::vector<int64_t> rows(s.experts), flops(s.experts);
  std::vector<ExpertTransfer> transfer(s.experts);
  for (int64_t e = 0; e < s.experts; ++e) {
    const MlpParams& w = p.experts[e];
    rows[e] = offset[e + 1] - offset[e];
    flops[e] = 18 * h * w.width();  // forward 6*H*F per row, backward twice that
    const int64_t weights = ExpertSlotBytes(w, false), grads = ExpertSlotBytes(w, true) - weights;
    if (!offload_) {  // resident: nothing moves; the model's choice as if offloaded
      transfer[e] = {weights, 0, weights};
      continue;
    }
    int64_t pinned = weights + grads;  // not cached yet: uploaded into the cache
    for (auto& c : caches_) {
      if (c->Find(layer, e) != nullptr) pinned = c->LoadBytes(layer, e, w) + grads;
    }
    transfer[e] = {2 * weights + grads, pinned, weights + grads};
  }
  auto placer = placers_.try_emplace(layer, devices(), model_).first;
  placer->second.set_model(model_);
  const ExpertPlacement placement = placer->second.Place(rows, transfer, flops);
  placement_[layer] = placement;
  // What the device keeps from the last step and will use now stays; the
  // rest makes room before this step's uploads.
  for (int d = 0; d < devices(); ++d) {
    caches_[d]->Retain(layer,
                       [&](int e) { return placement.pinned[e] && placement.device[e] == d; });
  }
  a->expert_inputs.assign(s.experts, {});
  a->expert_acts.assign(s.experts, {});
  std::vector<double> busy(devices(), 0.0), moved_seconds(devices(), 0.0);
  std::vector<int64_t> moved(devices(), 0);
  std::vector<std::vector<float>> outs(devices());
  RETURN_IF_ERROR(RunGroup([&](int rank, Collectives* c) -> absl::Status {
    std::vector<float> input;
    RETURN_IF_ERROR(BroadcastFromFirst(x, s.tokens * h, rank, c, &input));
    std::vector<float>& out = outs[rank];
    out.assign(offset.back() * h, 0.0f);
    const std::vector<int> mine = ExpertsOf(rank, placement.device, rows);
    if (offload_) {  // the kept experts into the device's cache first, then the slots
      for (int e : mine) {
        if (!placement.pinned[e] && !placement.kept[e]) continue;
        const auto start = std::chrono::steady_clock::now();
        ASSIGN_OR_RETURN(const int64_t bytes, caches_[rank]->Load(layer, e, p.experts[e], trace_));
        moved[rank] += bytes;
        moved_seconds[rank] += SecondsSince(start);
      }
    }
    ExpertFeed feed(p, mine, offload_, /*with_grads=*/false,
                    {trackers_[rank], trace_, nullptr, caches_[rank].get(), layer});
    std::vector<float> slice_input;  // sliced: one reused buffer per device
    MlpActivations slice_acts;
    for (int e : mine) {
      ASSIGN_OR_RETURN(const MlpParams w, feed.Get(e));
      for (int j = 0; j < slices; ++j) {
        const int64_t begin = SliceBegin(rows[e], slices, j);
        const int64_t m = SliceBegin(rows[e], slices, j + 1) - begin;
        if (m == 0) continue;
        std::vector<float>& xe = slices == 1 ? a->expert_inputs[e] : slice_input;
        MlpActivations& acts = slices == 1 ? a->expert_acts[e] : slice_acts;
        xe.resize(m * h);
        for (int64_t i = 0; i < m; ++i) {
          std::memcpy(&xe[i * h], &input[a->expert_rows[e][begin + i] * h], h * sizeof(float));
        }
        const auto start = std::chrono::steady_clock::now();
        MlpForward(w, xe.data(), m, h, &acts, nullptr);
        busy[rank] += SecondsSince(start);
        std::memcpy(&out[(offset[e] + begin) * h], acts.out.data(), m * h * sizeof(float));
      }
    }
    feed.Finish();
    moved[rank] += feed.uploaded_bytes();
    moved_seconds[rank] += feed.upload_seconds();
    return c->AllReduceSum(out.data(), static_cast<int64_t>(out.size()));
  }));
  // Device 0 combines, experts in index order per token (as on one device).
  const std::vector<float>& out = outs[0];
  for (int64_t e = 0; e < s.experts; ++e) {
    for (int64_t i = 0; i < rows[e]; ++i) {
      const int64_t row = a->expert_rows[e][i];
      const float w = a->topk_weight[row * k + a->expert_slots[e][i]];
      const float* o = &out[(offset[e] + i) * h];
      float* yr = y + row * h;
      for (int64_t c = 0; c < h; ++c) yr[c] += o[c] * w;
    }
  }
  DevicePlacementReport& r = reports_[layer];
  r = DevicePlacementReport();
  r.imbalance = placement.imbalance();
  r.measured_imbalance = MaxOverMean(busy);
  r.flops_per_second = model_.flops_per_second;
  r.placed_upload_bytes = placement.transfer_bytes;
  r.placed_upload_seconds = placement.transfer_bytes / model_.upload_bytes_per_second;
  for (int d = 0; d < devices(); ++d) {
    r.measured_upload_bytes += moved[d];
    r.measured_upload_seconds += moved_seconds[d];
  }
  moved_bytes_ += r.measured_upload_bytes;
  moved_seconds_ += r.measured_upload_seconds;
  double forward_flops = 0;  // a third of the forward + backward FLOPs the placement costs
  for (int64_t e = 0; e < s.experts; ++e) forward_flops += rows[e] * (flops[e] / 3.0);
  const double busy_seconds = std::accumulate(busy.begin(), busy.end(), 0.0);
  if (forward_flops > 0 && busy_seconds > 0) {
    const double rate = forward_flops / busy_seconds;
    model_.flops_per_second = rate_measured_ ? 0.5 * (model_.flops_per_second + rate) : rate;
    rate_measured_ = true;
  }
  r.experts_per_device.assign(devices(), 0);
  for (int64_t e = 0; e < s.experts; ++e) {
    if (rows[e] == 0) continue;
    ++r.experts_per_device[placement.device[e]];
    if (placement.pinned[e]) ++r.pinned_experts;
  }
  return absl::OkStatus();
}

absl::Status DeviceGroupExperts::Backward(const FeedForwardParams& p, const MoeShape& s, int layer,
                                          const float* x, const FeedForwardActivations& a,
                                          const float* dy, std::vector<float>* dweight, float* dx,
                                          int64_t* recomputed_flops,
                                          const std::function<void(const MlpParams&)>& on_done) {
  auto it = placement_.find(layer);
  if (it == placement_.end()) {
    return absl::FailedPreconditionError("expert backward before the layer's forward");
  }
  const ExpertPlacement& placement = it->second;
  const int64_t h = s.hidden, k = s.top_k;
  const int slices = a.expert_slices;
  const std::vector<int64_t> offset = PackedOffsets(a);
  std::vector<int64_t> rows(s.experts);
  for (int64_t e = 0; e < s.experts; ++e) rows[e] = offset[e + 1] - offset[e];
  std::vector<std::vector<float>> dxs(devices()), dws(devices());
  std::vector<int64_t> flops(devices(), 0), moved(devices(), 0);
  std::vector<double> moved_seconds(devices(), 0.0);
  const absl::Status status = RunGroup([&](int rank, Collectives* c) -> absl::Status {
    std::vector<float> grad, input;
    RETURN_IF_ERROR(BroadcastFromFirst(dy, s.tokens * h, rank, c, &grad));
    if (slices > 1) RETURN_IF_ERROR(BroadcastFromFirst(x, s.tokens * h, rank, c, &input));
    std::vector<float>& dxe = dxs[rank];
    std::vector<float>& dw = dws[rank];
    dxe.assign(offset.back() * h, 0.0f);
    dw.assign(s.tokens * k, 0.0f);
    std::vector<float> dout, slice_input;  // reused across slices
    MlpActivations slice_acts;
    const std::vector<int> mine = ExpertsOf(rank, placement.device, rows);
    ExpertFeed feed(p, mine, offload_, /*with_grads=*/true,
                    {trackers_[rank], trace_, nullptr, caches_[rank].get(), layer}, on_done);
    for (int e : mine) {
      const std::vector<int32_t>& rows_e = a.expert_rows[e];
      ASSIGN_OR_RETURN(const MlpParams w, feed.Get(e));
      for (int j = 0; j < slices; ++j) {
        const int64_t begin = SliceBegin(rows[e], slices, j);
        const int64_t m = SliceBegin(rows[e], slices, j + 1) - begin;
        if (m == 0) continue;
        if (slices > 1) {  // MemFine: the slice's forward, recomputed
          slice_input.resize(m * h);
          for (int64_t i = 0; i < m; ++i) {
            std::memcpy(&slice_input[i * h], &input[rows_e[begin + i] * h], h * sizeof(float));
          }
          MlpForward(w, slice_input.data(), m, h, &slice_acts, nullptr);
          flops[rank] += 6 * m * h * s.ffn;
        }
        const float* xe = slices > 1 ? slice_input.data() : a.expert_inputs[e].data();
        const MlpActivations& acts = slices > 1 ? slice_acts : a.expert_acts[e];
        dout.resize(m * h);
        for (int64_t i = 0; i < m; ++i) {
          const int64_t slot = rows_e[begin + i] * k + a.expert_slots[e][begin + i];
          const float wt = a.topk_weight[slot];
          const float* dyr = &grad[rows_e[begin + i] * h];
          float sum = 0.0f;
          for (int64_t c = 0; c < h; ++c) {
            dout[i * h + c] = dyr[c] * wt;
            sum += dyr[c] * acts.out[i * h + c];
          }
          dw[slot] = sum;
        }
        MlpBackward(w, xe, acts, dout.data(), h, &dxe[(offset[e] + begin) * h], nullptr);
      }
    }
    feed.Finish();
    moved[rank] = feed.uploaded_bytes();
    moved_seconds[rank] = feed.upload_seconds();
    RETURN_IF_ERROR(c->AllReduceSum(dxe.data(), static_cast<int64_t>(dxe.size())));
    return c->AllReduceSum(dw.data(), static_cast<int64_t>(dw.size()));
  });
  // Between steps each device keeps this step's hottest quarter of its experts.
  for (int d = 0; d < devices(); ++d) {
    caches_[d]->Retain(layer, [&](int e) { return placement.kept[e] && placement.device[e] == d; });
  }
  RETURN_IF_ERROR(status);
  DevicePlacementReport& r = reports_[layer];
  for (int d = 0; d < devices(); ++d) {
    r.measured_upload_bytes += moved[d];
    r.measured_upload_seconds += moved_seconds[d];
    moved_bytes_ += moved[d];
    moved_seconds_ += moved_seconds[d];
  }
  for (int64_t f : flops) *recomputed_flops += f;
  *dweight = std::move(dws[0]);
  const std::vector<float>& dxe = dxs[0];
  for (int64_t e = 0; e < s.experts; ++e) {
    for (int64_t i = 0; i < offset[e + 1] - offset[e]; ++i) {
      float* dxr = dx + a.expert_rows[e][i] * h;
      const float* d = &dxe[(offset[e] + i) * h];
      for (int64_t c = 0; c < h; ++c) dxr[c] += d[c];
    }
  }
  return absl::OkStatus();
}

}  // namespace expertd::train
