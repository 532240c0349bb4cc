// Parses chat-template tokens into a syntax tree. Everything the interpreter
// cannot run is rejected here, at load time, naming the construct: unknown
// statements ({% include %}, {% call %}...), filters, tests, functions and
// methods.
#ifndef EXPERTD_MODELS_CHAT_TEMPLATE_PARSER_H_
#define EXPERTD_MODELS_CHAT_TEMPLATE_PARSER_H_

#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "models/chat_template/ast.h"
#include "models/chat_template/lexer.h"

namespace expertd::chat_template {

absl::StatusOr<Body> Parse(std::vector<Token> tokens);

}  // namespace expertd::chat_template

#endif  // EXPERTD_MODELS_CHAT_TEMPLATE_PARSER_H_
