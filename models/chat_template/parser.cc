#include "models/chat_template/parser.h"

#include <set>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "models/chat_template/builtins.h"

namespace expertd::chat_template {
namespace {

using Type = Token::Type;

ExprPtr MakeExpr(Expr::Kind kind, int line) {
  auto e = std::make_unique<Expr>();
  e->kind = kind;
  e->line = line;
  return e;
}

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : tokens_(std::move(tokens)) {}

  absl::StatusOr<Body> ParseTemplate() {
    std::string ended;
    ASSIGN_OR_RETURN(Body body, ParseBody({}, &ended));
    RETURN_IF_ERROR(CheckCalls(body));
    return body;
  }

 private:
  const Token& Peek(size_t ahead = 0) const {
    return tokens_[std::min(pos_ + ahead, tokens_.size() - 1)];
  }
  const Token& Next() { return tokens_[std::min(pos_++, tokens_.size() - 1)]; }
  bool IsOp(absl::string_view op, size_t ahead = 0) const {
    return Peek(ahead).type == Type::kOperator && Peek(ahead).text == op;
  }
  bool IsName(absl::string_view name, size_t ahead = 0) const {
    return Peek(ahead).type == Type::kName && Peek(ahead).text == name;
  }
  absl::Status Error(absl::string_view message) const {
    return absl::InvalidArgumentError(
        absl::StrCat("chat template line ", Peek().line, ": ", message));
  }
  std::string Describe(const Token& t) const {
    switch (t.type) {
      case Type::kEof:
        return "end of template";
      case Type::kBlockEnd:
        return "'%}'";
      case Type::kVarEnd:
        return "'}}'";
      default:
        return absl::StrCat("'", t.text, "'");
    }
  }
  absl::Status Expect(absl::string_view op) {
    if (!IsOp(op)) return Error(absl::StrCat("expected '", op, "', got ", Describe(Peek())));
    ++pos_;
    return absl::OkStatus();
  }
  absl::Status ExpectType(Type type, absl::string_view what) {
    if (Peek().type != type)
      return Error(absl::StrCat("expected ", what, ", got ", Describe(Peek())));
    ++pos_;
    return absl::OkStatus();
  }
  absl::StatusOr<std::string> ExpectName() {
    if (Peek().type != Type::kName)
      return Error(absl::StrCat("expected a name, got ", Describe(Peek())));
    return Next().text;
  }

  // Statements ---------------------------------------------------------------

  absl::StatusOr<Body> ParseBody(const std::set<std::string>& end_keywords, std::string* ended) {
    Body body;
    while (true) {
      const Token& t = Peek();
      if (t.type == Type::kEof) {
        if (end_keywords.empty()) return body;
        std::string closer;
        for (const std::string& k : end_keywords) {
          if (absl::StartsWith(k, "end")) closer = k;
        }
        return Error(absl::StrCat("missing {% ", closer, " %}"));
      }
      if (t.type == Type::kText) {
        auto node = std::make_unique<Node>();
        node->kind = Node::Kind::kText;
        node->text = Next().text;
        body.push_back(std::move(node));
        continue;
      }
      if (t.type == Type::kVarBegin) {
        ++pos_;
        auto node = std::make_unique<Node>();
        node->kind = Node::Kind::kOutput;
        node->line = t.line;
        ASSIGN_OR_RETURN(node->expr, ParseTuple());
        RETURN_IF_ERROR(ExpectType(Type::kVarEnd, "'}}'"));
        body.push_back(std::move(node));
        continue;
      }
      RETURN_IF_ERROR(ExpectType(Type::kBlockBegin, "a tag"));
      ASSIGN_OR_RETURN(std::string keyword, ExpectName());
      if (end_keywords.count(keyword)) {
        *ended = keyword;
        return body;
      }
      ASSIGN_OR_RETURN(NodePtr node, ParseStatement(keyword));
      body.push_back(std::move(node));
    }
  }

