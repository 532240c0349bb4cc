#include "models/chat_template/value.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status_macros.h"

namespace expertd::chat_template {

Value Value::Bool(bool b) {
  Value v(Kind::kBool);
  v.int_ = b ? 1 : 0;
  return v;
}
Value Value::Int(int64_t i) {
  Value v(Kind::kInt);
  v.int_ = i;
  return v;
}
Value Value::Float(double f) {
  Value v(Kind::kFloat);
  v.float_ = f;
  return v;
}
Value Value::String(std::string s) {
  Value v(Kind::kString);
  v.str_ = std::move(s);
  return v;
}
Value Value::MakeList(List items) {
  Value v(Kind::kList);
  v.list_ = std::make_shared<List>(std::move(items));
  return v;
}
Value Value::MakeTuple(List items) {
  Value v = MakeList(std::move(items));
  v.tuple_ = true;
  return v;
}
Value Value::MakeDict(Dict items) {
  Value v(Kind::kDict);
  v.dict_ = std::make_shared<Dict>(std::move(items));
  return v;
}
Value Value::MakeNamespace(Dict items) {
  Value v(Kind::kNamespace);
  v.dict_ = std::make_shared<Dict>(std::move(items));
  return v;
}

Value Value::FromJson(const nlohmann::ordered_json& json) {
  switch (json.type()) {
    case nlohmann::ordered_json::value_t::null:
      return None();
    case nlohmann::ordered_json::value_t::boolean:
      return Bool(json.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer:
    case nlohmann::ordered_json::value_t::number_unsigned:
      return Int(json.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_float:
      return Float(json.get<double>());
    case nlohmann::ordered_json::value_t::string:
      return String(json.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      List items;
      items.reserve(json.size());
      for (const auto& item : json) items.push_back(FromJson(item));
      return MakeList(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      Dict items;
      for (const auto& [key, item] : json.items()) {
        // A repeated key keeps its last value at its first position (Python's json.loads).
        auto it = std::find_if(items.begin(), items.end(),
                               [&](const auto& kv) { return kv.first == key; });
        if (it != items.end()) {
          it->second = FromJson(item);
        } else {
          items.emplace_back(key, FromJson(item));
        }
      }
      return MakeDict(std::move(items));
    }
    default:
      return None();
  }
}

bool Value::Truthy() const {
  switch (kind_) {
    case Kind::kUndefined:
    case Kind::kNone:
      return false;
    case Kind::kBool:
    case Kind::kInt:
      return int_ != 0;
    case Kind::kFloat:
      return float_ != 0;
    case Kind::kString:
      return !str_.empty();
    case Kind::kList:
      return !list_->empty();
    case Kind::kDict:
      return !dict_->empty();
    case Kind::kNamespace:
      return true;
  }
  return false;
}

const Value* Value::Find(absl::string_view key) const {
  if (!is_dict()) return nullptr;
  for (const auto& [k, v] : *dict_) {
    if (k == key) return &v;
  }
  return nullptr;
}

std::string Value::TypeName() const {
  switch (kind_) {
    case Kind::kUndefined:
      return "Undefined";
    case Kind::kNone:
      return "NoneType";
    case Kind::kBool:
      return "bool";
    case Kind::kInt:
      return "int";
    case Kind::kFloat:
      return "float";
    case Kind::kString:
      return "str";
    case Kind::kList:
      return "list";
    case Kind::kDict:
      return "dict";
    case Kind::kNamespace:
      return "Namespace";
  }
  return "?";
}

bool Equals(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.float_value() == b.float_value();
    return a.int_value() == b.int_value();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone:
      return true;
    case Value::Kind::kString:
      return a.string_value() == b.string_value();
    case Value::Kind::kList:
      if (a.is_tuple() != b.is_tuple()) return false;
      if (a.list().size() != b.list().size()) return false;
      for (size_t i = 0; i < a.list().size(); ++i) {
        if (!Equals(a.list()[i], b.list()[i])) return false;
      }
      return true;
    case Value::Kind::kDict:
      if (a.dict().size() != b.dict().size()) return false;
      for (const auto& [key, value] : a.dict()) {
        const Value* other = b.Find(key);
        if (other == nullptr || !Equals(value, *other)) return false;
      }
      return true;
    case Value::Kind::kNamespace:
      return &a.mutable_namespace() == &b.mutable_namespace();
    default:
      return false;
  }
}

absl::StatusOr<bool> LessThan(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.float_value() < b.float_value();
    return a.int_value() < b.int_value();
  }
  if (a.is_string() && b.is_string()) return a.string_value() < b.string_value();
  if (a.is_list() && b.is_list()) {
    const List& x = a.list();
    const List& y = b.list();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (Equals(x[i], y[i])) continue;
      return LessThan(x[i], y[i]);
    }
    return x.size() < y.size();
  }
  return absl::InvalidArgumentError(absl::StrCat("'<' not supported between instances of '",
                                                 a.TypeName(), "' and '", b.TypeName(), "'"));
}

std::string PythonFloatRepr(double f) {
  if (std::isnan(f)) return "nan";
  if (std::isinf(f)) return f > 0 ? "inf" : "-inf";
  // The shortest %e form that reads back exactly, as Python's repr chooses.
  char buf[64];
  for (int precision = 1; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof(buf), "%.*e", precision - 1, f);
    if (std::strtod(buf, nullptr) == f) break;
  }
  std::string e(buf);
  const size_t e_pos = e.find('e');
  const int exponent = std::atoi(e.c_str() + e_pos + 1);
  std::string mantissa = e.substr(0, e_pos);
  const bool negative = mantissa[0] == '-';
  if (negative) mantissa.erase(0, 1);
  std::string digits;
  for (char c : mantissa) {
    if (c != '.') digits += c;
  }
  while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
  std::string out = negative ? "-" : "";
  if (exponent < -4 || exponent >= 16) {
    out += digits.substr(0, 1);
    if (digits.size() > 1) absl::StrAppend(&out, ".", digits.substr(1));
    absl::StrAppend(&out, absl::StrFormat("e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent)));
    return out;
  }
  if (exponent < 0) {
    absl::StrAppend(&out, "0.", std::string(-exponent - 1, '0'), digits);
    return out;
  }
  const size_t int_digits = static_cast<size_t>(exponent) + 1;
  if (digits.size() <= int_digits) {
    absl::StrAppend(&out, digits, std::string(int_digits - digits.size(), '0'), ".0");
  } else {
    absl::StrAppend(&out, digits.substr(0, int_digits), ".", digits.substr(int_digits));
  }
  return out;
}

namespace {

bool IsPrintable(char32_t cp) {
  if (cp < 0x20 || cp == 0x7f) return false;
  if (cp >= 0x80 && cp < 0xa0) return false;
  if (cp == 0xad || cp == 0x2028 || cp == 0x2029) return false;
  return true;
}

std::string PythonStringRepr(const std::string& s) {
  const bool has_single = s.find('\'') != std::string::npos;
  const bool has_double = s.find('"') != std::string::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  for (char32_t cp : DecodeUtf8(s)) {
    if (cp == static_cast<char32_t>(quote) || cp == '\\') {
      out += '\\';
      out += static_cast<char>(cp);
    } else if (cp == '\n') {
      out += "\\n";
    } else if (cp == '\r') {
      out += "\\r";
    } else if (cp == '\t') {
      out += "\\t";
    } else if (!IsPrintable(cp)) {
      if (cp < 0x100) {
        out += absl::StrFormat("\\x%02x", static_cast<unsigned>(cp));
      } else {
        out += absl::StrFormat("\\u%04x", static_cast<unsigned>(cp));
      }
    } else {
      AppendUtf8(cp, &out);
    }
  }
  out += quote;
  return out;
}

}  // namespace

std::string ToPythonRepr(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kString:
      return PythonStringRepr(v.string_value());
    case Value::Kind::kList: {
      std::string out = v.is_tuple() ? "(" : "[";
      for (size_t i = 0; i < v.list().size(); ++i) {
        if (i > 0) out += ", ";
        out += ToPythonRepr(v.list()[i]);
      }
      if (v.is_tuple() && v.list().size() == 1) out += ",";
      return out + (v.is_tuple() ? ")" : "]");
    }
    case Value::Kind::kDict: {
      std::string out = "{";
      bool first = true;
      for (const auto& [key, item] : v.dict()) {
        if (!first) out += ", ";
        first = false;
        absl::StrAppend(&out, PythonStringRepr(key), ": ", ToPythonRepr(item));
      }
      return out + "}";
    }
    case Value::Kind::kNamespace:
      return "<Namespace>";
    default:
      return ToPythonStr(v);
  }
}

std::string ToPythonStr(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return "";
    case Value::Kind::kNone:
      return "None";
    case Value::Kind::kBool:
      return v.bool_value() ? "True" : "False";
    case Value::Kind::kInt:
      return absl::StrCat(v.int_value());
    case Value::Kind::kFloat:
      return PythonFloatRepr(v.float_value());
    case Value::Kind::kString:
      return v.string_value();
    default:
      return ToPythonRepr(v);
  }
}

