// The jinja2 filters chat templates use, with jinja2's semantics; tojson is
// Hugging Face's override (json.dumps with ensure_ascii=False, no HTML escaping).
#include <algorithm>
#include <cmath>
#include <set>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "models/chat_template/builtins.h"
#include "models/chat_template/string_methods.h"

namespace expertd::chat_template {
namespace {

// Follows a dotted attribute path ("function.name"), as jinja2's attribute
// arguments do.
absl::StatusOr<Value> GetAttributePath(const Value& v, const std::string& path) {
  Value current = v;
  size_t start = 0;
  while (true) {
    const size_t dot = path.find('.', start);
    const std::string part = path.substr(start, dot == std::string::npos ? dot : dot - start);
    Value key = Value::String(part);
    if (!part.empty() && std::all_of(part.begin(), part.end(), ::isdigit)) {
      key = Value::Int(std::stoll(part));
    }
    ASSIGN_OR_RETURN(current, GetItem(current, key));
    if (dot == std::string::npos) return current;
    start = dot + 1;
  }
}

absl::StatusOr<std::string> StringArg(const Value* v, std::string fallback) {
  if (v == nullptr) return fallback;
  if (!v->is_string()) return absl::InvalidArgumentError("expected a string argument");
  return v->string_value();
}

absl::StatusOr<Value> ToJson(const Value& input, const Args& args) {
  // HF: tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False)
  JsonDumpOptions options;
  if (const Value* ensure_ascii = args.Get(0, "ensure_ascii");
      ensure_ascii && ensure_ascii->Truthy()) {
    return absl::InvalidArgumentError("tojson(ensure_ascii=True) is not supported");
  }
  if (const Value* indent = args.Get(1, "indent"); indent && !indent->is_none()) {
    if (!indent->is_int()) return absl::InvalidArgumentError("tojson indent must be an integer");
    options.indent = static_cast<int>(std::max<int64_t>(0, indent->int_value()));
  }
  if (const Value* separators = args.Get(2, "separators"); separators && !separators->is_none()) {
    if (!separators->is_list() || separators->list().size() != 2 ||
        !separators->list()[0].is_string() || !separators->list()[1].is_string()) {
      return absl::InvalidArgumentError("tojson separators must be two strings");
    }
    options.separators = {separators->list()[0].string_value(),
                          separators->list()[1].string_value()};
  }
  if (const Value* sort_keys = args.Get(3, "sort_keys")) options.sort_keys = sort_keys->Truthy();
  ASSIGN_OR_RETURN(std::string json, JsonDumps(input, options));
  return Value::String(std::move(json));
}

// selectattr / rejectattr / select / reject.
absl::StatusOr<Value> Select(const Value& input, const Args& args, bool by_attribute,
                             bool keep_if) {
  ASSIGN_OR_RETURN(List items, Iterate(input));
  size_t next = 0;
  std::string attribute;
  if (by_attribute) {
    ASSIGN_OR_RETURN(attribute, StringArg(args.Get(next++, "attribute"), ""));
  }
  const Value* test = args.Get(next++, "test");
  if (test && !test->is_string()) return absl::InvalidArgumentError("test name must be a string");
  if (test && !IsKnownTest(test->string_value())) {
    return absl::InvalidArgumentError(absl::StrCat("no test named '", test->string_value(), "'"));
  }
  Args test_args;
  for (size_t i = next; i < args.positional.size(); ++i)
    test_args.positional.push_back(args.positional[i]);
  List out;
  for (const Value& item : items) {
    Value subject = item;
    if (by_attribute) {
      ASSIGN_OR_RETURN(subject, GetAttributePath(item, attribute));
    }
    bool pass = subject.Truthy();
    if (test) {
      ASSIGN_OR_RETURN(pass, ApplyTest(test->string_value(), subject, test_args));
    }
    if (pass == keep_if) out.push_back(item);
  }
  return Value::MakeList(std::move(out));
}

absl::StatusOr<Value> Map(const Value& input, const Args& args) {
  ASSIGN_OR_RETURN(List items, Iterate(input));
  List out;
  if (const Value* attribute = args.Get(99, "attribute")) {
    if (!attribute->is_string())
      return absl::InvalidArgumentError("map attribute must be a string");
    const Value* fallback = args.Get(99, "default");
    for (const Value& item : items) {
      ASSIGN_OR_RETURN(Value v, GetAttributePath(item, attribute->string_value()));
      out.push_back(v.is_undefined() && fallback ? *fallback : v);
    }
    return Value::MakeList(std::move(out));
  }
  if (args.positional.empty() || !args.positional[0].is_string()) {
    return absl::InvalidArgumentError("map needs a filter name or attribute=");
  }
  const std::string filter = args.positional[0].string_value();
  if (!IsKnownFilter(filter))
    return absl::InvalidArgumentError(absl::StrCat("no filter named '", filter, "'"));
  Args rest;
  rest.positional.assign(args.positional.begin() + 1, args.positional.end());
  for (const Value& item : items) {
    ASSIGN_OR_RETURN(Value v, ApplyFilter(filter, item, rest));
    out.push_back(std::move(v));
  }
  return Value::MakeList(std::move(out));
}

absl::StatusOr<Value> Join(const Value& input, const Args& args) {
  ASSIGN_OR_RETURN(List items, Iterate(input));
  ASSIGN_OR_RETURN(std::string sep, StringArg(args.Get(0, "d"), ""));
  const Value* attribute = args.Get(1, "attribute");
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    Value item = items[i];
    if (attribute) {
      ASSIGN_OR_RETURN(item, GetAttributePath(item, ToPythonStr(*attribute)));
    }
    if (i > 0) out += sep;
    out += ToPythonStr(item);
  }
  return Value::String(std::move(out));
}

absl::StatusOr<Value> Indent(const Value& input, const Args& args) {
  std::string indention(4, ' ');
  if (const Value* width = args.Get(0, "width")) {
    indention = width->is_string() ? width->string_value()
                                   : std::string(std::max<int64_t>(0, width->int_value()), ' ');
  }
  const Value* first = args.Get(1, "first");
  const Value* blank = args.Get(2, "blank");
  std::string s = ToPythonStr(input) + "\n";
  std::vector<std::string> lines;
  size_t start = 0;
  for (size_t nl = s.find('\n'); nl != std::string::npos; nl = s.find('\n', start)) {
    lines.push_back(s.substr(start, nl - start));
    start = nl + 1;
  }
  std::string out = lines.empty() ? "" : lines[0];
  for (size_t i = 1; i < lines.size(); ++i) {
    out += "\n";
    if (!lines[i].empty() || (blank && blank->Truthy())) out += indention;
    out += lines[i];
  }
  if (first && first->Truthy()) out = indention + out;
  return Value::String(std::move(out));
}

absl::StatusOr<Value> Sort(List items, bool reverse, bool case_sensitive, const Value* attribute) {
  absl::Status status;
  auto key = [&](const Value& v) -> Value {
    Value k = v;
    if (attribute) {
      absl::StatusOr<Value> got = GetAttributePath(v, ToPythonStr(*attribute));
      if (!got.ok()) {
        status = got.status();
        return Value::None();
      }
      k = *got;
    }
    if (!case_sensitive && k.is_string()) return Value::String(AsciiLower(k.string_value()));
    return k;
  };
  std::stable_sort(items.begin(), items.end(), [&](const Value& a, const Value& b) {
    absl::StatusOr<bool> less = reverse ? LessThan(key(b), key(a)) : LessThan(key(a), key(b));
    if (!less.ok()) status = less.status();
    return less.ok() && *less;
  });
  RETURN_IF_ERROR(status);
  return Value::MakeList(std::move(items));
}

}  // namespace

