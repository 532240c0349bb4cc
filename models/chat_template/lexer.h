// Splits a chat template into tokens the way jinja2's lexer does under Hugging
// Face's settings: newlines normalised and one trailing newline dropped,
// trim_blocks (the newline after a block or comment tag goes), lstrip_blocks
// (blanks before a block or comment tag on its own line go), and the `-` / `+`
// whitespace-control modifiers.
#ifndef EXPERTD_MODELS_CHAT_TEMPLATE_LEXER_H_
#define EXPERTD_MODELS_CHAT_TEMPLATE_LEXER_H_

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace expertd::chat_template {

struct Token {
  enum class Type {
    kText,        // literal output; `text` holds it
    kVarBegin,    // {{
    kVarEnd,      // }}
    kBlockBegin,  // {%
    kBlockEnd,    // %}
    kName,        // identifier or keyword
    kString,      // string literal, unescaped into `text`
    kInt,
    kFloat,
    kOperator,  // `text` holds it: + - * / // % ** ~ == != < <= > >= = ( ) [ ] { } , . : |
    kEof,
  };
  Type type;
  std::string text;
  int line = 1;
};

// REQUIRES nothing; fails on an unterminated tag, comment or string, or a
// character that cannot start a token, naming the line.
absl::StatusOr<std::vector<Token>> Tokenize(absl::string_view source);

}  // namespace expertd::chat_template

#endif  // EXPERTD_MODELS_CHAT_TEMPLATE_LEXER_H_
