// Tests, globals, methods and the lookup helpers. Filters are in filters.cc.
#include "models/chat_template/builtins.h"

#include <ctime>
#include <set>

#include "absl/status/status.h"
#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "models/chat_template/string_methods.h"

namespace expertd::chat_template {
namespace {
constexpr absl::string_view kRaisedPayload = "expertd.chat_template/raised";
}  // namespace

bool IsKnownTest(absl::string_view name) {
  static const auto* const kTests = new std::set<absl::string_view>{
      "defined", "undefined", "none",   "boolean", "false",       "true",        "integer",
      "float",   "number",    "string", "mapping", "iterable",    "sequence",    "sameas",
      "eq",      "equalto",   "==",     "ne",      "!=",          "lt",          "lessthan",
      "<",       "le",        "<=",     "gt",      ">",           "greaterthan", "ge",
      ">=",      "in",        "even",   "odd",     "divisibleby", "lower",       "upper"};
  return kTests->count(name) > 0;
}

bool IsKnownGlobal(absl::string_view name) {
  return name == "range" || name == "namespace" || name == "dict" || name == "raise_exception" ||
         name == "strftime_now";
}

bool IsKnownMethod(absl::string_view name) {
  return IsStringMethod(name) || name == "items" || name == "keys" || name == "values" ||
         name == "get" || name == "cycle";
}

const Value* Args::Get(size_t index, absl::string_view name) const {
  if (index < positional.size()) return &positional[index];
  for (const auto& [key, value] : keyword) {
    if (key == name) return &value;
  }
  return nullptr;
}

absl::StatusOr<Value> GetItem(const Value& object, const Value& key) {
  if (object.is_undefined()) {
    const std::string& name = object.undefined_name();
    return absl::InvalidArgumentError(name.empty() ? "undefined value has no attributes"
                                                   : absl::StrCat("'", name, "' is undefined"));
  }
  if (object.is_dict() && key.is_string()) {
    const Value* found = object.Find(key.string_value());
    return found ? *found : Value::Undefined();
  }
  if ((object.is_list() || object.is_string()) && key.is_number() && !key.is_float()) {
    const bool is_list = object.is_list();
    std::vector<char32_t> chars;
    if (!is_list) chars = DecodeUtf8(object.string_value());
    const int64_t size = is_list ? object.list().size() : chars.size();
    int64_t index = key.int_value();
    if (index < 0) index += size;
    if (index < 0 || index >= size) return Value::Undefined();
    if (is_list) return object.list()[index];
    return Value::String(EncodeUtf8({chars[index]}));
  }
  return Value::Undefined();
}

absl::StatusOr<int64_t> Length(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return 0;
    case Value::Kind::kString:
      return static_cast<int64_t>(DecodeUtf8(v.string_value()).size());
    case Value::Kind::kList:
      return static_cast<int64_t>(v.list().size());
    case Value::Kind::kDict:
      return static_cast<int64_t>(v.dict().size());
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("object of type '", v.TypeName(), "' has no len()"));
  }
}

absl::StatusOr<List> Iterate(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return List{};
    case Value::Kind::kList:
      return v.list();
    case Value::Kind::kDict: {
      List keys;
      for (const auto& [key, value] : v.dict()) keys.push_back(Value::String(key));
      return keys;
    }
    case Value::Kind::kString: {
      List chars;
      for (char32_t cp : DecodeUtf8(v.string_value()))
        chars.push_back(Value::String(EncodeUtf8({cp})));
      return chars;
    }
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("'", v.TypeName(), "' object is not iterable"));
  }
}

