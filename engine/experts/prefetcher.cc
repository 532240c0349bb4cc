#include "engine/experts/prefetcher.h"

#include <algorithm>
#include <fstream>
#include <numeric>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "models/checkpoint/tensor_names.h"
#include "nlohmann/json.hpp"

namespace expertd::engine {
namespace {

class AllPrefetcher final : public Prefetcher {
 public:
  explicit AllPrefetcher(int32_t num_experts) : num_experts_(num_experts) {}
  const char* name() const override { return "all"; }
  absl::StatusOr<std::vector<int32_t>> Predict(const RouterInput& input) override {
    if (input.next_moe_layer < 0) return std::vector<int32_t>{};
    std::vector<int32_t> all(num_experts_);
    std::iota(all.begin(), all.end(), 0);
    return all;
  }

 private:
  const int32_t num_experts_;
};

// Applies a gate [num_experts, hidden] to the router input and takes each
// row's top-k: the next router (speculative) or this layer's pre-gate.
class GatePrefetcher final : public Prefetcher {
 public:
  GatePrefetcher(PrefetchKind kind, Backend* backend, const models::ModelConfig& config)
      : kind_(kind),
        backend_(backend),
        num_experts_(config.num_experts),
        top_k_(config.num_experts_per_tok) {}
  const char* name() const override { return PrefetchKindName(kind_); }

  // Takes ownership of a pre-gate already on the device, for `layer`.
  void AddPregate(int layer, DeviceBuffer buffer, WeightRef ref) {
    pregate_buffers_.push_back(std::move(buffer));
    pregates_[layer] = ref;
  }
  size_t num_pregates() const { return pregates_.size(); }

  absl::StatusOr<std::vector<int32_t>> Predict(const RouterInput& in) override {
    if (in.next_moe_layer < 0 || in.rows <= 0) return std::vector<int32_t>{};
    WeightRef gate = in.next_router;
    if (kind_ == PrefetchKind::kPregate) {
      auto it = pregates_.find(in.layer);
      if (it != pregates_.end()) gate = it->second;
    }
    if (gate.empty() || gate.rows != num_experts_ || gate.cols != in.hidden_size)
      return std::vector<int32_t>{};
    RETURN_IF_ERROR(Reserve(in.rows));
    MatmulParams mm;
    mm.x = in.hidden;
    mm.x_stride = in.hidden_size;
    mm.w = gate;
    mm.y = logits_.as<float>();
    mm.y_stride = num_experts_;
    mm.m = in.rows;
    backend_->Matmul(mm);
    SoftmaxTopKParams top;
    top.logits = logits_.as<float>();
    top.rows = in.rows;
    top.num_experts = num_experts_;
    top.top_k = top_k_;
    top.ids = ids_.as<int32_t>();
    top.weights = weights_.as<float>();
    backend_->SoftmaxTopK(top);
    std::vector<int32_t> host(in.rows * top_k_);
    RETURN_IF_ERROR(backend_->CopyToHost(host.data(), ids_.data(), host.size() * sizeof(int32_t)));
    return RankByVotes(host, top_k_);
  }

 private:
  absl::Status Reserve(int64_t rows) {
    if (rows <= capacity_rows_) return absl::OkStatus();
    const uint64_t n = static_cast<uint64_t>(rows) * num_experts_;
    ASSIGN_OR_RETURN(logits_, backend_->Allocate(n * sizeof(float)));
    ASSIGN_OR_RETURN(ids_,
                     backend_->Allocate(static_cast<uint64_t>(rows) * top_k_ * sizeof(int32_t)));
    ASSIGN_OR_RETURN(weights_,
                     backend_->Allocate(static_cast<uint64_t>(rows) * top_k_ * sizeof(float)));
    capacity_rows_ = rows;
    return absl::OkStatus();
  }