namespace {

void AppendJsonString(const std::string& s, std::string* out) {
  *out += '"';
  for (unsigned char c : s) {
    switch (c) {
      case '"':
        *out += "\\\"";
        break;
      case '\\':
        *out += "\\\\";
        break;
      case '\n':
        *out += "\\n";
        break;
      case '\r':
        *out += "\\r";
        break;
      case '\t':
        *out += "\\t";
        break;
      case '\b':
        *out += "\\b";
        break;
      case '\f':
        *out += "\\f";
        break;
      default:
        if (c < 0x20) {
          *out += absl::StrFormat("\\u%04x", c);
        } else {
          *out += static_cast<char>(c);
        }
    }
  }
  *out += '"';
}

absl::Status DumpJson(const Value& v, const JsonDumpOptions& options, int depth, std::string* out) {
  const std::string item_sep =
      options.separators ? options.separators->first : (options.indent ? "," : ", ");
  const std::string key_sep = options.separators ? options.separators->second : ": ";
  auto newline = [&](int level) {
    if (options.indent) {
      *out += '\n';
      out->append(static_cast<size_t>(*options.indent) * level, ' ');
    }
  };
  switch (v.kind()) {
    case Value::Kind::kNone:
      *out += "null";
      return absl::OkStatus();
    case Value::Kind::kBool:
      *out += v.bool_value() ? "true" : "false";
      return absl::OkStatus();
    case Value::Kind::kInt:
      absl::StrAppend(out, v.int_value());
      return absl::OkStatus();
    case Value::Kind::kFloat: {
      const double f = v.float_value();
      if (std::isnan(f)) {
        *out += "NaN";
      } else if (std::isinf(f)) {
        *out += f > 0 ? "Infinity" : "-Infinity";
      } else {
        *out += PythonFloatRepr(f);
      }
      return absl::OkStatus();
    }
    case Value::Kind::kString:
      AppendJsonString(v.string_value(), out);
      return absl::OkStatus();
    case Value::Kind::kList: {
      if (v.list().empty()) {
        *out += "[]";
        return absl::OkStatus();
      }
      *out += '[';
      for (size_t i = 0; i < v.list().size(); ++i) {
        if (i > 0) *out += item_sep;
        newline(depth + 1);
        RETURN_IF_ERROR(DumpJson(v.list()[i], options, depth + 1, out));
      }
      newline(depth);
      *out += ']';
      return absl::OkStatus();
    }
    case Value::Kind::kDict: {
      if (v.dict().empty()) {
        *out += "{}";
        return absl::OkStatus();
      }
      std::vector<const std::pair<std::string, Value>*> items;
      for (const auto& item : v.dict()) items.push_back(&item);
      if (options.sort_keys) {
        std::stable_sort(items.begin(), items.end(),
                         [](const auto* a, const auto* b) { return a->first < b->first; });
      }
      *out += '{';
      for (size_t i = 0; i < items.size(); ++i) {
        if (i > 0) *out += item_sep;
        newline(depth + 1);
        AppendJsonString(items[i]->first, out);
        *out += key_sep;
        RETURN_IF_ERROR(DumpJson(items[i]->second, options, depth + 1, out));
      }
      newline(depth);
      *out += '}';
      return absl::OkStatus();
    }
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("Object of type ", v.TypeName(), " is not JSON serializable"));
  }
}

}  // namespace