namespace {

absl::StatusOr<bool> Contains(const Value& container, const Value& item) {
  if (container.is_string()) {
    if (!item.is_string()) {
      return absl::InvalidArgumentError(
          absl::StrCat("'in <string>' requires string as left operand, not ", item.TypeName()));
    }
    return container.string_value().find(item.string_value()) != std::string::npos;
  }
  if (container.is_dict()) return item.is_string() && container.Find(item.string_value());
  ASSIGN_OR_RETURN(List items, Iterate(container));
  for (const Value& v : items) {
    if (Equals(v, item)) return true;
  }
  return false;
}

bool IsAsciiCase(const std::string& s, bool upper) {
  bool cased = false;
  for (unsigned char c : s) {
    if (upper ? (c >= 'a' && c <= 'z') : (c >= 'A' && c <= 'Z')) return false;
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) cased = true;
  }
  return cased;
}

}  // namespace

absl::StatusOr<bool> ApplyTest(absl::string_view name, const Value& v, const Args& args) {
  const Value* arg = args.Get(0, "value");
  auto need_arg = [&]() -> absl::Status {
    if (arg == nullptr)
      return absl::InvalidArgumentError(absl::StrCat("test '", name, "' needs an argument"));
    return absl::OkStatus();
  };
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.is_none();
  if (name == "boolean") return v.is_bool();
  if (name == "false") return v.is_bool() && !v.bool_value();
  if (name == "true") return v.is_bool() && v.bool_value();
  if (name == "integer") return v.is_int();
  if (name == "float") return v.is_float();
  if (name == "number") return v.is_number();
  if (name == "string") return v.is_string();
  if (name == "mapping") return v.kind() == Value::Kind::kDict;
  if (name == "iterable" || name == "sequence") {
    return v.is_undefined() || v.is_string() || v.is_list() || v.kind() == Value::Kind::kDict;
  }
  if (name == "lower" || name == "upper") {
    return v.is_string() && IsAsciiCase(v.string_value(), name == "upper");
  }
  if (name == "even" || name == "odd" || name == "divisibleby") {
    if (!v.is_number() || v.is_float()) {
      return absl::InvalidArgumentError(absl::StrCat("test '", name, "' needs an integer"));
    }
    if (name == "divisibleby") {
      RETURN_IF_ERROR(need_arg());
      if (!arg->is_number() || arg->int_value() == 0) {
        return absl::InvalidArgumentError("divisibleby needs a non-zero integer");
      }
      return v.int_value() % arg->int_value() == 0;
    }
    return (v.int_value() % 2 == 0) == (name == "even");
  }
  RETURN_IF_ERROR(need_arg());
  if (name == "sameas") {
    // Python's `is`: None and bools are singletons, and CPython caches the
    // ints -5..256; other objects compare by identity, unobservable here.
    if (v.kind() != arg->kind()) return false;
    if (v.is_none() || v.is_bool()) return Equals(v, *arg);
    if (v.is_int())
      return v.int_value() == arg->int_value() && v.int_value() >= -5 && v.int_value() <= 256;
    return false;
  }
  if (name == "eq" || name == "equalto" || name == "==") return Equals(v, *arg);
  if (name == "ne" || name == "!=") return !Equals(v, *arg);
  if (name == "lt" || name == "lessthan" || name == "<") return LessThan(v, *arg);
  if (name == "gt" || name == "greaterthan" || name == ">") return LessThan(*arg, v);
  if (name == "le" || name == "<=") {
    ASSIGN_OR_RETURN(bool greater, LessThan(*arg, v));
    return !greater;
  }
  if (name == "ge" || name == ">=") {
    ASSIGN_OR_RETURN(bool less, LessThan(v, *arg));
    return !less;
  }
  if (name == "in") return Contains(*arg, v);
  return absl::InvalidArgumentError(absl::StrCat("unsupported test '", name, "'"));
}

bool IsRaisedByTemplate(const absl::Status& status) {
  return status.GetPayload(kRaisedPayload).has_value();
}

