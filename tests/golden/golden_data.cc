#include "tests/golden/golden_data.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>

#include "nlohmann/json.hpp"

namespace expertd::golden {
namespace {

using nlohmann::json;

template <typename T>
std::vector<T> Vec(const json& j) {
  std::vector<T> v;
  for (const json& x : j) v.push_back(x.get<T>());
  return v;
}

GoldenCase ParseCase(const json& c, bool bf16) {
  GoldenCase out;
  out.name = c.at("name").get<std::string>();
  out.input_ids = Vec<int32_t>(c.at("input_ids"));
  out.logits_last = Vec<float>(c.at("logits_last"));
  if (bf16) {
    out.greedy = Vec<int32_t>(c.at("greedy_new_tokens"));
    return out;
  }
  if (c.contains("logits_all")) {
    for (const json& row : c.at("logits_all")) out.logits_all.push_back(Vec<float>(row));
  }
  for (const json& r : c.at("router")) {
    LayerChoice lc;
    lc.layer = r.at("layer").get<int>();
    for (const json& t : r.at("topk_ids")) lc.topk_ids.push_back(Vec<int32_t>(t));
    out.router.push_back(std::move(lc));
  }
  out.greedy = Vec<int32_t>(c.at("greedy").at("new_tokens"));
  return out;
}

}  // namespace

absl::StatusOr<Golden> LoadGolden(const std::string& arch) {
  const std::string path = FixtureDir(arch) + "/golden.json";
  std::ifstream in(path);
  if (!in) return absl::NotFoundError("cannot open " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  json j = json::parse(ss.str(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return absl::InvalidArgumentError("malformed " + path);
  try {
    Golden g;
    for (const json& c : j.at("cases")) g.cases.push_back(ParseCase(c, false));
    for (const json& c : j.at("bf16_weights_fp32_compute").at("cases"))
      g.bf16_cases.push_back(ParseCase(c, true));
    return g;
  } catch (const json::exception& e) {
    return absl::InvalidArgumentError(path + ": " + e.what());
  }
}

double RelError(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return INFINITY;
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num = std::max(num, std::abs(static_cast<double>(a[i]) - b[i]));
    den = std::max(den, std::abs(static_cast<double>(b[i])));
  }
  return den == 0 ? num : num / den;
}

}  // namespace expertd::golden
