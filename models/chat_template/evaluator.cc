#include "models/chat_template/evaluator.h"

#include <cmath>
#include <map>
#include <unordered_map>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "models/chat_template/builtins.h"

namespace expertd::chat_template {
namespace {

// A variable scope; lookups walk to the parent.
struct Scope {
  const Scope* parent = nullptr;
  std::unordered_map<std::string, Value> vars;

  const Value* Lookup(const std::string& name) const {
    for (const Scope* s = this; s != nullptr; s = s->parent) {
      auto it = s->vars.find(name);
      if (it != s->vars.end()) return &it->second;
    }
    return nullptr;
  }
};

enum class Flow { kNormal, kBreak, kContinue };

// Bounds a template cannot exceed: jinja2 would run forever or exhaust memory;
// we fail the request instead.
constexpr int kMaxDepth = 200;
constexpr size_t kMaxOutputBytes = 64 << 20;

absl::Status LineError(int line, absl::string_view message) {
  return absl::InvalidArgumentError(absl::StrCat("chat template line ", line, ": ", message));
}

absl::Status WithLine(int line, const absl::Status& status) {
  if (status.ok() || absl::StartsWith(status.message(), "chat template line") ||
      IsRaisedByTemplate(status)) {
    return status;
  }
  return LineError(line, status.message());
}

absl::StatusOr<Value> Arithmetic(const std::string& op, const Value& a, const Value& b) {
  if (a.is_undefined() || b.is_undefined()) {
    const Value& u = a.is_undefined() ? a : b;
    return absl::InvalidArgumentError(
        u.undefined_name().empty() ? "undefined value in arithmetic"
                                   : absl::StrCat("'", u.undefined_name(), "' is undefined"));
  }
  if (op == "+") {
    if (a.is_string() && b.is_string()) return Value::String(a.string_value() + b.string_value());
    if (a.is_list() && b.is_list()) {
      List items = a.list();
      items.insert(items.end(), b.list().begin(), b.list().end());
      return Value::MakeList(std::move(items));
    }
  }
  if (op == "*" && (a.is_string() || a.is_list() || b.is_string() || b.is_list())) {
    const Value& seq = a.is_string() || a.is_list() ? a : b;
    const Value& times = a.is_string() || a.is_list() ? b : a;
    if (times.is_number() && !times.is_float()) {
      const int64_t n = std::min<int64_t>(times.int_value(), 1 << 20);
      if (seq.is_string()) {
        std::string out;
        for (int64_t i = 0; i < n; ++i) out += seq.string_value();
        return Value::String(std::move(out));
      }
      List out;
      for (int64_t i = 0; i < n; ++i) out.insert(out.end(), seq.list().begin(), seq.list().end());
      return Value::MakeList(std::move(out));
    }
  }
  if (!a.is_number() || !b.is_number()) {
    return absl::InvalidArgumentError(absl::StrCat("unsupported operand type(s) for ", op, ": '",
                                                   a.TypeName(), "' and '", b.TypeName(), "'"));
  }
  const bool floats = a.is_float() || b.is_float();
  const double x = a.float_value(), y = b.float_value();
  const int64_t i = a.int_value(), j = b.int_value();
  if ((op == "/" || op == "//" || op == "%") && (floats ? y == 0 : j == 0)) {
    return absl::InvalidArgumentError("division by zero");
  }
  if (op == "+") return floats ? Value::Float(x + y) : Value::Int(i + j);
  if (op == "-") return floats ? Value::Float(x - y) : Value::Int(i - j);
  if (op == "*") return floats ? Value::Float(x * y) : Value::Int(i * j);
  if (op == "/") return Value::Float(x / y);
  if (op == "//") {
    if (floats) return Value::Float(std::floor(x / y));
    int64_t q = i / j;
    if ((i % j != 0) && ((i < 0) != (j < 0))) --q;
    return Value::Int(q);
  }
  if (op == "%") {
    if (floats) {
      double r = std::fmod(x, y);
      if (r != 0 && ((r < 0) != (y < 0))) r += y;
      return Value::Float(r);
    }
    int64_t r = i % j;
    if (r != 0 && ((r < 0) != (j < 0))) r += j;
    return Value::Int(r);
  }
  if (op == "**") {
    if (!floats && j >= 0) {
      int64_t r = 1;
      for (int64_t k = 0; k < j && k < 64; ++k) r *= i;
      return Value::Int(r);
    }
    return Value::Float(std::pow(x, y));
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown operator ", op));
}

absl::StatusOr<Value> Slice(const Value& v, const Value& start, const Value& stop,
                            const Value& step) {
  if (v.is_undefined()) return GetItem(v, Value::String("slice"));
  const bool is_string = v.is_string();
  std::vector<char32_t> chars;
  if (is_string) chars = DecodeUtf8(v.string_value());
  if (!is_string && !v.is_list()) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", v.TypeName(), "' object is not subscriptable"));
  }
  const int64_t n = is_string ? chars.size() : v.list().size();
  auto bound = [](const Value& b) -> absl::StatusOr<std::optional<int64_t>> {
    if (b.is_undefined() || b.is_none()) return std::optional<int64_t>();
    if (!b.is_number() || b.is_float())
      return absl::InvalidArgumentError("slice indices must be integers");
    return std::optional<int64_t>(b.int_value());
  };
  ASSIGN_OR_RETURN(auto step_v, bound(step));
  const int64_t s = step_v.value_or(1);
  if (s == 0) return absl::InvalidArgumentError("slice step cannot be zero");
  ASSIGN_OR_RETURN(auto start_v, bound(start));
  ASSIGN_OR_RETURN(auto stop_v, bound(stop));
  auto clamp = [&](std::optional<int64_t> x, int64_t fallback) {
    if (!x) return fallback;
    int64_t y = *x < 0 ? *x + n : *x;
    if (s > 0) return std::clamp<int64_t>(y, 0, n);
    return std::clamp<int64_t>(y, -1, n - 1);
  };
  const int64_t lo = clamp(start_v, s > 0 ? 0 : n - 1);
  const int64_t hi = clamp(stop_v, s > 0 ? n : -1);
  List items;
  std::vector<char32_t> out_chars;
  for (int64_t k = lo; s > 0 ? k < hi : k > hi; k += s) {
    if (is_string) {
      out_chars.push_back(chars[k]);
    } else {
      items.push_back(v.list()[k]);
    }
  }
  if (is_string) return Value::String(EncodeUtf8(out_chars));
  return Value::MakeList(std::move(items));
}

class Renderer {
 public:
  explicit Renderer(const Body& root) : root_(root) {}

