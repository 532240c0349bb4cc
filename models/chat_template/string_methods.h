// Python str methods as chat templates call them (message.content.strip(),
// .split('</think>'), .startswith(...)). Case mapping is ASCII-only: non-ASCII
// letters keep their case (Python maps them; no template we know relies on it).
#ifndef EXPERTD_MODELS_CHAT_TEMPLATE_STRING_METHODS_H_
#define EXPERTD_MODELS_CHAT_TEMPLATE_STRING_METHODS_H_

#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "models/chat_template/builtins.h"
#include "models/chat_template/value.h"

namespace expertd::chat_template {

bool IsStringMethod(absl::string_view name);
absl::StatusOr<Value> CallStringMethod(const std::string& s, absl::string_view name,
                                       const Args& args);

// str.strip / lstrip / rstrip: `chars` nullopt strips Unicode whitespace.
std::string PyStrip(const std::string& s, const std::optional<std::string>& chars, bool left,
                    bool right);
std::string AsciiLower(std::string s);
std::string AsciiUpper(std::string s);
// str.capitalize().
std::string PyCapitalize(const std::string& s);
// str.replace(old, new, count).
std::string PyReplace(const std::string& s, const std::string& old, const std::string& repl,
                      int64_t count);

}  // namespace expertd::chat_template

#endif  // EXPERTD_MODELS_CHAT_TEMPLATE_STRING_METHODS_H_
