#include "tests/golden/train_golden_data.h"

#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/escaping.h"
#include "nlohmann/json.hpp"
#include "tests/golden/golden_data.h"

namespace expertd::golden {

using json = nlohmann::json;

std::vector<std::string> TrainFixtures() {
  return {"mixtral", "qwen2_moe", "qwen2_moe_mixed", "olmoe", "qwen3_moe", "deepseek_v3"};
}

namespace {

// A null aux (DeepSeek: its code has no auxiliary loss) reads as 0.
GoldenLoss ReadLoss(const json& j, const char* total, const char* ce, const char* aux) {
  const double aux_value = j.at(aux).is_null() ? 0.0 : j.at(aux).get<double>();
  return GoldenLoss{j.at(total).get<double>(), j.at(ce).get<double>(), aux_value};
}

absl::StatusOr<GoldenGrad> ReadGrad(const std::string& name, const json& j) {
  GoldenGrad g;
  g.shape = j.at("shape").get<std::vector<int64_t>>();
  std::string bytes;
  if (!absl::Base64Unescape(j.at("b64").get<std::string>(), &bytes)) {
    return absl::InvalidArgumentError("bad base64 in the gradient of " + name);
  }
  int64_t numel = 1;
  for (int64_t d : g.shape) numel *= d;
  if (bytes.size() != static_cast<size_t>(numel) * sizeof(float)) {
    return absl::InvalidArgumentError("gradient of " + name + " does not match its shape");
  }
  g.values.resize(numel);
  std::memcpy(g.values.data(), bytes.data(), bytes.size());
  return g;
}

}  // namespace

absl::StatusOr<TrainGolden> LoadTrainGolden(const std::string& arch) {
  const std::string path = FixtureDir(arch) + "/train_golden.json";
  std::ifstream in(path);
  if (!in) return absl::NotFoundError("cannot open " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  const json j = json::parse(ss.str(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return absl::InvalidArgumentError("malformed " + path);
  try {
    TrainGolden g;
    g.input_ids = j.at("batch").at("input_ids").get<std::vector<std::vector<int32_t>>>();
    g.loss = ReadLoss(j.at("loss"), "total", "ce", "aux");
    const json& grads = j.at("grads");
    g.global_l2_norm = grads.at("global_l2_norm").get<double>();
    g.params_without_grad = grads.at("params_without_grad").get<std::vector<std::string>>();
    for (const auto& [name, value] : grads.at("params").items()) {
      auto grad = ReadGrad(name, value);
      if (!grad.ok()) return grad.status();
      g.grads[name] = std::move(*grad);
    }
    const json& opt = j.at("optimizer");
    g.lr = opt.at("lr").get<double>();
    g.weight_decay = opt.at("weight_decay").get<double>();
    g.max_norm = opt.at("clip_grad_norm").at("max_norm").get<double>();
    for (const json& s : j.at("steps")) {
      GoldenStep step;
      step.loss = ReadLoss(s, "loss_total", "ce_loss", "aux_loss");
      step.grad_norm_before_clip = s.at("grad_norm_before_clip").get<double>();
      step.params_without_grad = s.at("params_without_grad").get<std::vector<std::string>>();
      g.steps.push_back(std::move(step));
    }
    g.loss_after_final_step =
        ReadLoss(j.at("loss_after_final_step"), "loss_total", "ce_loss", "aux_loss");
    return g;
  } catch (const json::exception& e) {
    return absl::InvalidArgumentError(path + ": " + e.what());
  }
}

}  // namespace expertd::golden
