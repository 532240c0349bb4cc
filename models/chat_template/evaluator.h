// Renders a parsed chat template: jinja2's semantics for scoping (a for-loop
// body is a scope per iteration; if/set/output are not scopes; namespace()
// objects are shared by reference), undefined values, loop.*, macros,
// break/continue.
#ifndef EXPERTD_MODELS_CHAT_TEMPLATE_EVALUATOR_H_
#define EXPERTD_MODELS_CHAT_TEMPLATE_EVALUATOR_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "models/chat_template/ast.h"
#include "models/chat_template/value.h"

namespace expertd::chat_template {

// `variables` is a dict (the render context). Thread-safe for concurrent calls
// on the same `body` (the tree is read-only while rendering).
absl::StatusOr<std::string> Render(const Body& body, const Value& variables);

}  // namespace expertd::chat_template

#endif  // EXPERTD_MODELS_CHAT_TEMPLATE_EVALUATOR_H_
