#include "engine/train/scheduled_feed_forward.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cstring>
#include <functional>
#include <memory>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "engine/train/expert_feed.h"
#include "engine/train/expert_uploader.h"
#include "engine/train/micro_batch_pipeline.h"

namespace expertd::train {

namespace {

constexpr int64_t kF = sizeof(float);

template <typename T>
int64_t Capacity(const std::vector<T>& v) {
  return static_cast<int64_t>(v.capacity() * sizeof(T));
}

int64_t ActsCapacity(const MlpActivations& a) {
  return Capacity(a.gate) + Capacity(a.up) + Capacity(a.act) + Capacity(a.out);
}

// Every expert's rows split into `slices`, experts in index order, empty
// slices skipped.
template <typename Task>
std::vector<Task> SliceTasks(const std::vector<int64_t>& rows, int slices) {
  std::vector<Task> tasks;
  for (size_t e = 0; e < rows.size(); ++e) {
    for (int j = 0; j < slices; ++j) {
      const int64_t b = SliceBegin(rows[e], slices, j), end = SliceBegin(rows[e], slices, j + 1);
      if (end > b) tasks.push_back({static_cast<int>(e), b, end});
    }
  }
  return tasks;
}

// Sizes a reused slice buffer and its activations once, for `rows` rows.
void ReserveRows(int64_t rows, const MoeShape& s, std::vector<float>* in, MlpActivations* a) {
  in->reserve(rows * s.hidden);
  a->gate.reserve(rows * s.ffn);
  a->up.reserve(rows * s.ffn);
  a->act.reserve(rows * s.ffn);
  a->out.reserve(rows * s.hidden);
}

std::string LayerName(const FeedForwardParams& p) {
  const std::string& n = p.moe ? p.router->name : p.dense.gate->name;
  const size_t layers = n.find("layers.");  // model.layers.L.<block>...
  const size_t cut = layers == std::string::npos ? layers : n.find('.', layers + 7);
  return cut == std::string::npos ? n : n.substr(0, cut);
}

}  // namespace

void ScheduledFeedForwardExecutor::LiveBytes::Add(int64_t b) {
  std::lock_guard<std::mutex> lock(mu_);
  now_ += b;
  peak_ = std::max(peak_, now_);
}

ScheduledFeedForwardExecutor::ScheduledFeedForwardExecutor(const TrainSchedule& schedule,
                                                           DeviceMemoryTracker* device,
                                                           TraceRecorder* trace)
    : schedule_(schedule), device_(device), trace_(trace) {
  if (schedule.train_devices > 1) {
    group_ = std::make_unique<DeviceGroupExperts>(
        schedule.train_devices, PlacementCostModel{},
        DeviceGroupMemory{device, schedule.device_memory_bytes, trace});
  }
}

int ScheduledFeedForwardExecutor::LayerOrdinal(const FeedForwardParams& p) {
  auto it = ordinals_.find(&p);
  if (it != ordinals_.end()) return it->second;
  const int next = static_cast<int>(ordinals_.size());
  ordinals_[&p] = next;
  return next;
}

absl::Status ScheduledFeedForwardExecutor::DenseForward(const FeedForwardParams& p, const float* x,
                                                        int64_t n, int64_t hidden,
                                                        FeedForwardActivations* a, float* y,
                                                        ThreadPool* pool) {
  a->held.clear();
  DeviceReservation r;
  RETURN_IF_ERROR(r.Acquire(device_, n * (3 * p.dense.width() + hidden) * kF,
                            "the dense MLP activations of " + LayerName(p)));
  a->held.push_back(std::move(r));
  MlpForward(p.dense, x, n, hidden, &a->dense, pool);
  std::memcpy(y, a->dense.out.data(), n * hidden * sizeof(float));
  return absl::OkStatus();
}

absl::Status ScheduledFeedForwardExecutor::ChooseSlicing(const FeedForwardParams& p,
                                                         const MoeShape& s,
                                                         const std::vector<int64_t>& rows,
                                                         int64_t max_rows, int* chunks, int* mb,
                                                         ActivationRestore* restore) {
  *mb = 1;
  *restore = ActivationRestore::kRecompute;
  if (schedule_.micro_batches != 1) {
    const MicroBatchProfile::Choice c =
        profile_.Choose(max_rows, schedule_.micro_batches, schedule_.activation_restore);
    *mb = c.micro_batches;
    *restore = c.restore;
  }
  *chunks = std::max(1, schedule_.moe_chunks);
  if (schedule_.moe_chunks != 0) return absl::OkStatus();
  int64_t slot = 0;  // room one expert upload needs beside the activations
  if (offload_) {
    for (const MlpParams& e : p.experts) slot = std::max(slot, ExpertSlotBytes(e, true));
  }
  ASSIGN_OR_RETURN(*chunks, ChooseMoeChunks(s, rows, *mb, device_->available() - slot));
  return absl::OkStatus();
}

absl::Status ScheduledFeedForwardExecutor::ReserveForward(const MoeShape& s,
                                                          const std::vector<int64_t>& rows, int mb,
                                                          const std::string& layer,
                                                          FeedForwardActivations* a,
                                                          DeviceReservation* working) {
  DeviceReservation routing;
  RETURN_IF_ERROR(routing.Acquire(device_, RoutingBytes(s), "the routing state of " + layer));
  a->held.push_back(std::move(routing));
  const int slices = a->expert_slices;
  if (slices > 1) {  // the reused slice buffers, for the forward only
    return working->Acquire(
        device_, (mb > 1 ? 2 : 1) * ExpertForwardBytes(s, MaxSliceRows(rows, slices)),
        absl::StrCat("the expert buffers of ", layer, " in ", slices, " slices"));
  }
  int64_t saved = 0;
  for (int64_t r : rows) saved += ExpertForwardBytes(s, r);
  DeviceReservation held;
  RETURN_IF_ERROR(held.Acquire(device_, saved,
                               absl::StrCat("the expert activations saved for backward of ", layer,
                                            " (--moe_chunks splits them)")));
  a->held.push_back(std::move(held));
  return absl::OkStatus();
}

absl::Status ScheduledFeedForwardExecutor::Forward(const FeedForwardParams& p, const float* x,
                                                   int64_t n, int64_t hidden,
                                                   FeedForwardActivations* a, float* y,
                                                   ThreadPool* pool) {
  if (!p.moe) return DenseForward(p, x, n, hidden, a, y, pool);
  const int ordinal = LayerOrdinal(p);
  const MoeShape s{n, hidden, p.experts[0].width(), static_cast<int64_t>(p.experts.size()),
                   p.top_k};
  a->held.clear();
  MoeRoute(p, x, n, hidden, a, pool);
  std::vector<int64_t> rows(s.experts);
  int64_t max_rows = 0;
  for (int64_t e = 0; e < s.experts; ++e) {
    rows[e] = static_cast<int64_t>(a->expert_rows[e].size());
    max_rows = std::max(max_rows, rows[e]);
  }
  if (on_routed_) {
    std::vector<int> forward, idle;
    for (int64_t e = 0; e < s.experts; ++e) {
      (rows[e] > 0 ? forward : idle).push_back(static_cast<int>(e));
    }
    std::vector<int> backward = forward;
    if (!p.idle_experts_skip_gradient) backward.insert(backward.end(), idle.begin(), idle.end());
    on_routed_(p, forward, backward);
  }
  int mb = 1, chunks = 1;
  ActivationRestore restore = ActivationRestore::kRecompute;
  RETURN_IF_ERROR(ChooseSlicing(p, s, rows, max_rows, &chunks, &mb, &restore));
  const int slices = chunks * mb;
  const bool save = slices == 1;
  LayerState& state = layers_[ordinal];
  state.choice = {mb, restore};
  state.max_rows = max_rows;
  state.profiling = schedule_.micro_batches == 0 ||
                    (schedule_.micro_batches > 1 &&
                     schedule_.activation_restore == ActivationRestore::kAuto);
  state.restore = mb > 1 ? restore : ActivationRestore::kRecompute;
  const bool offload_slices = !save && state.restore == ActivationRestore::kOffload;
  a->expert_slices = slices;
  const std::string layer = LayerName(p);
  DeviceReservation working;
  RETURN_IF_ERROR(ReserveForward(s, rows, mb, layer, a, &working));
  const std::vector<Task> tasks = SliceTasks<Task>(rows, slices);
  state.host.assign(offload_slices ? tasks.size() : 0, HostSlice());
  a->expert_inputs.assign(s.experts, {});
  a->expert_acts.assign(s.experts, {});
  std::fill(y, y + n * hidden, 0.0f);
  LiveBytes live;
  live.Add(Capacity(a->probs) + Capacity(a->topk_ids) + Capacity(a->topk_weight) +
           2 * n * s.top_k * 4);
  const auto start = std::chrono::steady_clock::now();
  if (group_ != nullptr) {
    if (mb > 1 || (offload_ && tier_ != nullptr)) {
      return absl::FailedPreconditionError(absl::StrCat(
          "train_devices=", schedule_.train_devices, " combined with ",
          mb > 1 ? "micro-batches" : "the SSD tier (--host_memory_bytes)",
          " is not supported: several training devices run the experts resident or from the "
          "host tier, without micro-batches (chunks combine)"));
    }
    RETURN_IF_ERROR(group_->Forward(p, s, ordinal, x, a, y));
    for (int64_t e = 0; e < s.experts; ++e) {
      live.Add(Capacity(a->expert_inputs[e]) + ActsCapacity(a->expert_acts[e]));
    }
  } else {
    RETURN_IF_ERROR(ExpertsForward(p, s, tasks, save, mb, x, a, y,
                                   offload_slices ? &state.host : nullptr, &live, pool));
  }
  state.forward_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  working.Reset();
  if (p.shared.gate != nullptr) {
    DeviceReservation shared;
    RETURN_IF_ERROR(shared.Acquire(device_, n * (3 * p.shared.width() + hidden + 1) * kF,
                                   "the shared expert activations of " + layer));
    a->held.push_back(std::move(shared));
    MoeSharedForward(p, x, n, hidden, a, y, pool);
  }
  std::lock_guard<std::mutex> lock(stats_mu_);
  stats_.chunks[ordinal] = chunks;
  stats_.micro_batches[ordinal] = mb;
  stats_.predicted_peak =
      std::max(stats_.predicted_peak, PredictMoePeakBytes(s, rows, slices, mb > 1));
  forward_peak_[ordinal] = live.peak();
  return absl::OkStatus();
}

absl::Status ScheduledFeedForwardExecutor::ExpertsForward(const FeedForwardParams& p,
                                                          const MoeShape& s,
                                                          const std::vector<Task>& tasks, bool save,
                                                          int micro_batches, const float* x,
                                                          FeedForwardActivations* a, float* y,
                                                          std::vector<HostSlice>* host,
                                                          LiveBytes* live, ThreadPool* pool) {
  const int64_t h = s.hidden, k = s.top_k;
  std::vector<int> order;
  for (const Task& t : tasks) {
    if (order.empty() || order.back() != t.expert) order.push_back(t.expert);
  }
  ExpertFeed feed(p, order, offload_, /*with_grads=*/false, {device_, trace_, tier_});
  // One reused buffer per stage boundary, two when the stages overlap; sized
  // once for the largest slice.
  const bool threaded = !save && micro_batches > 1;
  const size_t buffers = threaded ? 2 : 1;
  std::array<std::vector<float>, 2> in;
  std::array<MlpActivations, 2> acts;
  if (!save) {
    int64_t r = 0;
    for (const Task& t : tasks) r = std::max(r, t.end - t.begin);
    for (size_t i = 0; i < buffers; ++i) ReserveRows(r, s, &in[i], &acts[i]);
  }
  auto input_of = [&](size_t t) -> std::vector<float>& {
    return save ? a->expert_inputs[tasks[t].expert] : in[t % buffers];
  };
  int64_t offloaded = 0;  // written by the combine stage only
  auto acts_of = [&](size_t t) -> MlpActivations& {
    return save ? a->expert_acts[tasks[t].expert] : acts[t % buffers];
  };
  const std::array<std::function<absl::Status(size_t)>, 3> stages = {
      [&](size_t t) {  // dispatch: gather the task's rows
        TraceRecorder::Span span(micro_batches > 1 ? trace_ : nullptr, "gather",
                                 TraceRecorder::kDispatch);
        const Task& task = tasks[t];
        const std::vector<int32_t>& rows = a->expert_rows[task.expert];
        std::vector<float>& xe = input_of(t);
        xe.resize((task.end - task.begin) * h);
        for (int64_t i = task.begin; i < task.end; ++i) {
          std::memcpy(&xe[(i - task.begin) * h], x + rows[i] * h, h * sizeof(float));
        }
        return absl::OkStatus();
      },
      [&](size_t t) -> absl::Status {  // compute
        const Task& task = tasks[t];
        ASSIGN_OR_RETURN(MlpParams w, feed.Get(task.expert));
        TraceRecorder::Span span(trace_, absl::StrCat("forward expert ", task.expert),
                                 TraceRecorder::kCompute);
        MlpForward(w, input_of(t).data(), task.end - task.begin, h, &acts_of(t), pool);
        if (save) live->Add(Capacity(input_of(t)) + ActsCapacity(acts_of(t)));
        return absl::OkStatus();
      },
      [&](size_t t) {  // combine: y += weight * out, experts in index order per token
        TraceRecorder::Span span(micro_batches > 1 ? trace_ : nullptr, "combine",
                                 TraceRecorder::kCombine);
        const Task& task = tasks[t];
        const std::vector<int32_t>& rows = a->expert_rows[task.expert];
        const std::vector<float>& out = acts_of(t).out;
        for (int64_t i = task.begin; i < task.end; ++i) {
          const float w = a->topk_weight[rows[i] * k + a->expert_slots[task.expert][i]];
          float* yr = y + rows[i] * h;
          const float* o = &out[(i - task.begin) * h];
          for (int64_t c = 0; c < h; ++c) yr[c] += o[c] * w;
        }
        if (host != nullptr) {  // MPMoE offload: the slice's activations to the host
          // (not its input: dispatch may already be refilling that buffer)
          TraceRecorder::Span copy(trace_, "offload activations", TraceRecorder::kCombine);
          offloaded += CopySlice(acts_of(t), &(*host)[t]);
        }
        return absl::OkStatus();
      }};
  RETURN_IF_ERROR(RunThreeStages(tasks.size(), threaded, stages));
  if (!save) {
    live->Add(Capacity(in[0]) + Capacity(in[1]) + ActsCapacity(acts[0]) + ActsCapacity(acts[1]));
  }
  feed.Finish();
  std::lock_guard<std::mutex> lock(stats_mu_);
  stats_.uploaded_bytes += feed.uploaded_bytes();
  stats_.upload_seconds += feed.upload_seconds();
  stats_.offloaded_bytes += offloaded;
  return absl::OkStatus();
}

absl::Status ScheduledFeedForwardExecutor::Backward(const FeedForwardParams& p, const float* x,
                                                    const FeedForwardActivations& a,
                                                    const float* dy,
                                                    const std::vector<float>& aux_dprob, int64_t n,
                                                    int64_t hidden, float* dx, ThreadPool* pool) {
  if (!p.moe) {
    DeviceReservation working;
    RETURN_IF_ERROR(working.Acquire(device_, 3 * n * p.dense.width() * kF,
                                    "the dense MLP gradients of " + LayerName(p)));
    MlpBackward(p.dense, x, a.dense, dy, hidden, dx, pool);
    a.held.clear();
    return absl::OkStatus();
  }
  const int ordinal = LayerOrdinal(p);
  const MoeShape s{n, hidden, p.experts[0].width(), static_cast<int64_t>(p.experts.size()),
                   p.top_k};
  const int slices = a.expert_slices;
  std::vector<int64_t> rows(s.experts);
  for (int64_t e = 0; e < s.experts; ++e) rows[e] = a.expert_rows[e].size();
  const int64_t r = MaxSliceRows(rows, slices);
  const bool save = slices == 1;
  LayerState& state = layers_[ordinal];
  const bool threaded = !save && state.choice.micro_batches > 1;
  DeviceReservation working;
  RETURN_IF_ERROR(working.Acquire(
      device_,
      RouterBackwardBytes(s) +
          (save ? ExpertBackwardBytes(s, r) : ExpertSliceBackwardBytes(s, r, threaded)) +
          (p.shared.gate != nullptr ? n * (3 * p.shared.width() + hidden) * kF : 0),
      "the MoE backward buffers of " + LayerName(p)));
  const std::vector<Task> tasks = SliceTasks<Task>(rows, slices);
  LiveBytes live;
  int64_t held =
      Capacity(a.probs) + Capacity(a.topk_ids) + Capacity(a.topk_weight) + 2 * n * s.top_k * 4;
  for (int64_t e = 0; e < s.experts; ++e) {
    held += Capacity(a.expert_inputs[e]) + ActsCapacity(a.expert_acts[e]);
  }
  live.Add(held);
  std::vector<float> dweight(n * s.top_k, 0.0f);
  live.Add(RouterBackwardBytes(s));
  if (group_ != nullptr) {
    // The devices' packed exchange buffers are the collectives' (as NCCL's
    // would be), not activations: not counted.
    int64_t flops = 0;
    RETURN_IF_ERROR(group_->Backward(p, s, ordinal, x, a, dy, &dweight, dx, &flops,
                                     offload_ ? on_expert_done_ : nullptr));
    // One slice's (or expert's) backward temporaries, and a sliced forward.
    live.Add(ExpertBackwardBytes(s, r) + (save ? 0 : ExpertForwardBytes(s, r)));
    std::lock_guard<std::mutex> lock(stats_mu_);
    stats_.recomputed_flops += flops;
  } else {
    const auto start = std::chrono::steady_clock::now();
    const bool from_host = !save && state.restore == ActivationRestore::kOffload;
    RETURN_IF_ERROR(ExpertsBackward(p, s, tasks, threaded, from_host ? &state.host : nullptr, x, a,
                                    dy, &dweight, dx, &live, pool));
    if (state.profiling && !save) {
      profile_.Record(state.max_rows, state.choice,
                      state.forward_seconds + std::chrono::duration<double>(
                                                  std::chrono::steady_clock::now() - start)
                                                  .count());
    }
    state.host.clear();
    state.host.shrink_to_fit();
  }
  for (int64_t e = 0; e < s.experts && !p.idle_experts_skip_gradient; ++e) {
    if (rows[e] != 0) continue;
    // An idle expert's zero gradient is sized from its weights: on the host.
    // That gradient is final here too: on_expert_done_ sees it, pinned.
    const int id = tier_ != nullptr ? tier_->IdOf(p.experts[e].gate) : -1;
    if (id >= 0) RETURN_IF_ERROR(tier_->Pin(id, ExpertTier::Need::kWeights));
    TouchUnusedExpertGrads(p, e);
    if (offload_ && on_expert_done_) on_expert_done_(p.experts[e]);
    if (id >= 0) tier_->Unpin(id, /*dirty=*/true);
  }
  MoeRouterAndSharedBackward(p, x, a, dy, dweight, aux_dprob, n, hidden, dx, pool);
  a.held.clear();
  std::lock_guard<std::mutex> lock(stats_mu_);
  stats_.measured_peak = std::max({stats_.measured_peak, live.peak(), forward_peak_[ordinal]});
  stats_.restore[ordinal] = save ? "saved" : ActivationRestoreName(state.restore);
  return absl::OkStatus();
}

absl::Status ScheduledFeedForwardExecutor::ExpertsBackward(
    const FeedForwardParams& p, const MoeShape& s, const std::vector<Task>& tasks, bool threaded,
    const std::vector<HostSlice>* host, const float* x, const FeedForwardActivations& a,
    const float* dy, std::vector<float>* dweight, float* dx, LiveBytes* live, ThreadPool* pool) {
  const int64_t h = s.hidden, k = s.top_k;
  const bool save = a.expert_slices == 1;
  std::vector<int> order;
  for (const Task& t : tasks) {
    if (order.empty() || order.back() != t.expert) order.push_back(t.expert);
  }
  ExpertFeed feed(p, order, offload_, /*with_grads=*/true, {device_, trace_, tier_},
                  on_expert_done_);
  // One reused buffer per stage boundary, two when the stages overlap (items
  // t and t+2 share one); sized once for the largest slice. dout lives in the
  // compute stage only.
  const size_t buffers = threaded ? 2 : 1;
  int64_t largest = 0;
  for (const Task& t : tasks) largest = std::max(largest, t.end - t.begin);
  std::array<std::vector<float>, 2> xe, dys, dxe;
  std::array<MlpActivations, 2> acts;
  std::vector<float> dout;
  for (size_t i = 0; i < buffers; ++i) {
    if (!save) ReserveRows(largest, s, &xe[i], &acts[i]);
    if (threaded) dys[i].reserve(largest * h);
    dxe[i].reserve(largest * h);
  }
  dout.reserve(largest * h);
  int64_t flops = 0, restored = 0;  // written by the compute / dispatch stage only
  const std::array<std::function<absl::Status(size_t)>, 3> stages = {
      [&](size_t t) {  // dispatch: the slice's dy rows; its input gathered or restored
        TraceRecorder::Span span(threaded ? trace_ : nullptr, "gather", TraceRecorder::kDispatch);
        const Task& task = tasks[t];
        const size_t b = t % buffers;
        const std::vector<int32_t>& rows = a.expert_rows[task.expert];
        if (threaded) {
          dys[b].resize((task.end - task.begin) * h);
          for (int64_t i = task.begin; i < task.end; ++i) {
            std::memcpy(&dys[b][(i - task.begin) * h], dy + rows[i] * h, h * sizeof(float));
          }
        }
        if (save) return absl::OkStatus();
        xe[b].resize((task.end - task.begin) * h);
        for (int64_t i = task.begin; i < task.end; ++i) {
          std::memcpy(&xe[b][(i - task.begin) * h], x + rows[i] * h, h * sizeof(float));
        }
        // MPMoE offload: the forward's activations come back from the host.
        if (host != nullptr) restored += RestoreSlice((*host)[t], &acts[b]);
        return absl::OkStatus();
      },
      [&](size_t t) -> absl::Status {  // compute: recompute when needed, then backward
        const Task& task = tasks[t];
        const int e = task.expert;
        const int64_t m = task.end - task.begin;
        const size_t b = t % buffers;
        const std::vector<int32_t>& rows = a.expert_rows[e];
        ASSIGN_OR_RETURN(MlpParams w, feed.Get(e));
        TraceRecorder::Span span(trace_, absl::StrCat("backward expert ", e),
                                 TraceRecorder::kCompute);
        if (!save && host == nullptr) {  // slice-level recomputation
          MlpForward(w, xe[b].data(), m, h, &acts[b], pool);
          flops += 6 * m * h * s.ffn;
        }
        const float* input = save ? a.expert_inputs[e].data() : xe[b].data();
        const MlpActivations& act = save ? a.expert_acts[e] : acts[b];
        dout.resize(m * h);
        dxe[b].assign(m * h, 0.0f);
        for (int64_t i = task.begin; i < task.end; ++i) {
          const int64_t slot = rows[i] * k + a.expert_slots[e][i];
          const float wt = a.topk_weight[slot];
          const float* dyr = threaded ? &dys[b][(i - task.begin) * h] : dy + rows[i] * h;
          const float* o = &act.out[(i - task.begin) * h];
          float dw = 0.0f;
          for (int64_t c = 0; c < h; ++c) {
            dout[(i - task.begin) * h + c] = dyr[c] * wt;
            dw += dyr[c] * o[c];
          }
          (*dweight)[slot] = dw;
        }
        MlpBackward(w, input, act, dout.data(), h, dxe[b].data(), pool);
        return absl::OkStatus();
      },
      [&](size_t t) {  // combine: dx rows += the slice's d(input), in slice order
        TraceRecorder::Span span(threaded ? trace_ : nullptr, "combine", TraceRecorder::kCombine);
        const Task& task = tasks[t];
        const std::vector<int32_t>& rows = a.expert_rows[task.expert];
        const std::vector<float>& d = dxe[t % buffers];
        for (int64_t i = task.begin; i < task.end; ++i) {
          float* dxr = dx + rows[i] * h;
          const float* di = &d[(i - task.begin) * h];
          for (int64_t c = 0; c < h; ++c) dxr[c] += di[c];
        }
        return absl::OkStatus();
      }};
  RETURN_IF_ERROR(RunThreeStages(tasks.size(), threaded, stages));
  // Buffers reused across slices: their high-water mark, plus MlpBackward's
  // dact/dgate/dup for the largest slice.
  int64_t buffered = Capacity(dout) + 3 * largest * s.ffn * kF;
  for (size_t i = 0; i < 2; ++i) {
    buffered += Capacity(xe[i]) + Capacity(dys[i]) + Capacity(dxe[i]) + ActsCapacity(acts[i]);
  }
  live->Add(buffered);
  feed.Finish();
  std::lock_guard<std::mutex> lock(stats_mu_);
  stats_.uploaded_bytes += feed.uploaded_bytes();
  stats_.upload_seconds += feed.upload_seconds();
  stats_.recomputed_flops += flops;
  stats_.restored_bytes += restored;
  return absl::OkStatus();
}

void ScheduledFeedForwardExecutor::TakeStats(ScheduleReport* r) {
  std::lock_guard<std::mutex> lock(stats_mu_);
  r->uploaded_bytes += stats_.uploaded_bytes;
  r->upload_seconds += stats_.upload_seconds;
  r->recomputed_flops += stats_.recomputed_flops;
  r->offloaded_activation_bytes += stats_.offloaded_bytes;
  r->restored_activation_bytes += stats_.restored_bytes;
  r->predicted_peak_activation_bytes =
      std::max(r->predicted_peak_activation_bytes, stats_.predicted_peak);
  r->measured_peak_activation_bytes =
      std::max(r->measured_peak_activation_bytes, stats_.measured_peak);
  r->moe_chunks.clear();
  r->micro_batches.clear();
  for (const auto& [layer, c] : stats_.chunks) r->moe_chunks.push_back(c);
  for (const auto& [layer, nb] : stats_.micro_batches) r->micro_batches.push_back(nb);
  r->activation_restore.clear();
  for (const auto& [layer, how] : stats_.restore) r->activation_restore.push_back(how);
  stats_ = Stats();
  if (group_ == nullptr) return;
  r->device_imbalance.clear();
  r->measured_device_imbalance.clear();
  r->pinned_experts.clear();
  r->placed_upload_bytes = r->measured_placed_upload_bytes = 0;
  r->placed_upload_seconds = r->measured_placed_upload_seconds = 0;
  for (const auto& [layer, d] : group_->reports()) {
    r->device_imbalance.push_back(d.imbalance);
    r->measured_device_imbalance.push_back(d.measured_imbalance);
    r->pinned_experts.push_back(d.pinned_experts);
    r->placed_upload_bytes += d.placed_upload_bytes;
    r->placed_upload_seconds += d.placed_upload_seconds;
    r->measured_placed_upload_bytes += d.measured_upload_bytes;
    r->measured_placed_upload_seconds += d.measured_upload_seconds;
    r->placement_flops_per_second = d.flops_per_second;
  }
  group_->TakeMoved(&r->uploaded_bytes, &r->upload_seconds);
  r->device_peak_bytes.clear();
  r->device_cached_experts.clear();
  for (int d = 0; offload_ && d < group_->devices(); ++d) {  // the step's, per device
    r->device_peak_bytes.push_back(group_->device_memory(d)->peak());
    if (d > 0) group_->device_memory(d)->ResetPeak();  // device 0's: the trainer's, per step
    r->device_cached_experts.push_back(group_->cache(d).size());
  }
}

}  // namespace expertd::train
