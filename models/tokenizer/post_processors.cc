#include "models/tokenizer/post_processors.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "models/tokenizer/bpe.h"

namespace expertd::models {

std::vector<int32_t> PostProcessor::AddedIds() const {
  std::vector<int32_t> out;
  for (const Step& s : steps_) {
    out.insert(out.end(), s.before.begin(), s.before.end());
    out.insert(out.end(), s.after.begin(), s.after.end());
  }
  return out;
}

void PostProcessor::Apply(std::vector<int32_t>* ids) const {
  for (const Step& s : steps_) {
    if (s.before.empty() && s.after.empty()) continue;
    ids->insert(ids->begin(), s.before.begin(), s.before.end());
    ids->insert(ids->end(), s.after.begin(), s.after.end());
  }
}

absl::optional<int32_t> PostProcessor::FirstPrefixId() const {
  for (const Step& s : steps_) {
    if (!s.before.empty()) return s.before.front();
  }
  return absl::nullopt;
}

namespace {

absl::Status ParseTemplate(const nlohmann::json& j, PostProcessor::Step* step) {
  const auto& specials = j.at("special_tokens");
  bool seen_sequence = false;
  for (const auto& piece : j.at("single")) {
    if (piece.contains("Sequence")) {
      if (piece["Sequence"].at("id").get<std::string>() != "A") {
        return absl::InvalidArgumentError("TemplateProcessing: single template uses sequence B");
      }
      seen_sequence = true;
      continue;
    }
    if (!piece.contains("SpecialToken")) {
      return absl::InvalidArgumentError(
          absl::StrCat("TemplateProcessing: bad piece ", piece.dump()));
    }
    std::string name = piece["SpecialToken"].at("id").get<std::string>();
    if (!specials.contains(name)) {
      return absl::InvalidArgumentError(
          absl::StrCat("TemplateProcessing: missing special token \"", name, "\""));
    }
    std::vector<int32_t>& dst = seen_sequence ? step->after : step->before;
    for (const auto& id : specials[name].at("ids")) {
      const int64_t v = JsonTokenId(id);
      if (v < 0)
        return absl::InvalidArgumentError(
            absl::StrCat("TemplateProcessing: bad token id ", id.dump()));
      dst.push_back(static_cast<int32_t>(v));
    }
  }
  return absl::OkStatus();
}

absl::Status ParseInto(const nlohmann::json& j, std::vector<PostProcessor::Step>* steps) {
  if (!j.is_object() || !j.contains("type") || !j["type"].is_string()) {
    return absl::InvalidArgumentError("post_processor: expected an object with a \"type\"");
  }
  const std::string type = j["type"].get<std::string>();
  if (type == "ByteLevel") return absl::OkStatus();
  if (type == "TemplateProcessing") {
    PostProcessor::Step step;
    absl::Status s = ParseTemplate(j, &step);
    if (s.ok()) steps->push_back(std::move(step));
    return s;
  }
  if (type == "RobertaProcessing" || type == "BertProcessing") {
    PostProcessor::Step step;
    const int64_t cls = JsonTokenId(j.at("cls").at(1));
    const int64_t sep = JsonTokenId(j.at("sep").at(1));
    if (cls < 0 || sep < 0)
      return absl::InvalidArgumentError(absl::StrCat(type, ": bad cls/sep token id"));
    step.before.push_back(static_cast<int32_t>(cls));
    step.after.push_back(static_cast<int32_t>(sep));
    steps->push_back(std::move(step));
    return absl::OkStatus();
  }
  if (type == "Sequence") {
    for (const auto& sub : j.at("processors")) {
      absl::Status s = ParseInto(sub, steps);
      if (!s.ok()) return s;
    }
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat("unsupported post_processor type \"", type, "\""));
}

}  // namespace

absl::StatusOr<std::unique_ptr<PostProcessor>> ParsePostProcessor(const nlohmann::json& j) {
  if (j.is_null()) return std::unique_ptr<PostProcessor>();
  std::vector<PostProcessor::Step> steps;
  absl::Status s = ParseInto(j, &steps);
  if (!s.ok()) return s;
  return std::make_unique<PostProcessor>(std::move(steps));
}

}  // namespace expertd::models
