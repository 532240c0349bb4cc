#include "models/chat_template/chat_template.h"

#include <fstream>
#include <sstream>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "models/chat_template/ast.h"
#include "models/chat_template/evaluator.h"
#include "models/chat_template/lexer.h"
#include "models/chat_template/parser.h"

namespace expertd::chat_template {

absl::StatusOr<Template> Template::Load(absl::string_view source) {
  ASSIGN_OR_RETURN(std::vector<Token> tokens, Tokenize(source));
  ASSIGN_OR_RETURN(Body body, Parse(std::move(tokens)));
  Template t;
  t.body_ = std::make_shared<const Body>(std::move(body));
  return t;
}

absl::StatusOr<std::string> Template::Render(const nlohmann::ordered_json& variables) const {
  if (!variables.is_object())
    return absl::InvalidArgumentError("template variables must be an object");
  return chat_template::Render(*body_, Value::FromJson(variables));
}

namespace {

// A special token is a string or an AddedToken object {"content": ...}.
std::optional<std::string> TokenString(const nlohmann::ordered_json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string()) {
    return v["content"].get<std::string>();
  }
  return std::nullopt;
}

}  // namespace

absl::StatusOr<ChatFormatter> ChatFormatter::FromTokenizerConfig(absl::string_view json_text) {
  nlohmann::ordered_json config = nlohmann::ordered_json::parse(json_text, nullptr, false);
  if (config.is_discarded() || !config.is_object()) {
    return absl::InvalidArgumentError("tokenizer_config.json: not a JSON object");
  }
  ChatFormatter formatter;
  // transformers' special_tokens_map: the set tokens among these names.
  for (const char* name : {"bos_token", "eos_token", "unk_token", "sep_token", "pad_token",
                           "cls_token", "mask_token"}) {
    if (!config.contains(name)) continue;
    if (std::optional<std::string> token = TokenString(config[name])) {
      formatter.special_tokens_[name] = *token;
    }
  }
  if (config.contains("additional_special_tokens") &&
      config["additional_special_tokens"].is_array()) {
    nlohmann::ordered_json extra = nlohmann::ordered_json::array();
    for (const auto& t : config["additional_special_tokens"]) {
      if (std::optional<std::string> token = TokenString(t)) extra.push_back(*token);
    }
    formatter.special_tokens_["additional_special_tokens"] = extra;
  }
  formatter.bos_token_ = formatter.special_tokens_.value("bos_token", "");
  formatter.eos_token_ = formatter.special_tokens_.value("eos_token", "");
  const auto it = config.find("chat_template");
  if (it == config.end() || it->is_null()) return formatter;
  std::vector<std::pair<std::string, std::string>> sources;
  if (it->is_string()) {
    sources.emplace_back("default", it->get<std::string>());
  } else if (it->is_array()) {
    for (const auto& named : *it) {
      if (!named.is_object() || !named.value("name", nlohmann::ordered_json()).is_string() ||
          !named.value("template", nlohmann::ordered_json()).is_string()) {
        return absl::InvalidArgumentError(
            "tokenizer_config.json: chat_template entries need string name and template");
      }
      sources.emplace_back(named["name"].get<std::string>(), named["template"].get<std::string>());
    }
  } else {
    return absl::InvalidArgumentError(
        "tokenizer_config.json: chat_template must be a string or list");
  }
  for (auto& [name, source] : sources) {
    absl::StatusOr<Template> t = Template::Load(source);
    if (!t.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("tokenizer_config.json: chat_template '", name,
                       "' cannot be rendered: ", t.status().message()));
    }
    formatter.templates_.emplace(name, *std::move(t));
  }
  return formatter;
}

absl::Status ChatFormatter::OverrideTemplate(absl::string_view source) {
  ASSIGN_OR_RETURN(Template t, Template::Load(source));
  templates_.clear();
  templates_.emplace("default", std::move(t));
  return absl::OkStatus();
}

absl::StatusOr<ChatFormatter> ChatFormatter::FromModelDir(const std::string& model_dir) {
  const std::string path = model_dir + "/tokenizer_config.json";
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open"));
  std::stringstream text;
  text << in.rdbuf();
  absl::StatusOr<ChatFormatter> formatter = FromTokenizerConfig(text.str());
  if (!formatter.ok()) {
    return absl::Status(formatter.status().code(),
                        absl::StrCat(path, ": ", formatter.status().message()));
  }
  return formatter;
}

absl::StatusOr<std::string> ChatFormatter::Render(const ChatRequest& request) const {
  if (templates_.empty()) {
    return absl::FailedPreconditionError("the model has no chat template");
  }
  const bool has_tools = request.tools.is_array() && !request.tools.empty();
  auto chosen = templates_.find(has_tools ? "tool_use" : "default");
  if (chosen == templates_.end()) chosen = templates_.find("default");
  if (chosen == templates_.end()) chosen = templates_.begin();
  // transformers: render(messages=, tools=, documents=, add_generation_prompt=,
  // **special_tokens_map, **kwargs): kwargs override special tokens.
  nlohmann::ordered_json variables = special_tokens_;
  if (request.extra.is_object()) {
    for (const auto& [name, value] : request.extra.items()) variables[name] = value;
  }
  variables["messages"] = request.messages;
  variables["tools"] = request.tools;
  variables["documents"] = nullptr;
  variables["add_generation_prompt"] = request.add_generation_prompt;
  return chosen->second.Render(variables);
}

}  // namespace expertd::chat_template