  absl::StatusOr<std::string> Run(const Value& variables) {
    Scope globals;
    root_scope_ = &globals;
    if (variables.is_dict()) {
      for (const auto& [key, value] : variables.dict()) globals.vars[key] = value;
    }
    std::string out;
    ASSIGN_OR_RETURN(Flow flow, RenderBody(root_, &globals, &out));
    (void)flow;
    return out;
  }

 private:
  absl::StatusOr<Flow> RenderBody(const Body& body, Scope* scope, std::string* out) {
    if (++depth_ > kMaxDepth) return absl::InvalidArgumentError("chat template recursion too deep");
    for (const NodePtr& node : body) {
      absl::StatusOr<Flow> flow = RenderNode(*node, scope, out);
      if (!flow.ok()) {
        --depth_;
        return WithLine(node->line, flow.status());
      }
      if (*flow != Flow::kNormal) {
        --depth_;
        return *flow;
      }
      if (out->size() > kMaxOutputBytes)
        return absl::InvalidArgumentError("chat template output too large");
    }
    --depth_;
    return Flow::kNormal;
  }

  absl::StatusOr<Flow> RenderNode(const Node& node, Scope* scope, std::string* out) {
    switch (node.kind) {
      case Node::Kind::kText:
        *out += node.text;
        return Flow::kNormal;
      case Node::Kind::kOutput: {
        ASSIGN_OR_RETURN(Value v, Eval(*node.expr, *scope));
        *out += ToPythonStr(v);
        return Flow::kNormal;
      }
      case Node::Kind::kIf:
        for (const auto& [cond, branch] : node.branches) {
          ASSIGN_OR_RETURN(Value test, Eval(*cond, *scope));
          if (test.Truthy()) return RenderBody(branch, scope, out);
        }
        return RenderBody(node.else_body, scope, out);
      case Node::Kind::kFor:
        return RenderFor(node, scope, out);
      case Node::Kind::kSet: {
        ASSIGN_OR_RETURN(Value v, Eval(*node.expr, *scope));
        RETURN_IF_ERROR(Assign(node, std::move(v), scope));
        return Flow::kNormal;
      }
      case Node::Kind::kSetBlock: {
        std::string captured;
        ASSIGN_OR_RETURN(Flow flow, RenderBody(node.body, scope, &captured));
        (void)flow;
        scope->vars[node.targets[0]] = Value::String(std::move(captured));
        return Flow::kNormal;
      }
      case Node::Kind::kMacro:
        macros_[node.name] = &node;
        return Flow::kNormal;
      case Node::Kind::kBreak:
        return Flow::kBreak;
      case Node::Kind::kContinue:
        return Flow::kContinue;
      case Node::Kind::kScope:
        return RenderBody(node.body, scope, out);
    }
    return Flow::kNormal;
  }

