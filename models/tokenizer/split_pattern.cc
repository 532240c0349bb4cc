#include "models/tokenizer/split_pattern.h"

#include "absl/strings/str_cat.h"

namespace expertd::models {

absl::StatusOr<SplitPattern> SplitPattern::FromJson(const nlohmann::json& j) {
  if (j.is_object() && j.contains("String") && j["String"].is_string()) {
    return Literal(j["String"].get<std::string>());
  }
  if (j.is_object() && j.contains("Regex") && j["Regex"].is_string()) {
    auto re = Regex::Compile(j["Regex"].get<std::string>());
    if (!re.ok()) return re.status();
    SplitPattern p;
    p.regex_ = std::move(re).value();
    return p;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("pattern must be {\"String\": ...} or {\"Regex\": ...}, got ", j.dump()));
}

SplitPattern SplitPattern::Literal(std::string s) {
  SplitPattern p;
  p.literal_ = std::move(s);
  return p;
}

void SplitPattern::FindAll(absl::string_view text,
                           std::vector<std::pair<size_t, size_t>>* out) const {
  if (regex_ != nullptr) {
    regex_->FindAll(text, out);
    return;
  }
  if (literal_.empty()) return;
  size_t pos = 0;
  while (true) {
    size_t f = text.find(literal_, pos);
    if (f == absl::string_view::npos) break;
    out->push_back({f, f + literal_.size()});
    pos = f + literal_.size();
  }
}

std::string SplitPattern::ReplaceAll(absl::string_view text, absl::string_view content) const {
  std::vector<std::pair<size_t, size_t>> m;
  FindAll(text, &m);
  if (m.empty()) return std::string(text);
  std::string out;
  out.reserve(text.size() + m.size() * content.size());
  size_t prev = 0;
  for (const auto& r : m) {
    out.append(text.data() + prev, r.first - prev);
    out.append(content.data(), content.size());
    prev = r.second;
  }
  out.append(text.data() + prev, text.size() - prev);
  return out;
}

}  // namespace expertd::models
