// The values a chat template computes with, modelled on the Python objects
// jinja2 sees (None, bool, int, float, str, list, dict, namespace), so that
// printing, comparison, truthiness and tojson give the same bytes Python does.
#ifndef EXPERTD_MODELS_CHAT_TEMPLATE_VALUE_H_
#define EXPERTD_MODELS_CHAT_TEMPLATE_VALUE_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"

namespace expertd::chat_template {

class Value;
using List = std::vector<Value>;
// Insertion-ordered, like a Python dict; keys are strings (JSON objects).
using Dict = std::vector<std::pair<std::string, Value>>;

class Value {
 public:
  enum class Kind { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kNamespace };

  Value() = default;  // undefined
  static Value Undefined(std::string name = "") {
    Value v;
    v.str_ = std::move(name);
    return v;
  }
  static Value None() { return Value(Kind::kNone); }
  static Value Bool(bool b);
  static Value Int(int64_t i);
  static Value Float(double f);
  static Value String(std::string s);
  static Value MakeList(List items);
  // A tuple: a list that prints as (a, b).
  static Value MakeTuple(List items);
  static Value MakeDict(Dict items);
  // A namespace() object: a dict with reference semantics, assignable with
  // {% set ns.attr = ... %}.
  static Value MakeNamespace(Dict items);
  static Value FromJson(const nlohmann::ordered_json& json);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_list() const { return kind_ == Kind::kList; }
  bool is_tuple() const { return kind_ == Kind::kList && tuple_; }
  bool is_dict() const { return kind_ == Kind::kDict || kind_ == Kind::kNamespace; }
  bool is_number() const { return kind_ == Kind::kInt || kind_ == Kind::kFloat || is_bool(); }
  bool is_bool() const { return kind_ == Kind::kBool; }
  bool is_int() const { return kind_ == Kind::kInt; }
  bool is_float() const { return kind_ == Kind::kFloat; }

  bool bool_value() const { return int_ != 0; }
  int64_t int_value() const { return int_; }  // bools are 0/1, as in Python
  double float_value() const { return kind_ == Kind::kFloat ? float_ : static_cast<double>(int_); }
  const std::string& string_value() const { return str_; }
  // The name an undefined value was looked up by ("" when unknown).
  const std::string& undefined_name() const { return str_; }
  const List& list() const { return *list_; }
  const Dict& dict() const { return *dict_; }
  Dict& mutable_namespace() const { return *dict_; }

  // Python truthiness.
  bool Truthy() const;
  // Dict lookup; nullptr when absent.
  const Value* Find(absl::string_view key) const;
  // The Python type name, for error messages ("str", "int", "NoneType"...).
  std::string TypeName() const;

 private:
  explicit Value(Kind kind) : kind_(kind) {}

  Kind kind_ = Kind::kUndefined;
  bool tuple_ = false;
  int64_t int_ = 0;  // bool and int
  double float_ = 0;
  std::string str_;  // string, or the name of an undefined value
  std::shared_ptr<List> list_;
  std::shared_ptr<Dict> dict_;
};

// Python ==, as jinja2 evaluates it (1 == 1.0 == True; lists and dicts deep).
bool Equals(const Value& a, const Value& b);
// Python <, for numbers and strings (code point order) and lists; error otherwise.
absl::StatusOr<bool> LessThan(const Value& a, const Value& b);

// str(value) as jinja2 prints it: None -> "None", True -> "True", floats in
// Python's repr, lists and dicts in Python's repr, undefined -> "".
std::string ToPythonStr(const Value& v);
// repr(value): strings quoted the way Python quotes them.
std::string ToPythonRepr(const Value& v);
// Python's float repr ("1.0", "0.1", "1e-05", "1e+16", "inf", "nan").
std::string PythonFloatRepr(double f);

// json.dumps(value, ensure_ascii=False, indent=indent, separators=separators,
// sort_keys=sort_keys): the tojson filter as Hugging Face defines it.
struct JsonDumpOptions {
  std::optional<int> indent;  // nullopt: one line
  std::optional<std::pair<std::string, std::string>> separators;
  bool sort_keys = false;
};
absl::StatusOr<std::string> JsonDumps(const Value& v, const JsonDumpOptions& options);

// UTF-8 helpers: Python strings index by code point.
std::vector<char32_t> DecodeUtf8(absl::string_view s);
std::string EncodeUtf8(const std::vector<char32_t>& cps);
void AppendUtf8(char32_t cp, std::string* out);
// str.isspace() for one code point.
bool IsPythonSpace(char32_t cp);

}  // namespace expertd::chat_template

#endif  // EXPERTD_MODELS_CHAT_TEMPLATE_VALUE_H_