  absl::Status Assign(const Node& node, Value v, Scope* scope) {
    if (!node.name.empty()) {
      const Value* ns = scope->Lookup(node.targets[0]);
      if (ns == nullptr || ns->kind() != Value::Kind::kNamespace) {
        return LineError(node.line, "can only assign attributes of a namespace()");
      }
      Dict& fields = ns->mutable_namespace();
      for (auto& [key, value] : fields) {
        if (key == node.name) {
          value = std::move(v);
          return absl::OkStatus();
        }
      }
      fields.emplace_back(node.name, std::move(v));
      return absl::OkStatus();
    }
    return Unpack(node.targets, v, scope, node.line);
  }

  static absl::Status Unpack(const std::vector<std::string>& targets, const Value& v, Scope* scope,
                             int line) {
    if (targets.size() == 1) {
      scope->vars[targets[0]] = v;
      return absl::OkStatus();
    }
    ASSIGN_OR_RETURN(List items, Iterate(v));
    if (items.size() != targets.size()) {
      return LineError(line, absl::StrCat("cannot unpack ", items.size(), " values into ",
                                          targets.size(), " names"));
    }
    for (size_t i = 0; i < targets.size(); ++i) scope->vars[targets[i]] = items[i];
    return absl::OkStatus();
  }

  absl::StatusOr<Flow> RenderFor(const Node& node, Scope* scope, std::string* out) {
    ASSIGN_OR_RETURN(Value iterable, Eval(*node.expr, *scope));
    ASSIGN_OR_RETURN(List all, Iterate(iterable));
    List items;
    for (const Value& item : all) {
      if (node.filter) {
        Scope probe{scope, {}};
        RETURN_IF_ERROR(Unpack(node.targets, item, &probe, node.line));
        ASSIGN_OR_RETURN(Value keep, Eval(*node.filter, probe));
        if (!keep.Truthy()) continue;
      }
      items.push_back(item);
    }
    if (items.empty()) return RenderBody(node.else_body, scope, out);
    const int64_t n = items.size();
    for (int64_t i = 0; i < n; ++i) {
      Scope iteration{scope, {}};
      RETURN_IF_ERROR(Unpack(node.targets, items[i], &iteration, node.line));
      Dict loop = {{"index", Value::Int(i + 1)},
                   {"index0", Value::Int(i)},
                   {"revindex", Value::Int(n - i)},
                   {"revindex0", Value::Int(n - i - 1)},
                   {"first", Value::Bool(i == 0)},
                   {"last", Value::Bool(i == n - 1)},
                   {"length", Value::Int(n)},
                   {"depth", Value::Int(1)},
                   {"depth0", Value::Int(0)},
                   {"previtem", i > 0 ? items[i - 1] : Value::Undefined()},
                   {"nextitem", i + 1 < n ? items[i + 1] : Value::Undefined()}};
      iteration.vars["loop"] = Value::MakeDict(std::move(loop));
      ASSIGN_OR_RETURN(Flow flow, RenderBody(node.body, &iteration, out));
      if (flow == Flow::kBreak) break;
    }
    return Flow::kNormal;
  }

  absl::StatusOr<Args> EvalArgs(const Expr& e, size_t first, const Scope& scope) {
    Args args;
    for (size_t i = first; i < e.children.size(); ++i) {
      ASSIGN_OR_RETURN(Value v, Eval(*e.children[i], scope));
      args.positional.push_back(std::move(v));
    }
    for (const auto& [key, value] : e.kwargs) {
      ASSIGN_OR_RETURN(Value v, Eval(*value, scope));
      args.keyword.emplace_back(key, std::move(v));
    }
    return args;
  }

