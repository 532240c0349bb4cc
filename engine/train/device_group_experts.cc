#include "engine/train/device_group_experts.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <numeric>

#include "base/status_macros.h"
#include "engine/parallel/in_process_collectives.h"
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

}  // namespace

DeviceGroupExperts::DeviceGroupExperts(int devices, PlacementCostModel model)
    : threads_(devices), model_(model) {}

absl::Status DeviceGroupExperts::RunGroup(
    const std::function<absl::Status(int, Collectives*)>& fn) {
  auto group = engine::parallel::InProcessGroup::Create(devices());
  std::vector<std::unique_ptr<Collectives>> ends;
  for (int r = 0; r < devices(); ++r) ends.push_back(group->Join(r));
  const std::vector<absl::Status> status = threads_.Run([&](int rank) {
    absl::Status s = fn(rank, ends[rank].get());
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
  std::vector<int64_t> rows(s.experts), bytes(s.experts), flops(s.experts);
  for (int64_t e = 0; e < s.experts; ++e) {
    const MlpParams& w = p.experts[e];
    rows[e] = offset[e + 1] - offset[e];
    bytes[e] = static_cast<int64_t>(
        (w.gate->value.size() + w.up->value.size() + w.down->value.size()) * sizeof(float));
    flops[e] = 18 * h * w.width();  // forward 6*H*F per row, backward twice that
  }
  auto placer = placers_.try_emplace(layer, devices(), model_).first;
  placer->second.set_model(model_);
  const ExpertPlacement placement = placer->second.Place(rows, bytes, flops);
  placement_[layer] = placement.device;
  a->expert_inputs.assign(s.experts, {});
  a->expert_acts.assign(s.experts, {});
  std::vector<double> busy(devices(), 0.0);
  std::vector<std::vector<float>> outs(devices());
  RETURN_IF_ERROR(RunGroup([&](int rank, Collectives* c) -> absl::Status {
    std::vector<float> input;
    RETURN_IF_ERROR(BroadcastFromFirst(x, s.tokens * h, rank, c, &input));
    std::vector<float>& out = outs[rank];
    out.assign(offset.back() * h, 0.0f);
    const auto start = std::chrono::steady_clock::now();
    std::vector<float> slice_input;  // sliced: one reused buffer per device
    MlpActivations slice_acts;
    for (int64_t e = 0; e < s.experts; ++e) {
      if (placement.device[e] != rank || rows[e] == 0) continue;
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
        MlpForward(p.experts[e], xe.data(), m, h, &acts, nullptr);
        std::memcpy(&out[(offset[e] + begin) * h], acts.out.data(), m * h * sizeof(float));
      }
    }
    busy[rank] = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
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
    if (placement.pinned[e]) {
      ++r.pinned_experts;
    } else {
      r.placed_upload_bytes += bytes[e];
    }
  }
  return absl::OkStatus();
}

absl::Status DeviceGroupExperts::Backward(const FeedForwardParams& p, const MoeShape& s, int layer,
                                          const float* x, const FeedForwardActivations& a,
                                          const float* dy, std::vector<float>* dweight, float* dx,
                                          int64_t* recomputed_flops) {
  auto it = placement_.find(layer);
  if (it == placement_.end()) {
    return absl::FailedPreconditionError("expert backward before the layer's forward");
  }
  const std::vector<int>& device = it->second;
  const int64_t h = s.hidden, k = s.top_k;
  const int slices = a.expert_slices;
  const std::vector<int64_t> offset = PackedOffsets(a);
  std::vector<std::vector<float>> dxs(devices()), dws(devices());
  std::vector<int64_t> flops(devices(), 0);
  RETURN_IF_ERROR(RunGroup([&](int rank, Collectives* c) -> absl::Status {
    std::vector<float> grad, input;
    RETURN_IF_ERROR(BroadcastFromFirst(dy, s.tokens * h, rank, c, &grad));
    if (slices > 1) RETURN_IF_ERROR(BroadcastFromFirst(x, s.tokens * h, rank, c, &input));
    std::vector<float>& dxe = dxs[rank];
    std::vector<float>& dw = dws[rank];
    dxe.assign(offset.back() * h, 0.0f);
    dw.assign(s.tokens * k, 0.0f);
    std::vector<float> dout, slice_input;  // reused across slices
    MlpActivations slice_acts;
    for (int64_t e = 0; e < s.experts; ++e) {
      const int64_t rows_e = offset[e + 1] - offset[e];
      if (device[e] != rank || rows_e == 0) continue;
      const std::vector<int32_t>& rows = a.expert_rows[e];
      for (int j = 0; j < slices; ++j) {
        const int64_t begin = SliceBegin(rows_e, slices, j);
        const int64_t m = SliceBegin(rows_e, slices, j + 1) - begin;
        if (m == 0) continue;
        if (slices > 1) {  // MemFine: the slice's forward, recomputed
          slice_input.resize(m * h);
          for (int64_t i = 0; i < m; ++i) {
            std::memcpy(&slice_input[i * h], &input[rows[begin + i] * h], h * sizeof(float));
          }
          MlpForward(p.experts[e], slice_input.data(), m, h, &slice_acts, nullptr);
          flops[rank] += 6 * m * h * s.ffn;
        }
        const float* xe = slices > 1 ? slice_input.data() : a.expert_inputs[e].data();
        const MlpActivations& acts = slices > 1 ? slice_acts : a.expert_acts[e];
        dout.resize(m * h);
        for (int64_t i = 0; i < m; ++i) {
          const int64_t slot = rows[begin + i] * k + a.expert_slots[e][begin + i];
          const float wt = a.topk_weight[slot];
          const float* dyr = &grad[rows[begin + i] * h];
          float sum = 0.0f;
          for (int64_t c = 0; c < h; ++c) {
            dout[i * h + c] = dyr[c] * wt;
            sum += dyr[c] * acts.out[i * h + c];
          }
          dw[slot] = sum;
        }
        MlpBackward(p.experts[e], xe, acts, dout.data(), h, &dxe[(offset[e] + begin) * h], nullptr);
      }
    }
    RETURN_IF_ERROR(c->AllReduceSum(dxe.data(), static_cast<int64_t>(dxe.size())));
    return c->AllReduceSum(dw.data(), static_cast<int64_t>(dw.size()));
  }));
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