  absl::StatusOr<NodePtr> ParseStatement(const std::string& keyword) {
    auto node = std::make_unique<Node>();
    node->line = Peek().line;
    if (keyword == "if") {
      RETURN_IF_ERROR(ParseIf(node.get()));
    } else if (keyword == "for") {
      RETURN_IF_ERROR(ParseFor(node.get()));
    } else if (keyword == "set") {
      RETURN_IF_ERROR(ParseSet(node.get()));
    } else if (keyword == "macro") {
      RETURN_IF_ERROR(ParseMacro(node.get()));
    } else if (keyword == "break" || keyword == "continue") {
      node->kind = keyword == "break" ? Node::Kind::kBreak : Node::Kind::kContinue;
      RETURN_IF_ERROR(ExpectType(Type::kBlockEnd, "'%}'"));
    } else if (keyword == "generation") {
      node->kind = Node::Kind::kScope;
      RETURN_IF_ERROR(ExpectType(Type::kBlockEnd, "'%}'"));
      std::string ended;
      ASSIGN_OR_RETURN(node->body, ParseBody({"endgeneration"}, &ended));
      RETURN_IF_ERROR(ExpectType(Type::kBlockEnd, "'%}'"));
    } else {
      --pos_;
      return Error(absl::StrCat("unsupported construct {% ", keyword, " %}"));
    }
    return node;
  }

  absl::Status ParseIf(Node* node) {
    node->kind = Node::Kind::kIf;
    std::string ended = "if";
    while (ended == "if" || ended == "elif") {
      ASSIGN_OR_RETURN(ExprPtr cond, ParseExpression());
      RETURN_IF_ERROR(ExpectType(Type::kBlockEnd, "'%}'"));
      ASSIGN_OR_RETURN(Body body, ParseBody({"elif", "else", "endif"}, &ended));
      node->branches.emplace_back(std::move(cond), std::move(body));
    }
    if (ended == "else") {
      RETURN_IF_ERROR(ExpectType(Type::kBlockEnd, "'%}'"));
      ASSIGN_OR_RETURN(node->else_body, ParseBody({"endif"}, &ended));
    }
    return ExpectType(Type::kBlockEnd, "'%}'");
  }

  absl::Status ParseTargets(Node* node) {
    do {
      ASSIGN_OR_RETURN(std::string target, ExpectName());
      node->targets.push_back(std::move(target));
    } while (IsOp(",") && (++pos_, true));
    return absl::OkStatus();
  }

  absl::Status ParseFor(Node* node) {
    node->kind = Node::Kind::kFor;
    bool parenthesized = IsOp("(");
    if (parenthesized) ++pos_;
    RETURN_IF_ERROR(ParseTargets(node));
    if (parenthesized) RETURN_IF_ERROR(Expect(")"));
    if (!IsName("in")) return Error("expected 'in' in {% for %}");
    ++pos_;
    ASSIGN_OR_RETURN(node->expr, ParseTuple(/*with_condition=*/false));
    if (IsName("if")) {
      ++pos_;
      ASSIGN_OR_RETURN(node->filter, ParseExpression());
    }
    if (IsName("recursive")) return Error("unsupported construct: recursive for loop");
    RETURN_IF_ERROR(ExpectType(Type::kBlockEnd, "'%}'"));
    std::string ended;
    ASSIGN_OR_RETURN(node->body, ParseBody({"else", "endfor"}, &ended));
    if (ended == "else") {
      RETURN_IF_ERROR(ExpectType(Type::kBlockEnd, "'%}'"));
      ASSIGN_OR_RETURN(node->else_body, ParseBody({"endfor"}, &ended));
    }
    return ExpectType(Type::kBlockEnd, "'%}'");
  }

  absl::Status ParseSet(Node* node) {
    node->kind = Node::Kind::kSet;
    RETURN_IF_ERROR(ParseTargets(node));
    if (node->targets.size() == 1 && IsOp(".")) {
      ++pos_;
      ASSIGN_OR_RETURN(node->name, ExpectName());
    }
    if (IsOp("=")) {
      ++pos_;
      ASSIGN_OR_RETURN(node->expr, ParseTuple());
      return ExpectType(Type::kBlockEnd, "'%}'");
    }
    if (node->targets.size() != 1 || !node->name.empty()) return Error("expected '=' in {% set %}");
    if (IsOp("|")) return Error("unsupported construct: filtered block {% set %}");
    node->kind = Node::Kind::kSetBlock;
    RETURN_IF_ERROR(ExpectType(Type::kBlockEnd, "'%}'"));
    std::string ended;
    ASSIGN_OR_RETURN(node->body, ParseBody({"endset"}, &ended));
    return ExpectType(Type::kBlockEnd, "'%}'");
  }

