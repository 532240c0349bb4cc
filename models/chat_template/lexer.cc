#include "models/chat_template/lexer.h"

#include <algorithm>
#include <cctype>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "models/chat_template/value.h"

namespace expertd::chat_template {
namespace {

// str.splitlines() line breaks become "\n"; a final line break is dropped
// (jinja2 with keep_trailing_newline=False).
std::string NormalizeNewlines(absl::string_view source) {
  std::string out;
  out.reserve(source.size());
  std::vector<char32_t> cps = DecodeUtf8(source);
  for (size_t i = 0; i < cps.size(); ++i) {
    const char32_t cp = cps[i];
    const bool is_break = cp == '\n' || cp == '\r' || cp == 0x0b || cp == 0x0c || cp == 0x1c ||
                          cp == 0x1d || cp == 0x1e || cp == 0x85 || cp == 0x2028 || cp == 0x2029;
    if (!is_break) {
      AppendUtf8(cp, &out);
      continue;
    }
    if (cp == '\r' && i + 1 < cps.size() && cps[i + 1] == '\n') ++i;
    if (i + 1 < cps.size()) out += '\n';
  }
  return out;
}

// Python's str.rstrip() (Unicode whitespace).
std::string RStripUnicode(absl::string_view text) {
  std::vector<char32_t> cps = DecodeUtf8(text);
  while (!cps.empty() && IsPythonSpace(cps.back())) cps.pop_back();
  return EncodeUtf8(cps);
}

// Length of the Unicode whitespace run at the start of `text`.
size_t LeadingSpaceBytes(absl::string_view text) {
  size_t pos = 0;
  while (pos < text.size()) {
    const unsigned char c = text[pos];
    const size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : 4;
    std::vector<char32_t> cp = DecodeUtf8(text.substr(pos, len));
    if (cp.size() != 1 || !IsPythonSpace(cp[0])) break;
    pos += len;
  }
  return pos;
}

int LineAt(absl::string_view source, size_t pos) {
  return 1 + static_cast<int>(std::count(source.begin(), source.begin() + pos, '\n'));
}

absl::Status ErrorAt(absl::string_view source, size_t pos, absl::string_view message) {
  return absl::InvalidArgumentError(
      absl::StrCat("chat template line ", LineAt(source, pos), ": ", message));
}

// Python "unicode-escape" decoding of a string literal's body.
std::string Unescape(absl::string_view body) {
  std::string out;
  for (size_t i = 0; i < body.size(); ++i) {
    if (body[i] != '\\' || i + 1 == body.size()) {
      out += body[i];
      continue;
    }
    const char c = body[++i];
    auto hex = [&](size_t digits) {
      if (i + digits >= body.size()) return false;
      std::string h(body.substr(i + 1, digits));
      if (h.size() != digits || !std::all_of(h.begin(), h.end(), ::isxdigit)) return false;
      AppendUtf8(static_cast<char32_t>(std::stoul(h, nullptr, 16)), &out);
      i += digits;
      return true;
    };
    switch (c) {
      case 'n':
        out += '\n';
        break;
      case 't':
        out += '\t';
        break;
      case 'r':
        out += '\r';
        break;
      case 'b':
        out += '\b';
        break;
      case 'f':
        out += '\f';
        break;
      case 'v':
        out += '\v';
        break;
      case 'a':
        out += '\a';
        break;
      case '0':
        out += '\0';
        break;
      case '\\':
        out += '\\';
        break;
      case '\'':
        out += '\'';
        break;
      case '"':
        out += '"';
        break;
      case '\n':
        break;
      case 'x':
        if (!hex(2)) absl::StrAppend(&out, "\\x");
        break;
      case 'u':
        if (!hex(4)) absl::StrAppend(&out, "\\u");
        break;
      case 'U':
        if (!hex(8)) absl::StrAppend(&out, "\\U");
        break;
      default:
        out += '\\';
        out += c;
    }
  }
  return out;
}

const char* const kOperators[] = {"//", "**", "==", "!=", "<=", ">=", "+", "-", "*",
                                  "/",  "%",  "~",  "<",  ">",  "=",  "(", ")", "[",
                                  "]",  "{",  "}",  ",",  ".",  ":",  "|", ";"};

class Lexer {
 public:
  explicit Lexer(std::string source) : src_(std::move(source)) {}

  absl::StatusOr<std::vector<Token>> Run() {
    size_t pos = 0;
    bool line_starting = true;
    while (pos <= src_.size()) {
      const size_t tag = FindTag(pos);
      std::string text = src_.substr(pos, tag - pos);
      if (tag == src_.size()) {
        Emit(Token::Type::kText, std::move(text), pos);
        break;
      }
      const char kind = src_[tag + 1];  // '{', '%' or '#'
      const char modifier = tag + 2 < src_.size() ? src_[tag + 2] : '\0';
      if (modifier == '-') {
        text = RStripUnicode(text);
      } else if (modifier != '+' && kind != '{') {
        LStripBlock(&text, line_starting);
      }
      Emit(Token::Type::kText, std::move(text), pos);
      size_t inner = tag + 2 + (modifier == '-' || modifier == '+' ? 1 : 0);
      absl::StatusOr<size_t> end =
          kind == '#' ? SkipComment(tag, inner) : LexTag(tag, inner, kind == '%');
      if (!end.ok()) return end.status();
      line_starting = *end > 0 && src_[*end - 1] == '\n';
      pos = *end;
    }
    tokens_.push_back({Token::Type::kEof, "", LineAt(src_, src_.size())});
    return std::move(tokens_);
  }