absl::StatusOr<std::string> JsonDumps(const Value& v, const JsonDumpOptions& options) {
  std::string out;
  RETURN_IF_ERROR(DumpJson(v, options, 0, &out));
  return out;
}

std::vector<char32_t> DecodeUtf8(absl::string_view s) {
  std::vector<char32_t> out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = s[i];
    int len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
    if (i + len > s.size()) len = 1;
    char32_t cp = len == 1 ? c : len == 2 ? (c & 0x1f) : len == 3 ? (c & 0x0f) : (c & 0x07);
    for (int k = 1; k < len; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3f);
    out.push_back(cp);
    i += len;
  }
  return out;
}

void AppendUtf8(char32_t cp, std::string* out) {
  if (cp < 0x80) {
    *out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    *out += static_cast<char>(0xc0 | (cp >> 6));
    *out += static_cast<char>(0x80 | (cp & 0x3f));
  } else if (cp < 0x10000) {
    *out += static_cast<char>(0xe0 | (cp >> 12));
    *out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    *out += static_cast<char>(0x80 | (cp & 0x3f));
  } else {
    *out += static_cast<char>(0xf0 | (cp >> 18));
    *out += static_cast<char>(0x80 | ((cp >> 12) & 0x3f));
    *out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    *out += static_cast<char>(0x80 | (cp & 0x3f));
  }
}

std::string EncodeUtf8(const std::vector<char32_t>& cps) {
  std::string out;
  for (char32_t cp : cps) AppendUtf8(cp, &out);
  return out;
}

bool IsPythonSpace(char32_t cp) {
  return (cp >= 0x09 && cp <= 0x0d) || (cp >= 0x1c && cp <= 0x20) || cp == 0x85 || cp == 0xa0 ||
         cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200a) || cp == 0x2028 || cp == 0x2029 ||
         cp == 0x202f || cp == 0x205f || cp == 0x3000;
}

}  // namespace expertd::chat_template