  absl::Status ParseMacro(Node* node) {
    node->kind = Node::Kind::kMacro;
    ASSIGN_OR_RETURN(node->name, ExpectName());
    macro_names_.insert(node->name);
    RETURN_IF_ERROR(Expect("("));
    while (!IsOp(")")) {
      if (!node->params.empty()) RETURN_IF_ERROR(Expect(","));
      ASSIGN_OR_RETURN(std::string param, ExpectName());
      ExprPtr default_value;
      if (IsOp("=")) {
        ++pos_;
        ASSIGN_OR_RETURN(default_value, ParseExpression());
      }
      node->params.emplace_back(std::move(param), std::move(default_value));
    }
    ++pos_;
    RETURN_IF_ERROR(ExpectType(Type::kBlockEnd, "'%}'"));
    std::string ended;
    ASSIGN_OR_RETURN(node->body, ParseBody({"endmacro"}, &ended));
    if (Peek().type == Type::kName) ++pos_;  // {% endmacro name %}
    return ExpectType(Type::kBlockEnd, "'%}'");
  }

  // Expressions (jinja2's precedence) ------------------------------------------

  absl::StatusOr<ExprPtr> ParseTuple(bool with_condition = true) {
    const int line = Peek().line;
    ASSIGN_OR_RETURN(ExprPtr first, with_condition ? ParseExpression() : ParseOr());
    if (!IsOp(",")) return first;
    auto tuple = MakeExpr(Expr::Kind::kTuple, line);
    tuple->children.push_back(std::move(first));
    while (IsOp(",")) {
      ++pos_;
      if (Peek().type == Type::kBlockEnd || Peek().type == Type::kVarEnd || IsOp(")")) break;
      ASSIGN_OR_RETURN(ExprPtr item, with_condition ? ParseExpression() : ParseOr());
      tuple->children.push_back(std::move(item));
    }
    return tuple;
  }

  absl::StatusOr<ExprPtr> ParseExpression() {
    ASSIGN_OR_RETURN(ExprPtr expr, ParseOr());
    while (IsName("if")) {
      const int line = Next().line;
      auto cond = MakeExpr(Expr::Kind::kCondition, line);
      ASSIGN_OR_RETURN(ExprPtr test, ParseOr());
      ExprPtr otherwise;
      if (IsName("else")) {
        ++pos_;
        ASSIGN_OR_RETURN(otherwise, ParseExpression());
      }
      cond->children.push_back(std::move(test));
      cond->children.push_back(std::move(expr));
      cond->children.push_back(std::move(otherwise));
      expr = std::move(cond);
    }
    return expr;
  }

  absl::StatusOr<ExprPtr> Binary(ExprPtr left, std::string op, ExprPtr right) {
    auto e = MakeExpr(Expr::Kind::kBinary, left->line);
    e->name = std::move(op);
    e->children.push_back(std::move(left));
    e->children.push_back(std::move(right));
    return e;
  }

  absl::StatusOr<ExprPtr> ParseOr() {
    ASSIGN_OR_RETURN(ExprPtr left, ParseAnd());
    while (IsName("or")) {
      ++pos_;
      ASSIGN_OR_RETURN(ExprPtr right, ParseAnd());
      ASSIGN_OR_RETURN(left, Binary(std::move(left), "or", std::move(right)));
    }
    return left;
  }

  absl::StatusOr<ExprPtr> ParseAnd() {
    ASSIGN_OR_RETURN(ExprPtr left, ParseNot());
    while (IsName("and")) {
      ++pos_;
      ASSIGN_OR_RETURN(ExprPtr right, ParseNot());
      ASSIGN_OR_RETURN(left, Binary(std::move(left), "and", std::move(right)));
    }
    return left;
  }

  absl::StatusOr<ExprPtr> ParseNot() {
    if (IsName("not")) {
      auto e = MakeExpr(Expr::Kind::kNot, Next().line);
      ASSIGN_OR_RETURN(ExprPtr operand, ParseNot());
      e->children.push_back(std::move(operand));
      return e;
    }
    return ParseCompare();
  }

