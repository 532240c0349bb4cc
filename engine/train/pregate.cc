#include "engine/train/pregate.h"

#include <sys/stat.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "base/env.h"
#include "base/status_macros.h"
#include "engine/train/ops.h"
#include "models/checkpoint/checkpoint.h"
#include "models/checkpoint/tensor_names.h"
#include "models/config/model_config.h"
#include "models/safetensors/safetensors_writer.h"
#include "nlohmann/json.hpp"

namespace expertd::train {
namespace {

// The first MoE layer after `layer`, or -1.
int64_t NextMoeLayer(const models::ModelConfig& c, int64_t layer) {
  for (int64_t l = layer + 1; l < c.num_hidden_layers; ++l) {
    if (c.is_moe_layer[l]) return l;
  }
  return -1;
}

// Every batch's traces, concatenated per layer.
absl::StatusOr<std::vector<TrainModel::RouterTrace>> Trace(TrainModel* model,
                                                           const std::vector<TrainBatch>& data,
                                                           ThreadPool* pool) {
  if (data.empty()) return absl::InvalidArgumentError("pre-gate training needs data");
  std::vector<TrainModel::RouterTrace> all(model->config().num_hidden_layers);
  for (const TrainBatch& batch : data) {
    ASSIGN_OR_RETURN(std::vector<TrainModel::RouterTrace> t, model->TraceRouting(batch, pool));
    for (size_t l = 0; l < all.size(); ++l) {
      all[l].router_input.insert(all[l].router_input.end(), t[l].router_input.begin(),
                                 t[l].router_input.end());
      all[l].probs.insert(all[l].probs.end(), t[l].probs.begin(), t[l].probs.end());
      all[l].topk_ids.insert(all[l].topk_ids.end(), t[l].topk_ids.begin(), t[l].topk_ids.end());
    }
  }
  return all;
}

// Mean cross-entropy of softmax(x W^T) against `target` (rows, E); when dw is
// non-null also writes its gradient.
double Distill(const std::vector<float>& x, const std::vector<float>& target,
               const std::vector<float>& w, int64_t rows, int64_t h, int64_t e, float* dw,
               ThreadPool* pool) {
  std::vector<float> q(rows * e);
  LinearForward(x.data(), w.data(), nullptr, q.data(), rows, h, e, pool);
  SoftmaxRows(q.data(), rows, e);
  double loss = 0;
  std::vector<float> dlogits(rows * e);
  for (int64_t i = 0; i < rows * e; ++i) {
    if (target[i] > 0) loss -= target[i] * std::log(std::max(q[i], 1e-30f));
    dlogits[i] = (q[i] - target[i]) / static_cast<float>(rows);
  }
  if (dw != nullptr) {
    LinearBackward(x.data(), w.data(), dlogits.data(), nullptr, dw, nullptr, rows, h, e, pool);
  }
  return loss / rows;
}

}  // namespace

absl::StatusOr<PregateHeads> TrainPregates(TrainModel* model, const std::vector<TrainBatch>& data,
                                           const PregateOptions& options, ThreadPool* pool,
                                           const PregateStepFn& on_step) {
  const models::ModelConfig& c = model->config();
  ASSIGN_OR_RETURN(std::vector<TrainModel::RouterTrace> traces, Trace(model, data, pool));
  std::vector<Parameter> heads;
  std::vector<int64_t> layer_of;
  for (int64_t n = 0; n + 1 < c.num_hidden_layers; ++n) {
    const int64_t m = NextMoeLayer(c, n);
    if (m < 0) continue;
    Parameter p;  // starts as the speculative guess: layer m's router
    p.name = models::PregateName(c, n);
    p.shape = {c.num_experts, c.hidden_size};
    p.value = model->layers()[m].ffn.router->value;
    heads.push_back(std::move(p));
    layer_of.push_back(n);
  }
  if (heads.empty()) return absl::InvalidArgumentError("the model has no layer to pre-gate");
  const int64_t h = c.hidden_size, e = c.num_experts;
  const int64_t rows = static_cast<int64_t>(traces[0].router_input.size()) / h;
  AdamW opt(AdamWOptions{0.9, 0.999, 1e-8, options.weight_decay});
  PregateHeads out;
  for (int64_t step = 0; step < options.steps; ++step) {
    double loss = 0;
    for (size_t i = 0; i < heads.size(); ++i) {
      Parameter& p = heads[i];
      const int64_t n = layer_of[i], m = NextMoeLayer(c, n);
      p.grad.assign(p.value.size(), 0.0f);
      p.has_grad = true;
      loss += Distill(traces[n].router_input, traces[m].probs, p.value, rows, h, e, p.grad.data(),
                      pool);
    }
    out.step_losses.push_back(static_cast<float>(loss / heads.size()));
    opt.Step(&heads, options.lr, pool);
    if (on_step) {
      auto snapshot = [&]() {
        PregateHeads copy;
        for (size_t i = 0; i < heads.size(); ++i) copy.heads[layer_of[i]] = heads[i].value;
        copy.step_losses = out.step_losses;
        return copy;
      };
      RETURN_IF_ERROR(on_step(step + 1, snapshot));
    }
  }
  for (size_t i = 0; i < heads.size(); ++i) out.heads[layer_of[i]] = std::move(heads[i].value);
  return out;
}

absl::StatusOr<PredictionQuality> EvaluatePregates(TrainModel* model, const PregateHeads* heads,
                                                   const std::vector<TrainBatch>& data,
                                                   ThreadPool* pool) {
  const models::ModelConfig& c = model->config();
  ASSIGN_OR_RETURN(std::vector<TrainModel::RouterTrace> traces, Trace(model, data, pool));
  const int64_t h = c.hidden_size, e = c.num_experts, k = c.num_experts_per_tok;
  const int64_t rows = static_cast<int64_t>(traces[0].router_input.size()) / h;
  int64_t hits = 0, predicted = 0, actual = 0;
  for (int64_t n = 0; n + 1 < c.num_hidden_layers; ++n) {
    const int64_t m = NextMoeLayer(c, n);
    if (m < 0) continue;
    const std::vector<float>* w = &model->layers()[m].ffn.router->value;
    if (heads != nullptr) {
      auto it = heads->heads.find(n);
      if (it == heads->heads.end()) return absl::InvalidArgumentError("no head for a layer");
      w = &it->second;
    }
    std::vector<float> logits(rows * e), probs(rows * e), weight(rows * k);
    std::vector<int32_t> ids(rows * k);
    LinearForward(traces[n].router_input.data(), w->data(), nullptr, logits.data(), rows, h, e,
                  pool);
    RouteTopK(logits.data(), rows, e, k, false, probs.data(), ids.data(), weight.data());
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t i = 0; i < k; ++i) {
        for (int64_t j = 0; j < k; ++j) hits += ids[r * k + i] == traces[m].topk_ids[r * k + j];
      }
    }
    predicted += rows * k;
    actual += rows * k;
  }
  PredictionQuality q;
  q.tokens = rows;
  q.precision = static_cast<double>(hits) / std::max<int64_t>(1, predicted);
  q.recall = static_cast<double>(hits) / std::max<int64_t>(1, actual);
  return q;
}