  absl::StatusOr<Value> CallMacro(const Node& macro, const Args& args) {
    Scope locals{root_scope_, {}};
    if (args.positional.size() > macro.params.size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "macro '", macro.name, "' takes not more than ", macro.params.size(), " argument(s)"));
    }
    for (size_t i = 0; i < macro.params.size(); ++i) {
      const auto& [param, default_value] = macro.params[i];
      const Value* given = args.Get(i, param);
      if (given) {
        locals.vars[param] = *given;
      } else if (default_value) {
        ASSIGN_OR_RETURN(locals.vars[param], Eval(*default_value, locals));
      } else {
        locals.vars[param] = Value::Undefined(param);
      }
    }
    std::string out;
    ASSIGN_OR_RETURN(Flow flow, RenderBody(macro.body, &locals, &out));
    (void)flow;
    return Value::String(std::move(out));
  }

  absl::StatusOr<Value> EvalCall(const Expr& e, const Scope& scope) {
    const Expr& callee = *e.children[0];
    ASSIGN_OR_RETURN(Args args, EvalArgs(e, 1, scope));
    if (callee.kind == Expr::Kind::kName) {
      auto macro = macros_.find(callee.name);
      if (macro != macros_.end()) return CallMacro(*macro->second, args);
      if (IsKnownGlobal(callee.name)) return CallGlobal(callee.name, args);
      return absl::InvalidArgumentError(absl::StrCat("'", callee.name, "' is undefined"));
    }
    ASSIGN_OR_RETURN(Value object, Eval(*callee.children[0], scope));
    return CallMethod(object, callee.name, args);
  }

  absl::StatusOr<Value> EvalCompare(const Expr& e, const Scope& scope) {
    ASSIGN_OR_RETURN(Value left, Eval(*e.children[0], scope));
    for (size_t i = 0; i < e.ops.size(); ++i) {
      ASSIGN_OR_RETURN(Value right, Eval(*e.children[i + 1], scope));
      const std::string& op = e.ops[i];
      bool result;
      if (op == "==" || op == "!=") {
        result = Equals(left, right) == (op == "==");
      } else if (op == "in" || op == "notin") {
        Args args;
        args.positional.push_back(right);
        ASSIGN_OR_RETURN(bool in, ApplyTest("in", left, args));
        result = in == (op == "in");
      } else {
        if (left.is_undefined() || right.is_undefined()) {
          return absl::InvalidArgumentError("undefined value in comparison");
        }
        if (op == "<") {
          ASSIGN_OR_RETURN(result, LessThan(left, right));
        } else if (op == ">") {
          ASSIGN_OR_RETURN(result, LessThan(right, left));
        } else if (op == "<=") {
          ASSIGN_OR_RETURN(bool greater, LessThan(right, left));
          result = !greater;
        } else {
          ASSIGN_OR_RETURN(bool less, LessThan(left, right));
          result = !less;
        }
      }
      if (!result) return Value::Bool(false);
      left = std::move(right);
    }
    return Value::Bool(true);
  }