  absl::StatusOr<ExprPtr> ParseCompare() {
    ASSIGN_OR_RETURN(ExprPtr first, ParseMath1());
    ExprPtr compare;
    while (true) {
      std::string op;
      if (Peek().type == Type::kOperator &&
          (Peek().text == "==" || Peek().text == "!=" || Peek().text == "<" ||
           Peek().text == "<=" || Peek().text == ">" || Peek().text == ">=")) {
        op = Next().text;
      } else if (IsName("in")) {
        ++pos_;
        op = "in";
      } else if (IsName("not") && IsName("in", 1)) {
        pos_ += 2;
        op = "notin";
      } else {
        break;
      }
      if (!compare) {
        compare = MakeExpr(Expr::Kind::kCompare, first->line);
        compare->children.push_back(std::move(first));
      }
      ASSIGN_OR_RETURN(ExprPtr operand, ParseMath1());
      compare->ops.push_back(op);
      compare->children.push_back(std::move(operand));
    }
    return compare ? std::move(compare) : std::move(first);
  }

  template <typename Sub>
  absl::StatusOr<ExprPtr> ParseLeftAssoc(std::initializer_list<const char*> ops, Sub sub) {
    ASSIGN_OR_RETURN(ExprPtr left, (this->*sub)());
    while (true) {
      const char* matched = nullptr;
      for (const char* op : ops) {
        if (IsOp(op)) matched = op;
      }
      if (matched == nullptr) return left;
      ++pos_;
      ASSIGN_OR_RETURN(ExprPtr right, (this->*sub)());
      ASSIGN_OR_RETURN(left, Binary(std::move(left), matched, std::move(right)));
    }
  }

  absl::StatusOr<ExprPtr> ParseMath1() { return ParseLeftAssoc({"+", "-"}, &Parser::ParseConcat); }
  absl::StatusOr<ExprPtr> ParseConcat() { return ParseLeftAssoc({"~"}, &Parser::ParseMath2); }
  absl::StatusOr<ExprPtr> ParseMath2() {
    return ParseLeftAssoc({"*", "/", "//", "%"}, &Parser::ParsePow);
  }
  absl::StatusOr<ExprPtr> ParsePow() { return ParseLeftAssoc({"**"}, &Parser::ParseUnaryFiltered); }
  absl::StatusOr<ExprPtr> ParseUnaryFiltered() { return ParseUnary(true); }

  absl::StatusOr<ExprPtr> ParseUnary(bool with_filter) {
    ExprPtr node;
    if (IsOp("-") || IsOp("+")) {
      const Expr::Kind kind = IsOp("-") ? Expr::Kind::kNeg : Expr::Kind::kPos;
      node = MakeExpr(kind, Next().line);
      ASSIGN_OR_RETURN(ExprPtr operand, ParseUnary(false));
      node->children.push_back(std::move(operand));
    } else {
      ASSIGN_OR_RETURN(node, ParsePrimary());
    }
    ASSIGN_OR_RETURN(node, ParsePostfix(std::move(node)));
    if (!with_filter) return node;
    return ParseFilterExpr(std::move(node));
  }

  absl::StatusOr<ExprPtr> ParsePrimary() {
    const Token& t = Peek();
    auto literal = [&](Value v) {
      auto e = MakeExpr(Expr::Kind::kLiteral, t.line);
      e->literal = std::move(v);
      return e;
    };
    switch (t.type) {
      case Type::kName: {
        ++pos_;
        if (t.text == "true" || t.text == "True") return literal(Value::Bool(true));
        if (t.text == "false" || t.text == "False") return literal(Value::Bool(false));
        if (t.text == "none" || t.text == "None") return literal(Value::None());
        auto e = MakeExpr(Expr::Kind::kName, t.line);
        e->name = t.text;
        return e;
      }
      case Type::kString: {
        std::string s;
        while (Peek().type == Type::kString) s += Next().text;
        return literal(Value::String(std::move(s)));
      }
      case Type::kInt:
        ++pos_;
        return literal(Value::Int(std::stoll(t.text)));
      case Type::kFloat:
        ++pos_;
        return literal(Value::Float(std::stod(t.text)));
      default:
        break;
    }
    if (IsOp("(")) {
      ++pos_;
      if (IsOp(")")) {
        ++pos_;
        return MakeExpr(Expr::Kind::kTuple, t.line);
      }
      ASSIGN_OR_RETURN(ExprPtr inner, ParseTuple());
      RETURN_IF_ERROR(Expect(")"));
      return inner;
    }
    if (IsOp("[")) return ParseSequence(Expr::Kind::kList, "]");
    if (IsOp("{")) return ParseSequence(Expr::Kind::kDict, "}");
    return Error(absl::StrCat("unexpected ", Describe(t)));
  }