namespace {

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError("cannot read " + path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

absl::Status WritePregateCheckpoint(const std::string& src_dir, const PregateHeads& heads,
                                    const std::string& dir) {
  ASSIGN_OR_RETURN(std::unique_ptr<models::Checkpoint> ckpt, models::Checkpoint::Open(src_dir));
  if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) {
    return absl::InternalError(absl::StrCat("cannot create ", dir, ": ", std::strerror(errno)));
  }
  std::vector<models::TensorToWrite> tensors;
  for (const std::string& name : ckpt->Names()) {
    ASSIGN_OR_RETURN(models::TensorView v, ckpt->Get(name));
    tensors.push_back({models::TensorSpec{name, v.dtype, v.shape}, v.data});
  }
  const models::ModelConfig& c = ckpt->config();
  for (const auto& [layer, w] : heads.heads) {
    tensors.push_back(
        {models::TensorSpec{
             models::PregateName(c, layer), models::DType::kF32, {c.num_experts, c.hidden_size}},
         w.data()});
  }
  RETURN_IF_ERROR(models::WriteSafetensors(dir + "/model.safetensors", tensors));
  ASSIGN_OR_RETURN(std::string config_text, ReadFile(src_dir + "/config.json"));
  nlohmann::json config = nlohmann::json::parse(config_text, nullptr, false);
  if (config.is_discarded()) return absl::InvalidArgumentError(src_dir + "/config.json: malformed");
  config["expertd_pregate"] = true;
  RETURN_IF_ERROR(WriteFileAtomically(Env::Default(), dir + "/config.json", config.dump(2) + "\n"));
  for (const char* extra : {"generation_config.json", "tokenizer.json", "tokenizer_config.json"}) {
    auto text = ReadFile(src_dir + "/" + extra);
    if (!text.ok()) continue;  // optional files
    RETURN_IF_ERROR(WriteFileAtomically(Env::Default(), dir + "/" + extra, *text));
  }
  if (!ReadFile(src_dir + "/generation_config.json").ok()) {
    // As transformers' save_pretrained: one is always written, derived from
    // the source config when the model had none.
    ASSIGN_OR_RETURN(std::string generation, models::GenerationConfigFromModelConfig(
                                                 config_text, src_dir + "/config.json"));
    RETURN_IF_ERROR(
        WriteFileAtomically(Env::Default(), dir + "/generation_config.json", generation));
  }
  return absl::OkStatus();
}

}  // namespace expertd::train