  const PrefetchKind kind_;
  Backend* const backend_;
  const int64_t num_experts_;
  const int64_t top_k_;
  std::map<int, WeightRef> pregates_;
  std::vector<DeviceBuffer> pregate_buffers_;
  DeviceBuffer logits_, ids_, weights_;  // scratch, [rows, E] / [rows, k]
  int64_t capacity_rows_ = 0;
};

absl::Status LoadPregates(Backend* backend, const WeightSource& weights, bool require_every,
                          GatePrefetcher* p) {
  const models::ModelConfig& c = weights.config();
  for (int64_t layer = 0; layer + 1 < c.num_hidden_layers; ++layer) {
    const std::string name = models::PregateName(c, layer);
    if (!weights.Has(name)) {
      const bool predicts = std::find(c.is_moe_layer.begin() + layer + 1, c.is_moe_layer.end(),
                                      true) != c.is_moe_layer.end();
      if (require_every && predicts) {
        return absl::NotFoundError(absl::StrCat("config.json declares \"", kPregateConfigKey,
                                                "\": true but the checkpoint has no '", name, "'"));
      }
      continue;  // that layer falls back to the speculative guess
    }
    ASSIGN_OR_RETURN(models::TensorView v, weights.Get(name));
    if (v.shape != std::vector<int64_t>{c.num_experts, c.hidden_size}) {
      return absl::InvalidArgumentError(absl::StrCat("pre-gate '", name, "' has shape [",
                                                     absl::StrJoin(v.shape, ","), "], want [",
                                                     c.num_experts, ",", c.hidden_size, "]"));
    }
    WeightRef ref{v.data, v.dtype, c.num_experts, c.hidden_size};
    DeviceBuffer buf;
    if (!backend->host_memory_is_device_memory()) {
      ASSIGN_OR_RETURN(buf, backend->Allocate(v.nbytes));
      RETURN_IF_ERROR(backend->CopyToDevice(buf.data(), v.data, v.nbytes));
      ref.data = buf.data();
    }
    p->AddPregate(static_cast<int>(layer), std::move(buf), ref);
  }
  if (p->num_pregates() == 0) {
    return absl::NotFoundError(
        absl::StrCat("--prefetch=pregate: the checkpoint has no pre-gate weights (e.g. '",
                     models::PregateName(c, 0), "')"));
  }
  return absl::OkStatus();
}

}  // namespace

const char* PrefetchKindName(PrefetchKind kind) {
  switch (kind) {
    case PrefetchKind::kNone:
      return "none";
    case PrefetchKind::kAll:
      return "all";
    case PrefetchKind::kSpeculative:
      return "speculative";
    case PrefetchKind::kPregate:
      return "pregate";
  }
  return "?";
}

bool ParsePrefetchKind(absl::string_view name, PrefetchKind* kind) {
  for (PrefetchKind k : {PrefetchKind::kNone, PrefetchKind::kAll, PrefetchKind::kSpeculative,
                         PrefetchKind::kPregate}) {
    if (name == PrefetchKindName(k)) {
      *kind = k;
      return true;
    }
  }
  return false;
}

std::vector<int32_t> RankByVotes(const std::vector<int32_t>& ids, int64_t top_k) {
  struct Score {
    int64_t votes = 0;
    int64_t best_rank = INT64_MAX;
  };
  std::map<int32_t, Score> scores;
  for (size_t i = 0; i < ids.size(); ++i) {
    Score& s = scores[ids[i]];
    ++s.votes;
    s.best_rank = std::min<int64_t>(s.best_rank, static_cast<int64_t>(i % top_k));
  }
  std::vector<int32_t> out;
  for (const auto& kv : scores) out.push_back(kv.first);
  std::stable_sort(out.begin(), out.end(), [&](int32_t a, int32_t b) {
    const Score &sa = scores[a], &sb = scores[b];
    return sa.votes != sb.votes ? sa.votes > sb.votes : sa.best_rank < sb.best_rank;
  });
  return out;
}

absl::StatusOr<bool> ConfigDeclaresPregate(const std::string& model_dir) {
  std::ifstream in(model_dir + "/config.json");
  if (model_dir.empty() || !in) return false;
  std::stringstream text;
  text << in.rdbuf();
  nlohmann::json j = nlohmann::json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains(kPregateConfigKey)) return false;
  if (!j[kPregateConfigKey].is_boolean()) {
    return absl::InvalidArgumentError(
        absl::StrCat(model_dir, "/config.json: \"", kPregateConfigKey, "\" must be true or false"));
  }
  return j[kPregateConfigKey].get<bool>();
}

absl::StatusOr<std::unique_ptr<Prefetcher>> CreatePrefetcher(PrefetchKind kind, Backend* backend,
                                                             const WeightSource& weights,
                                                             bool require_every_pregate) {
  const models::ModelConfig& c = weights.config();
  switch (kind) {
    case PrefetchKind::kNone:
      return std::unique_ptr<Prefetcher>();
    case PrefetchKind::kAll:
      return std::unique_ptr<Prefetcher>(new AllPrefetcher(static_cast<int32_t>(c.num_experts)));
    case PrefetchKind::kSpeculative:
      return std::unique_ptr<Prefetcher>(new GatePrefetcher(kind, backend, c));
    case PrefetchKind::kPregate: {
      auto p = std::make_unique<GatePrefetcher>(kind, backend, c);
      RETURN_IF_ERROR(LoadPregates(backend, weights, require_every_pregate, p.get()));
      return std::unique_ptr<Prefetcher>(std::move(p));
    }
  }
  return absl::InvalidArgumentError("unknown prefetch kind");
}

}  // namespace expertd::engine