  absl::StatusOr<ExprPtr> ParseSequence(Expr::Kind kind, absl::string_view close) {
    auto e = MakeExpr(kind, Next().line);
    while (!IsOp(close)) {
      if (!e->children.empty()) {
        RETURN_IF_ERROR(Expect(","));
        if (IsOp(close)) break;
      }
      ASSIGN_OR_RETURN(ExprPtr item, ParseExpression());
      e->children.push_back(std::move(item));
      if (kind == Expr::Kind::kDict) {
        RETURN_IF_ERROR(Expect(":"));
        ASSIGN_OR_RETURN(ExprPtr value, ParseExpression());
        e->children.push_back(std::move(value));
      }
    }
    ++pos_;
    return e;
  }

  absl::StatusOr<ExprPtr> ParsePostfix(ExprPtr node) {
    while (true) {
      if (IsOp(".")) {
        const int line = Next().line;
        if (Peek().type == Type::kInt) {
          auto e = MakeExpr(Expr::Kind::kSubscript, line);
          auto index = MakeExpr(Expr::Kind::kLiteral, line);
          index->literal = Value::Int(std::stoll(Next().text));
          e->children.push_back(std::move(node));
          e->children.push_back(std::move(index));
          node = std::move(e);
          continue;
        }
        auto e = MakeExpr(Expr::Kind::kAttr, line);
        ASSIGN_OR_RETURN(e->name, ExpectName());
        e->children.push_back(std::move(node));
        node = std::move(e);
      } else if (IsOp("[")) {
        ASSIGN_OR_RETURN(node, ParseSubscript(std::move(node)));
      } else if (IsOp("(")) {
        ASSIGN_OR_RETURN(node, ParseCall(std::move(node)));
      } else {
        return node;
      }
    }
  }

  absl::StatusOr<ExprPtr> ParseSubscript(ExprPtr node) {
    const int line = Next().line;
    ExprPtr parts[3];
    int part = 0;
    bool is_slice = false;
    while (!IsOp("]")) {
      if (IsOp(":")) {
        ++pos_;
        is_slice = true;
        if (++part > 2) return Error("too many ':' in slice");
        continue;
      }
      if (parts[part]) return Error("expected ']'");
      ASSIGN_OR_RETURN(parts[part], ParseExpression());
    }
    ++pos_;
    auto e = MakeExpr(is_slice ? Expr::Kind::kSlice : Expr::Kind::kSubscript, line);
    e->children.push_back(std::move(node));
    if (!is_slice && !parts[0]) return Error("empty subscript");
    e->children.push_back(std::move(parts[0]));
    if (is_slice) {
      e->children.push_back(std::move(parts[1]));
      e->children.push_back(std::move(parts[2]));
    }
    return e;
  }

  absl::Status ParseArgs(Expr* e) {
    RETURN_IF_ERROR(Expect("("));
    int seen = 0;
    while (!IsOp(")")) {
      if (seen++ > 0) {
        RETURN_IF_ERROR(Expect(","));
        if (IsOp(")")) break;
      }
      if (Peek().type == Type::kName && IsOp("=", 1)) {
        std::string key = Next().text;
        ++pos_;
        ASSIGN_OR_RETURN(ExprPtr value, ParseExpression());
        e->kwargs.emplace_back(std::move(key), std::move(value));
      } else {
        if (IsOp("*") || IsOp("**")) return Error("unsupported construct: * or ** arguments");
        ASSIGN_OR_RETURN(ExprPtr value, ParseExpression());
        e->children.push_back(std::move(value));
      }
    }
    ++pos_;
    return absl::OkStatus();
  }

  absl::StatusOr<ExprPtr> ParseCall(ExprPtr callee) {
    auto e = MakeExpr(Expr::Kind::kCall, callee->line);
    e->children.push_back(std::move(callee));
    RETURN_IF_ERROR(ParseArgs(e.get()));
    return e;
  }

