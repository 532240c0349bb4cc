// A model's chat template (the Jinja `chat_template` of tokenizer_config.json),
// rendered byte-for-byte as Hugging Face transformers renders it: jinja2's
// ImmutableSandboxedEnvironment with trim_blocks and lstrip_blocks, the
// raise_exception and strftime_now globals, HF's tojson, the loopcontrols
// extension, and the special tokens (bos_token, eos_token, ...) as variables.
//
// The interpreter covers the subset of Jinja real chat templates use; a
// template using anything else fails in Load, naming the construct, so a model
// whose template we cannot render is refused at load time, never mid-request.
#ifndef EXPERTD_MODELS_CHAT_TEMPLATE_CHAT_TEMPLATE_H_
#define EXPERTD_MODELS_CHAT_TEMPLATE_CHAT_TEMPLATE_H_

#include <map>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"

namespace expertd::chat_template {

struct Node;

// One compiled template. Immutable; Render is thread-safe.
class Template {
 public:
  static absl::StatusOr<Template> Load(absl::string_view source);
  // `variables` must be a JSON object. Errors: InvalidArgument, with
  // raise_exception's message verbatim, or "chat template line N: ...".
  absl::StatusOr<std::string> Render(const nlohmann::ordered_json& variables) const;

 private:
  std::shared_ptr<const std::vector<std::unique_ptr<Node>>> body_;
};

// What a chat completion passes to the template.
struct ChatRequest {
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  nlohmann::ordered_json tools;  // null when absent
  bool add_generation_prompt = true;
  // chat_template_kwargs (e.g. enable_thinking); they cannot override the above.
  nlohmann::ordered_json extra = nlohmann::ordered_json::object();
};

// The chat templates and special tokens of a tokenizer_config.json.
class ChatFormatter {
 public:
  // Parses tokenizer_config.json's text. A config without chat_template gives a
  // formatter with has_template() false. Fails when a template does not load.
  static absl::StatusOr<ChatFormatter> FromTokenizerConfig(absl::string_view json_text);
  // Reads `<model_dir>/tokenizer_config.json`; NotFound when it is absent.
  static absl::StatusOr<ChatFormatter> FromModelDir(const std::string& model_dir);

  // Replaces every template with `source` (a --chat_template file). Fails, naming
  // the construct, when it does not load.
  absl::Status OverrideTemplate(absl::string_view source);

  bool has_template() const { return !templates_.empty(); }
  // The string value of a special token ("" when unset).
  const std::string& bos_token() const { return bos_token_; }
  const std::string& eos_token() const { return eos_token_; }

  // Renders the "tool_use" template when tools are given and one exists, else
  // the default. FailedPrecondition without a template.
  absl::StatusOr<std::string> Render(const ChatRequest& request) const;

 private:
  std::map<std::string, Template> templates_;  // by name; "default" for a plain string
  nlohmann::ordered_json special_tokens_ = nlohmann::ordered_json::object();
  std::string bos_token_;
  std::string eos_token_;
};

}  // namespace expertd::chat_template

#endif  // EXPERTD_MODELS_CHAT_TEMPLATE_CHAT_TEMPLATE_H_