  absl::StatusOr<Value> Eval(const Expr& e, const Scope& scope) {
    switch (e.kind) {
      case Expr::Kind::kLiteral:
        return e.literal;
      case Expr::Kind::kName: {
        const Value* v = scope.Lookup(e.name);
        return v ? *v : Value::Undefined(e.name);
      }
      case Expr::Kind::kList:
      case Expr::Kind::kTuple: {
        List items;
        for (const auto& child : e.children) {
          ASSIGN_OR_RETURN(Value v, Eval(*child, scope));
          items.push_back(std::move(v));
        }
        if (e.kind == Expr::Kind::kTuple) return Value::MakeTuple(std::move(items));
        return Value::MakeList(std::move(items));
      }
      case Expr::Kind::kDict: {
        Dict items;
        for (size_t i = 0; i + 1 < e.children.size(); i += 2) {
          ASSIGN_OR_RETURN(Value key, Eval(*e.children[i], scope));
          ASSIGN_OR_RETURN(Value value, Eval(*e.children[i + 1], scope));
          if (!key.is_string()) return absl::InvalidArgumentError("dict keys must be strings");
          auto it = std::find_if(items.begin(), items.end(),
                                 [&](const auto& kv) { return kv.first == key.string_value(); });
          if (it != items.end()) {
            it->second = std::move(value);
          } else {
            items.emplace_back(key.string_value(), std::move(value));
          }
        }
        return Value::MakeDict(std::move(items));
      }
      case Expr::Kind::kAttr: {
        ASSIGN_OR_RETURN(Value object, Eval(*e.children[0], scope));
        ASSIGN_OR_RETURN(Value v, GetItem(object, Value::String(e.name)));
        if (v.is_undefined()) return Value::Undefined(e.name);
        return v;
      }
      case Expr::Kind::kSubscript: {
        ASSIGN_OR_RETURN(Value object, Eval(*e.children[0], scope));
        ASSIGN_OR_RETURN(Value key, Eval(*e.children[1], scope));
        ASSIGN_OR_RETURN(Value v, GetItem(object, key));
        if (v.is_undefined() && key.is_string()) return Value::Undefined(key.string_value());
        return v;
      }
      case Expr::Kind::kSlice: {
        ASSIGN_OR_RETURN(Value object, Eval(*e.children[0], scope));
        Value bounds[3];
        for (int i = 0; i < 3; ++i) {
          if (e.children[i + 1]) {
            ASSIGN_OR_RETURN(bounds[i], Eval(*e.children[i + 1], scope));
          }
        }
        return Slice(object, bounds[0], bounds[1], bounds[2]);
      }
      case Expr::Kind::kCall:
        return EvalCall(e, scope);
      case Expr::Kind::kFilter: {
        ASSIGN_OR_RETURN(Value input, Eval(*e.children[0], scope));
        ASSIGN_OR_RETURN(Args args, EvalArgs(e, 1, scope));
        return ApplyFilter(e.name, input, args);
      }
      case Expr::Kind::kTest: {
        ASSIGN_OR_RETURN(Value input, Eval(*e.children[0], scope));
        ASSIGN_OR_RETURN(Args args, EvalArgs(e, 1, scope));
        ASSIGN_OR_RETURN(bool result, ApplyTest(e.name, input, args));
        return Value::Bool(result != e.negated);
      }
      case Expr::Kind::kNeg:
      case Expr::Kind::kPos: {
        ASSIGN_OR_RETURN(Value v, Eval(*e.children[0], scope));
        if (!v.is_number()) {
          return absl::InvalidArgumentError(absl::StrCat("bad operand type for unary ",
                                                         e.kind == Expr::Kind::kNeg ? "-" : "+",
                                                         ": '", v.TypeName(), "'"));
        }
        if (e.kind == Expr::Kind::kPos) return v.is_bool() ? Value::Int(v.int_value()) : v;
        return v.is_float() ? Value::Float(-v.float_value()) : Value::Int(-v.int_value());
      }
      case Expr::Kind::kNot: {
        ASSIGN_OR_RETURN(Value v, Eval(*e.children[0], scope));
        return Value::Bool(!v.Truthy());
      }
      case Expr::Kind::kBinary:
        return EvalBinary(e, scope);
      case Expr::Kind::kCompare:
        return EvalCompare(e, scope);
      case Expr::Kind::kCondition: {
        ASSIGN_OR_RETURN(Value test, Eval(*e.children[0], scope));
        if (test.Truthy()) return Eval(*e.children[1], scope);
        if (e.children[2]) return Eval(*e.children[2], scope);
        return Value::Undefined();
      }
    }
    return absl::InternalError("unknown expression");
  }

  absl::StatusOr<Value> EvalBinary(const Expr& e, const Scope& scope) {
    ASSIGN_OR_RETURN(Value left, Eval(*e.children[0], scope));
    if (e.name == "and") {
      if (!left.Truthy()) return left;
      return Eval(*e.children[1], scope);
    }
    if (e.name == "or") {
      if (left.Truthy()) return left;
      return Eval(*e.children[1], scope);
    }
    ASSIGN_OR_RETURN(Value right, Eval(*e.children[1], scope));
    if (e.name == "~") return Value::String(ToPythonStr(left) + ToPythonStr(right));
    return Arithmetic(e.name, left, right);
  }

  const Body& root_;
  const Scope* root_scope_ = nullptr;
  std::map<std::string, const Node*> macros_;
  int depth_ = 0;
};

}  // namespace

absl::StatusOr<std::string> Render(const Body& body, const Value& variables) {
  Renderer renderer(body);
  return renderer.Run(variables);
}

}  // namespace expertd::chat_template