bool IsKnownFilter(absl::string_view name) {
  static const auto* const kFilters = new std::set<absl::string_view>{
      "trim",       "length",     "count",  "tojson", "string", "lower",    "upper",    "title",
      "capitalize", "default",    "d",      "join",   "first",  "last",     "list",     "items",
      "selectattr", "rejectattr", "select", "reject", "map",    "reverse",  "int",      "float",
      "abs",        "replace",    "safe",   "unique", "indent", "dictsort", "sum",      "min",
      "max",        "sort",       "escape", "e",      "attr",   "round",    "wordcount"};
  return kFilters->count(name) > 0;
}

absl::StatusOr<Value> ApplyFilter(absl::string_view name, const Value& input, const Args& args) {
  if (name == "safe") return input;
  if (name == "tojson") return ToJson(input, args);
  if (name == "length" || name == "count") {
    ASSIGN_OR_RETURN(int64_t n, Length(input));
    return Value::Int(n);
  }
  if (name == "string") return Value::String(ToPythonStr(input));
  if (name == "trim") {
    const Value* chars = args.Get(0, "chars");
    std::optional<std::string> set;
    if (chars && !chars->is_none()) set = ToPythonStr(*chars);
    return Value::String(PyStrip(ToPythonStr(input), set, true, true));
  }
  if (name == "lower") return Value::String(AsciiLower(ToPythonStr(input)));
  if (name == "upper") return Value::String(AsciiUpper(ToPythonStr(input)));
  if (name == "capitalize") return Value::String(PyCapitalize(ToPythonStr(input)));
  if (name == "title") {
    // jinja2: each word (split at whitespace and -({[<) gets item[0].upper() + rest.lower().
    std::string s = ToPythonStr(input), out;
    bool word_start = true;
    for (char c : s) {
      const bool separator = std::isspace(static_cast<unsigned char>(c)) || c == '-' || c == '(' ||
                             c == '{' || c == '[' || c == '<';
      if (separator) {
        out += c;
        word_start = true;
      } else {
        out += word_start ? AsciiUpper(std::string(1, c)) : AsciiLower(std::string(1, c));
        word_start = false;
      }
    }
    return Value::String(std::move(out));
  }
  if (name == "default" || name == "d") {
    const Value* fallback = args.Get(0, "default_value");
    const Value* boolean = args.Get(1, "boolean");
    const bool use_default =
        input.is_undefined() || (boolean && boolean->Truthy() && !input.Truthy());
    if (!use_default) return input;
    return fallback ? *fallback : Value::String("");
  }
  if (name == "join") return Join(input, args);
  if (name == "first" || name == "last") {
    ASSIGN_OR_RETURN(List items, Iterate(input));
    if (items.empty()) return Value::Undefined();
    return name == "first" ? items.front() : items.back();
  }
  if (name == "list") {
    ASSIGN_OR_RETURN(List items, Iterate(input));
    return Value::MakeList(std::move(items));
  }
  if (name == "items" || name == "dictsort") {
    if (input.is_undefined()) return Value::MakeList({});
    if (input.kind() != Value::Kind::kDict)
      return absl::InvalidArgumentError("items needs a mapping");
    List out;
    for (const auto& [key, value] : input.dict())
      out.push_back(Value::MakeTuple({Value::String(key), value}));
    if (name == "items") return Value::MakeList(std::move(out));
    const Value* case_sensitive = args.Get(0, "case_sensitive");
    const Value* reverse = args.Get(2, "reverse");
    Value zero = Value::Int(0);
    return Sort(std::move(out), reverse && reverse->Truthy(),
                case_sensitive && case_sensitive->Truthy(), &zero);
  }
  if (name == "selectattr" || name == "rejectattr")
    return Select(input, args, true, name == "selectattr");
  if (name == "select" || name == "reject") return Select(input, args, false, name == "select");
  if (name == "map") return Map(input, args);
  if (name == "reverse") {
    if (input.is_string()) {
      std::vector<char32_t> cps = DecodeUtf8(input.string_value());
      std::reverse(cps.begin(), cps.end());
      return Value::String(EncodeUtf8(cps));
    }
    ASSIGN_OR_RETURN(List items, Iterate(input));
    std::reverse(items.begin(), items.end());
    return Value::MakeList(std::move(items));
  }
  if (name == "int" || name == "float") {
    const Value* fallback = args.Get(0, "default");
    Value def = fallback ? *fallback : (name == "int" ? Value::Int(0) : Value::Float(0));
    double number = 0;
    if (input.is_number()) {
      number = input.float_value();
    } else if (input.is_string()) {
      char* end = nullptr;
      const std::string s = PyStrip(input.string_value(), std::nullopt, true, true);
      number = std::strtod(s.c_str(), &end);
      if (s.empty() || *end != '\0') return def;
    } else {
      return def;
    }
    if (name == "int")
      return Value::Int(input.is_int() ? input.int_value() : static_cast<int64_t>(number));
    return Value::Float(number);
  }
  if (name == "abs") {
    if (input.is_float()) return Value::Float(std::fabs(input.float_value()));
    if (input.is_number()) return Value::Int(std::llabs(input.int_value()));
    return absl::InvalidArgumentError(
        absl::StrCat("bad operand type for abs(): '", input.TypeName(), "'"));
  }
  if (name == "round") {
    if (!input.is_number()) return absl::InvalidArgumentError("round needs a number");
    const Value* precision = args.Get(0, "precision");
    const double scale = std::pow(10.0, precision ? precision->int_value() : 0);
    return Value::Float(std::round(input.float_value() * scale) / scale);
  }
  if (name == "replace") {
    const Value* old = args.Get(0, "old");
    const Value* repl = args.Get(1, "new");
    const Value* count = args.Get(2, "count");
    if (old == nullptr || repl == nullptr)
      return absl::InvalidArgumentError("replace needs old and new");
    return Value::String(PyReplace(ToPythonStr(input), ToPythonStr(*old), ToPythonStr(*repl),
                                   count && !count->is_none() ? count->int_value() : -1));
  }
  if (name == "unique") {
    ASSIGN_OR_RETURN(List items, Iterate(input));
    List out;
    for (const Value& item : items) {
      if (std::none_of(out.begin(), out.end(), [&](const Value& o) { return Equals(o, item); })) {
        out.push_back(item);
      }
    }
    return Value::MakeList(std::move(out));
  }
  if (name == "indent") return Indent(input, args);
  if (name == "sum") {
    ASSIGN_OR_RETURN(List items, Iterate(input));
    const Value* attribute = args.Get(0, "attribute");
    const Value* start = args.Get(1, "start");
    Value total = start ? *start : Value::Int(0);
    for (const Value& item : items) {
      Value v = item;
      if (attribute) {
        ASSIGN_OR_RETURN(v, GetAttributePath(item, ToPythonStr(*attribute)));
      }
      if (!v.is_number() || !total.is_number())
        return absl::InvalidArgumentError("sum needs numbers");
      total = total.is_float() || v.is_float() ? Value::Float(total.float_value() + v.float_value())
                                               : Value::Int(total.int_value() + v.int_value());
    }
    return total;
  }
  if (name == "sort" || name == "min" || name == "max") {
    ASSIGN_OR_RETURN(List items, Iterate(input));
    const Value* reverse = name == "sort" ? args.Get(0, "reverse") : nullptr;
    const Value* case_sensitive = args.Get(name == "sort" ? 1 : 0, "case_sensitive");
    const Value* attribute = args.Get(name == "sort" ? 2 : 1, "attribute");
    ASSIGN_OR_RETURN(Value sorted, Sort(std::move(items), reverse && reverse->Truthy(),
                                        case_sensitive && case_sensitive->Truthy(), attribute));
    if (name == "sort") return sorted;
    if (sorted.list().empty()) return Value::Undefined();
    return name == "min" ? sorted.list().front() : sorted.list().back();
  }
  if (name == "escape" || name == "e") {
    std::string out;
    for (char c : ToPythonStr(input)) {
      switch (c) {
        case '&':
          out += "&amp;";
          break;
        case '<':
          out += "&lt;";
          break;
        case '>':
          out += "&gt;";
          break;
        case '"':
          out += "&#34;";
          break;
        case '\'':
          out += "&#39;";
          break;
        default:
          out += c;
      }
    }
    return Value::String(std::move(out));
  }
  if (name == "attr") {
    const Value* attribute = args.Get(0, "name");
    if (attribute == nullptr) return absl::InvalidArgumentError("attr needs a name");
    return GetItem(input, *attribute);
  }
  if (name == "wordcount") {
    ASSIGN_OR_RETURN(Value words, CallStringMethod(ToPythonStr(input), "split", Args{}));
    return Value::Int(static_cast<int64_t>(words.list().size()));
  }
  return absl::InvalidArgumentError(absl::StrCat("unsupported filter '", name, "'"));
}

}  // namespace expertd::chat_template