absl::StatusOr<Value> CallGlobal(absl::string_view name, const Args& args) {
  if (name == "raise_exception") {
    const Value* message = args.Get(0, "message");
    absl::Status raised = absl::InvalidArgumentError(message ? ToPythonStr(*message) : "");
    raised.SetPayload(kRaisedPayload, absl::Cord("raise_exception"));
    return raised;
  }
  if (name == "namespace" || name == "dict") {
    Dict items;
    if (!args.positional.empty()) {
      if (!args.positional[0].is_dict() || args.positional.size() > 1) {
        return absl::InvalidArgumentError(absl::StrCat(name, "() takes one mapping"));
      }
      items = args.positional[0].dict();
    }
    for (const auto& [key, value] : args.keyword) {
      bool replaced = false;
      for (auto& item : items) {
        if (item.first == key) {
          item.second = value;
          replaced = true;
        }
      }
      if (!replaced) items.emplace_back(key, value);
    }
    return name == "dict" ? Value::MakeDict(std::move(items))
                          : Value::MakeNamespace(std::move(items));
  }
  if (name == "range") {
    std::vector<int64_t> bounds;
    for (const Value& v : args.positional) {
      if (!v.is_number() || v.is_float())
        return absl::InvalidArgumentError("range() takes integers");
      bounds.push_back(v.int_value());
    }
    if (bounds.empty() || bounds.size() > 3)
      return absl::InvalidArgumentError("range() takes 1 to 3 integers");
    const int64_t start = bounds.size() > 1 ? bounds[0] : 0;
    const int64_t stop = bounds.size() > 1 ? bounds[1] : bounds[0];
    const int64_t step = bounds.size() > 2 ? bounds[2] : 1;
    if (step == 0) return absl::InvalidArgumentError("range() arg 3 must not be zero");
    List items;
    for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
      // The sandbox's bound (MAX_RANGE).
      if (items.size() >= 100000) return absl::InvalidArgumentError("range too big");
      items.push_back(Value::Int(i));
    }
    return Value::MakeList(std::move(items));
  }
  if (name == "strftime_now") {
    const Value* format = args.Get(0, "format");
    if (format == nullptr || !format->is_string()) {
      return absl::InvalidArgumentError("strftime_now() takes a format string");
    }
    const std::time_t now = std::time(nullptr);
    std::tm local{};
    localtime_r(&now, &local);
    char buf[256];
    const size_t n = std::strftime(buf, sizeof(buf), format->string_value().c_str(), &local);
    return Value::String(std::string(buf, n));
  }
  return absl::InvalidArgumentError(absl::StrCat("unsupported function '", name, "'"));
}

absl::StatusOr<Value> CallMethod(const Value& object, absl::string_view name, const Args& args) {
  if (object.is_undefined()) return GetItem(object, Value::String(std::string(name)));
  if (object.is_string() && IsStringMethod(name)) {
    return CallStringMethod(object.string_value(), name, args);
  }
  if (object.kind() == Value::Kind::kDict) {
    const Dict& dict = object.dict();
    if (name == "items" || name == "keys" || name == "values") {
      List out;
      for (const auto& [key, value] : dict) {
        if (name == "items") {
          out.push_back(Value::MakeTuple({Value::String(key), value}));
        } else {
          out.push_back(name == "keys" ? Value::String(key) : value);
        }
      }
      return Value::MakeList(std::move(out));
    }
    if (name == "get") {
      const Value* key = args.Get(0, "key");
      const Value* fallback = args.Get(1, "default");
      if (key == nullptr) return absl::InvalidArgumentError("get() takes a key");
      const Value* found = key->is_string() ? object.Find(key->string_value()) : nullptr;
      if (found) return *found;
      return fallback ? *fallback : Value::None();
    }
    if (name == "cycle" && object.Find("index0") != nullptr && !args.positional.empty()) {
      const int64_t index = object.Find("index0")->int_value();
      return args.positional[index % static_cast<int64_t>(args.positional.size())];
    }
  }
  return absl::InvalidArgumentError(
      absl::StrCat("'", object.TypeName(), "' object has no attribute '", name, "'"));
}

}  // namespace expertd::chat_template
