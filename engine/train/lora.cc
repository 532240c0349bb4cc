#include "engine/train/lora.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/env.h"
#include "base/status_macros.h"
#include "models/dtype/dtype.h"
#include "models/safetensors/safetensors_reader.h"
#include "models/safetensors/safetensors_writer.h"
#include "nlohmann/json.hpp"

namespace expertd::train {
namespace {

constexpr char kPrefix[] = "base_model.model.";
constexpr char kASuffix[] = ".lora_A.weight";
constexpr char kBSuffix[] = ".lora_B.weight";

std::string Module(const std::string& weight_name) {
  return weight_name.substr(0, weight_name.size() - std::string(".weight").size());
}

bool IsTarget(const Parameter& p, const std::vector<std::string>& targets) {
  for (const std::string& t : targets) {
    if (IsLoraTarget(p.name, p.shape.size(), t)) return true;
  }
  return false;
}

// Points each weight at its adapter parameters.
void Link(const std::vector<std::string>& weights, float scaling, TrainModel* model) {
  for (const std::string& name : weights) {
    Parameter* w = model->Find(name);
    w->lora_a = model->Find(LoraAName(name));
    w->lora_b = model->Find(LoraBName(name));
    w->lora_scaling = scaling;
  }
}

absl::StatusOr<nlohmann::json> ReadJson(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError("cannot read " + path);
  std::stringstream text;
  text << in.rdbuf();
  nlohmann::json j = nlohmann::json::parse(text.str(), nullptr, false);
  if (j.is_discarded() || !j.is_object())
    return absl::InvalidArgumentError(path + ": not a JSON object");
  return j;
}

}  // namespace

bool IsLoraTarget(const std::string& weight_name, size_t dims, const std::string& target_module) {
  if (dims != 2 || !absl::EndsWith(weight_name, ".weight")) return false;
  if (absl::StrContains(weight_name, ".lora_")) return false;
  const std::string module = Module(weight_name);
  return module.substr(module.rfind('.') + 1) == target_module;
}

std::string LoraAName(const std::string& weight_name) {
  return kPrefix + Module(weight_name) + kASuffix;
}
std::string LoraBName(const std::string& weight_name) {
  return kPrefix + Module(weight_name) + kBSuffix;
}

absl::Status AttachLora(const LoraOptions& options, TrainModel* model) {
  if (options.rank < 1) return absl::InvalidArgumentError("LoRA rank must be >= 1");
  if (!(options.alpha > 0)) return absl::InvalidArgumentError("LoRA alpha must be > 0");
  std::mt19937_64 rng(options.seed);
  std::vector<Parameter> adapters;
  std::vector<std::string> targets;
  for (const Parameter& p : model->params()) {  // sorted by name: a fixed draw order
    if (!IsTarget(p, options.target_modules)) continue;
    targets.push_back(p.name);
    const int64_t out = p.shape[0], in = p.shape[1];
    Parameter a, b;
    a.name = LoraAName(p.name);
    a.shape = {options.rank, in};
    const float bound = 1.0f / std::sqrt(static_cast<float>(in));
    std::uniform_real_distribution<float> uniform(-bound, bound);
    a.value.resize(options.rank * in);
    for (float& v : a.value) v = uniform(rng);
    b.name = LoraBName(p.name);
    b.shape = {out, options.rank};
    b.value.assign(out * options.rank, 0.0f);
    adapters.push_back(std::move(a));
    adapters.push_back(std::move(b));
  }
  if (targets.empty())
    return absl::InvalidArgumentError("no weight matches the LoRA target modules");
  RETURN_IF_ERROR(model->AddParameters(std::move(adapters)));
  Link(targets, static_cast<float>(options.alpha / options.rank), model);
  return absl::OkStatus();
}

absl::Status WriteLoraAdapter(const TrainModel& model, const LoraOptions& options,
                              const std::string& base_model, const std::string& dir, Env* env) {
  std::vector<models::TensorToWrite> tensors;
  for (const Parameter& p : model.params()) {
    if (!absl::StartsWith(p.name, kPrefix)) continue;
    tensors.push_back({models::TensorSpec{p.name, models::DType::kF32, p.shape}, p.value.data()});
  }
  if (tensors.empty()) return absl::FailedPreconditionError("the model has no LoRA adapter");
  RETURN_IF_ERROR(CreateDirs(env, dir));
  const nlohmann::json config = {{"peft_type", "LORA"},
                                 {"task_type", "CAUSAL_LM"},
                                 {"base_model_name_or_path", base_model},
                                 {"r", options.rank},
                                 {"lora_alpha", options.alpha},
                                 {"lora_dropout", 0.0},
                                 {"target_modules", options.target_modules},
                                 {"bias", "none"},
                                 {"fan_in_fan_out", false},
                                 {"inference_mode", true},
                                 {"init_lora_weights", true},
                                 {"use_rslora", false},
                                 {"use_dora", false},
                                 {"modules_to_save", nullptr},
                                 {"rank_pattern", nlohmann::json::object()},
                                 {"alpha_pattern", nlohmann::json::object()}};
  RETURN_IF_ERROR(models::WriteSafetensors(dir + "/adapter_model.safetensors", tensors,
                                           {{"format", "pt"}}, env));
  return WriteFileAtomically(env, dir + "/adapter_config.json", config.dump(2) + "\n");
}

absl::Status LoadLoraAdapter(const std::string& dir, TrainModel* model) {
  ASSIGN_OR_RETURN(nlohmann::json config, ReadJson(dir + "/adapter_config.json"));
  const std::string where = dir + "/adapter_config.json";
  if (config.value("peft_type", "") != "LORA")
    return absl::InvalidArgumentError(where + ": peft_type is not LORA");
  if (!config.contains("r") || !config["r"].is_number_integer() || config["r"].get<int64_t>() < 1 ||
      !config.contains("lora_alpha") || !config["lora_alpha"].is_number()) {
    return absl::InvalidArgumentError(where + ": needs an integer r >= 1 and a numeric lora_alpha");
  }
  if (config.value("use_dora", false) || config.value("use_rslora", false) ||
      config.value("fan_in_fan_out", false) || config.value("lora_dropout", 0.0) != 0.0) {
    return absl::InvalidArgumentError(
        where + ": only plain LoRA (no DoRA/rsLoRA/fan_in_fan_out, dropout 0)");
  }
  const int64_t rank = config["r"].get<int64_t>();
  const float scaling = static_cast<float>(config["lora_alpha"].get<double>() / rank);
  ASSIGN_OR_RETURN(auto file, models::SafetensorsFile::Open(dir + "/adapter_model.safetensors"));
  std::vector<Parameter> adapters;
  std::vector<std::string> weights;
  for (const models::SafetensorsEntry& e : file->tensors()) {
    const bool is_a = absl::EndsWith(e.name, kASuffix), is_b = absl::EndsWith(e.name, kBSuffix);
    if (!absl::StartsWith(e.name, kPrefix) || !(is_a || is_b) || e.shape.size() != 2) {
      return absl::InvalidArgumentError(absl::StrCat(dir, ": unexpected adapter tensor ", e.name));
    }
    const std::string module = e.name.substr(
        sizeof(kPrefix) - 1, e.name.size() - (sizeof(kPrefix) - 1) - (sizeof(kASuffix) - 1));
    const Parameter* w = model->Find(module + ".weight");
    const std::vector<int64_t> want = w == nullptr ? std::vector<int64_t>{}
                                      : is_a       ? std::vector<int64_t>{rank, w->shape[1]}
                                                   : std::vector<int64_t>{w->shape[0], rank};
    if (w == nullptr || e.shape != want) {
      return absl::InvalidArgumentError(
          absl::StrCat(dir, ": adapter tensor ", e.name, " does not fit a weight of the model"));
    }
    if (is_a) weights.push_back(module + ".weight");
    Parameter p;
    p.name = e.name;
    p.shape = e.shape;
    p.value.resize(e.numel());
    models::ConvertToF32(e.dtype, file->Data(e), p.value.data(), p.value.size());
    adapters.push_back(std::move(p));
  }
  if (adapters.size() != 2 * weights.size()) {
    return absl::InvalidArgumentError(dir + ": every lora_A needs its lora_B");
  }
  RETURN_IF_ERROR(model->AddParameters(std::move(adapters)));
  for (const std::string& w : weights) {
    if (model->Find(LoraBName(w)) == nullptr) {
      return absl::InvalidArgumentError(dir + ": " + LoraAName(w) + " has no lora_B");
    }
  }
  Link(weights, scaling, model);
  return absl::OkStatus();
}

std::vector<float> MergedWeight(const Parameter& w) {
  std::vector<float> merged = w.value;
  if (w.lora_a == nullptr) return merged;
  const int64_t out = w.shape[0], in = w.shape[1], r = w.lora_a->shape[0];
  for (int64_t o = 0; o < out; ++o) {
    for (int64_t k = 0; k < r; ++k) {
      const float b = w.lora_scaling * w.lora_b->value[o * r + k];
      const float* a = &w.lora_a->value[k * in];
      for (int64_t i = 0; i < in; ++i) merged[o * in + i] += b * a[i];
    }
  }
  if (w.dtype != models::DType::kF32) {
    std::vector<uint16_t> rounded(merged.size());
    models::ConvertFromF32(w.dtype, merged.data(), rounded.data(), rounded.size());
    models::ConvertToF32(w.dtype, rounded.data(), merged.data(), rounded.size());
  }
  return merged;
}

void MergeLora(TrainModel* model) {
  for (Parameter& w : model->params()) {
    if (w.lora_a == nullptr) continue;
    w.value = MergedWeight(w);
    w.lora_a = w.lora_b = nullptr;
  }
}

}  // namespace expertd::train