  absl::StatusOr<ExprPtr> ParseFilterExpr(ExprPtr node) {
    while (true) {
      if (IsOp("|")) {
        auto e = MakeExpr(Expr::Kind::kFilter, Next().line);
        ASSIGN_OR_RETURN(e->name, ExpectName());
        if (!IsKnownFilter(e->name)) {
          return Error(absl::StrCat("unsupported filter '", e->name, "'"));
        }
        e->children.push_back(std::move(node));
        if (IsOp("(")) {
          RETURN_IF_ERROR(ParseArgs(e.get()));
        }
        node = std::move(e);
      } else if (IsName("is")) {
        ASSIGN_OR_RETURN(node, ParseTest(std::move(node)));
      } else if (IsOp("(")) {
        ASSIGN_OR_RETURN(node, ParseCall(std::move(node)));
      } else {
        return node;
      }
    }
  }

  absl::StatusOr<ExprPtr> ParseTest(ExprPtr node) {
    auto e = MakeExpr(Expr::Kind::kTest, Next().line);
    if (IsName("not")) {
      ++pos_;
      e->negated = true;
    }
    ASSIGN_OR_RETURN(e->name, ExpectName());
    if (!IsKnownTest(e->name)) return Error(absl::StrCat("unsupported test '", e->name, "'"));
    e->children.push_back(std::move(node));
    if (IsOp("(")) {
      RETURN_IF_ERROR(ParseArgs(e.get()));
    } else if ((Peek().type == Type::kName || Peek().type == Type::kString ||
                Peek().type == Type::kInt || Peek().type == Type::kFloat || IsOp("[") ||
                IsOp("{")) &&
               !IsName("else") && !IsName("or") && !IsName("and") && !IsName("is")) {
      ASSIGN_OR_RETURN(ExprPtr arg, ParsePrimary());
      ASSIGN_OR_RETURN(arg, ParsePostfix(std::move(arg)));
      e->children.push_back(std::move(arg));
    }
    return e;
  }

  // Load-time check that every call names something the interpreter has.
  absl::Status CheckExpr(const Expr& e) {
    if (e.kind == Expr::Kind::kCall) {
      const Expr& callee = *e.children[0];
      if (callee.kind == Expr::Kind::kName) {
        if (!IsKnownGlobal(callee.name) && !macro_names_.count(callee.name)) {
          return absl::InvalidArgumentError(absl::StrCat(
              "chat template line ", e.line, ": unsupported function '", callee.name, "'"));
        }
      } else if (callee.kind == Expr::Kind::kAttr) {
        if (!IsKnownMethod(callee.name)) {
          return absl::InvalidArgumentError(absl::StrCat(
              "chat template line ", e.line, ": unsupported method '", callee.name, "'"));
        }
      } else {
        return absl::InvalidArgumentError(
            absl::StrCat("chat template line ", e.line, ": unsupported call expression"));
      }
    }
    for (const auto& child : e.children) {
      if (child) RETURN_IF_ERROR(CheckExpr(*child));
    }
    for (const auto& [key, value] : e.kwargs) RETURN_IF_ERROR(CheckExpr(*value));
    return absl::OkStatus();
  }

  absl::Status CheckCalls(const Body& body) {
    for (const auto& node : body) {
      if (node->expr) RETURN_IF_ERROR(CheckExpr(*node->expr));
      if (node->filter) RETURN_IF_ERROR(CheckExpr(*node->filter));
      for (const auto& [cond, branch] : node->branches) {
        RETURN_IF_ERROR(CheckExpr(*cond));
        RETURN_IF_ERROR(CheckCalls(branch));
      }
      for (const auto& [name, value] : node->params) {
        if (value) RETURN_IF_ERROR(CheckExpr(*value));
      }
      RETURN_IF_ERROR(CheckCalls(node->body));
      RETURN_IF_ERROR(CheckCalls(node->else_body));
    }
    return absl::OkStatus();
  }

  std::vector<Token> tokens_;
  size_t pos_ = 0;
  std::set<std::string> macro_names_;
};

}  // namespace

absl::StatusOr<Body> Parse(std::vector<Token> tokens) {
  return Parser(std::move(tokens)).ParseTemplate();
}

}  // namespace expertd::chat_template