 private:
  size_t FindTag(size_t pos) const {
    for (size_t i = pos; i + 1 < src_.size(); ++i) {
      if (src_[i] == '{' && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#')) {
        return i;
      }
    }
    return src_.size();
  }

  // lstrip_blocks: blanks between the line start and a block tag go.
  static void LStripBlock(std::string* text, bool line_starting) {
    const size_t nl = text->rfind('\n');
    const size_t l_pos = nl == std::string::npos ? 0 : nl + 1;
    if (l_pos == 0 && !line_starting) return;
    if (text->find_first_not_of(" \t", l_pos) == std::string::npos) text->resize(l_pos);
  }

  void Emit(Token::Type type, std::string text, size_t pos) {
    if (type == Token::Type::kText && text.empty()) return;
    tokens_.push_back({type, std::move(text), LineAt(src_, pos)});
  }

  // After an end tag: `-` eats all following whitespace; a plain block or
  // comment end eats one newline (trim_blocks); `+` keeps everything.
  size_t AfterEnd(size_t end, char modifier, bool is_block) const {
    if (modifier == '-') return end + LeadingSpaceBytes(absl::string_view(src_).substr(end));
    if (modifier != '+' && is_block && end < src_.size() && src_[end] == '\n') return end + 1;
    return end;
  }

  absl::StatusOr<size_t> SkipComment(size_t tag, size_t inner) {
    const size_t close = src_.find("#}", inner);
    if (close == std::string::npos) return ErrorAt(src_, tag, "unterminated comment");
    char modifier = close > inner ? src_[close - 1] : '\0';
    return AfterEnd(close + 2, modifier, /*is_block=*/true);
  }

  absl::StatusOr<size_t> LexTag(size_t tag, size_t pos, bool is_block) {
    Emit(is_block ? Token::Type::kBlockBegin : Token::Type::kVarBegin, "", tag);
    const std::string close = is_block ? "%}" : "}}";
    int depth = 0;
    while (true) {
      while (pos < src_.size() && std::isspace(static_cast<unsigned char>(src_[pos]))) ++pos;
      if (pos >= src_.size()) return ErrorAt(src_, tag, "unterminated tag");
      if (depth == 0) {
        for (char modifier : {'-', '+', '\0'}) {
          const std::string end = modifier ? std::string(1, modifier) + close : close;
          if (src_.compare(pos, end.size(), end) == 0) {
            Emit(is_block ? Token::Type::kBlockEnd : Token::Type::kVarEnd, "", pos);
            return AfterEnd(pos + end.size(), modifier, is_block);
          }
        }
      }
      absl::StatusOr<size_t> next = LexExpressionToken(pos, &depth);
      if (!next.ok()) return next.status();
      pos = *next;
    }
  }

  absl::StatusOr<size_t> LexExpressionToken(size_t pos, int* depth) {
    const char c = src_[pos];
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t end = pos;
      while (end < src_.size() &&
             (std::isalnum(static_cast<unsigned char>(src_[end])) || src_[end] == '_')) {
        ++end;
      }
      Emit(Token::Type::kName, src_.substr(pos, end - pos), pos);
      return end;
    }
    if (std::isdigit(static_cast<unsigned char>(c))) return LexNumber(pos);
    if (c == '\'' || c == '"') {
      size_t end = pos + 1;
      while (end < src_.size() && src_[end] != c) end += src_[end] == '\\' ? 2 : 1;
      if (end >= src_.size()) return ErrorAt(src_, pos, "unterminated string literal");
      Emit(Token::Type::kString, Unescape(absl::string_view(src_).substr(pos + 1, end - pos - 1)),
           pos);
      return end + 1;
    }
    for (const char* op : kOperators) {
      const size_t len = std::char_traits<char>::length(op);
      if (src_.compare(pos, len, op) != 0) continue;
      if (len == 1 && (c == '(' || c == '[' || c == '{')) ++*depth;
      if (len == 1 && (c == ')' || c == ']' || c == '}')) --*depth;
      Emit(Token::Type::kOperator, op, pos);
      return pos + len;
    }
    return ErrorAt(src_, pos, absl::StrCat("unexpected character '", std::string(1, c), "'"));
  }

  size_t LexNumber(size_t pos) {
    size_t end = pos;
    auto digits = [&] {
      while (end < src_.size() &&
             (std::isdigit(static_cast<unsigned char>(src_[end])) || src_[end] == '_')) {
        ++end;
      }
    };
    digits();
    bool is_float = false;
    if (end + 1 < src_.size() && src_[end] == '.' &&
        std::isdigit(static_cast<unsigned char>(src_[end + 1]))) {
      is_float = true;
      ++end;
      digits();
    }
    if (end < src_.size() && (src_[end] == 'e' || src_[end] == 'E')) {
      size_t exp = end + 1;
      if (exp < src_.size() && (src_[exp] == '+' || src_[exp] == '-')) ++exp;
      if (exp < src_.size() && std::isdigit(static_cast<unsigned char>(src_[exp]))) {
        is_float = true;
        end = exp;
        digits();
      }
    }
    std::string text = src_.substr(pos, end - pos);
    text.erase(std::remove(text.begin(), text.end(), '_'), text.end());
    Emit(is_float ? Token::Type::kFloat : Token::Type::kInt, std::move(text), pos);
    return end;
  }

  std::string src_;
  std::vector<Token> tokens_;
};

}  // namespace

absl::StatusOr<std::vector<Token>> Tokenize(absl::string_view source) {
  return Lexer(NormalizeNewlines(source)).Run();
}

}  // namespace expertd::chat_template
