#include "models/chat_template/string_methods.h"

#include <algorithm>
#include <set>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace expertd::chat_template {
namespace {

bool IsUpper(char c) { return c >= 'A' && c <= 'Z'; }
bool IsLower(char c) { return c >= 'a' && c <= 'z'; }

absl::StatusOr<std::optional<std::string>> OptionalString(const Value* v, absl::string_view what) {
  if (v == nullptr || v->is_none()) return std::optional<std::string>();
  if (!v->is_string())
    return absl::InvalidArgumentError(absl::StrCat(what, " must be str or None"));
  return std::optional<std::string>(v->string_value());
}

absl::StatusOr<int64_t> OptionalInt(const Value* v, int64_t fallback) {
  if (v == nullptr) return fallback;
  if (!v->is_number() || v->is_float()) return absl::InvalidArgumentError("expected an integer");
  return v->int_value();
}

Value Split(const std::string& s, const std::optional<std::string>& sep, int64_t maxsplit) {
  List parts;
  if (sep.has_value()) {
    size_t start = 0;
    while (maxsplit < 0 || static_cast<int64_t>(parts.size()) < maxsplit) {
      const size_t at = s.find(*sep, start);
      if (at == std::string::npos) break;
      parts.push_back(Value::String(s.substr(start, at - start)));
      start = at + sep->size();
    }
    parts.push_back(Value::String(s.substr(start)));
    return Value::MakeList(std::move(parts));
  }
  // Whitespace split: runs of whitespace separate, empty strings dropped.
  std::vector<char32_t> cps = DecodeUtf8(s);
  size_t i = 0;
  while (i < cps.size()) {
    while (i < cps.size() && IsPythonSpace(cps[i])) ++i;
    if (i == cps.size()) break;
    if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) == maxsplit) {
      std::vector<char32_t> rest(cps.begin() + i, cps.end());
      while (!rest.empty() && IsPythonSpace(rest.back())) rest.pop_back();
      parts.push_back(Value::String(EncodeUtf8(rest)));
      break;
    }
    size_t j = i;
    while (j < cps.size() && !IsPythonSpace(cps[j])) ++j;
    parts.push_back(Value::String(EncodeUtf8({cps.begin() + i, cps.begin() + j})));
    i = j;
  }
  return Value::MakeList(std::move(parts));
}

absl::StatusOr<bool> AffixMatch(const std::string& s, const Value* affix, bool prefix) {
  if (affix == nullptr) return absl::InvalidArgumentError("startswith/endswith takes an argument");
  List candidates = affix->is_list() ? affix->list() : List{*affix};
  for (const Value& c : candidates) {
    if (!c.is_string()) return absl::InvalidArgumentError("startswith/endswith takes str");
    const std::string& a = c.string_value();
    if (a.size() > s.size()) continue;
    if (prefix ? s.compare(0, a.size(), a) == 0
               : s.compare(s.size() - a.size(), a.size(), a) == 0) {
      return true;
    }
  }
  return false;
}

int64_t CodePointIndex(const std::string& s, size_t byte_pos) {
  return static_cast<int64_t>(DecodeUtf8(absl::string_view(s).substr(0, byte_pos)).size());
}

}  // namespace

bool IsStringMethod(absl::string_view name) {
  static const auto* const kMethods = new std::set<absl::string_view>{
      "strip", "lstrip", "rstrip", "split",      "startswith", "endswith",
      "upper", "lower",  "title",  "capitalize", "replace",    "find",
      "rfind", "count",  "join",   "isdigit",    "isspace",    "isalpha"};
  return kMethods->count(name) > 0;
}

std::string PyStrip(const std::string& s, const std::optional<std::string>& chars, bool left,
                    bool right) {
  std::vector<char32_t> cps = DecodeUtf8(s);
  std::vector<char32_t> set;
  if (chars) set = DecodeUtf8(*chars);
  auto strip = [&](char32_t cp) {
    return chars ? std::find(set.begin(), set.end(), cp) != set.end() : IsPythonSpace(cp);
  };
  size_t begin = 0, end = cps.size();
  if (left) {
    while (begin < end && strip(cps[begin])) ++begin;
  }
  if (right) {
    while (end > begin && strip(cps[end - 1])) --end;
  }
  return EncodeUtf8({cps.begin() + begin, cps.begin() + end});
}

std::string AsciiLower(std::string s) {
  for (char& c : s) {
    if (IsUpper(c)) c = static_cast<char>(c - 'A' + 'a');
  }
  return s;
}

std::string AsciiUpper(std::string s) {
  for (char& c : s) {
    if (IsLower(c)) c = static_cast<char>(c - 'a' + 'A');
  }
  return s;
}

std::string PyCapitalize(const std::string& s) {
  std::string out = AsciiLower(s);
  if (!out.empty() && IsLower(out[0])) out[0] = static_cast<char>(out[0] - 'a' + 'A');
  return out;
}

std::string PyReplace(const std::string& s, const std::string& old, const std::string& repl,
                      int64_t count) {
  if (old.empty()) {
    std::string out;
    int64_t done = 0;
    for (char32_t cp : DecodeUtf8(s)) {
      if (count < 0 || done < count) {
        out += repl;
        ++done;
      }
      AppendUtf8(cp, &out);
    }
    if (count < 0 || done < count) out += repl;
    return out;
  }
  std::string out;
  size_t start = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    const size_t at = s.find(old, start);
    if (at == std::string::npos) break;
    absl::StrAppend(&out, s.substr(start, at - start), repl);
    start = at + old.size();
    ++done;
  }
  out += s.substr(start);
  return out;
}

absl::StatusOr<Value> CallStringMethod(const std::string& s, absl::string_view name,
                                       const Args& args) {
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    ASSIGN_OR_RETURN(auto chars, OptionalString(args.Get(0, "chars"), "strip arg"));
    return Value::String(PyStrip(s, chars, name != "rstrip", name != "lstrip"));
  }
  if (name == "split") {
    ASSIGN_OR_RETURN(auto sep, OptionalString(args.Get(0, "sep"), "sep"));
    if (sep && sep->empty()) return absl::InvalidArgumentError("empty separator");
    ASSIGN_OR_RETURN(int64_t maxsplit, OptionalInt(args.Get(1, "maxsplit"), -1));
    return Split(s, sep, maxsplit);
  }
  if (name == "startswith" || name == "endswith") {
    ASSIGN_OR_RETURN(bool match, AffixMatch(s, args.Get(0, "prefix"), name == "startswith"));
    return Value::Bool(match);
  }
  if (name == "upper") return Value::String(AsciiUpper(s));
  if (name == "lower") return Value::String(AsciiLower(s));
  if (name == "capitalize") return Value::String(PyCapitalize(s));
  if (name == "title") {
    std::string out = s;
    bool previous_cased = false;
    for (char& c : out) {
      if (IsUpper(c) || IsLower(c)) {
        c = previous_cased ? AsciiLower(std::string(1, c))[0] : AsciiUpper(std::string(1, c))[0];
        previous_cased = true;
      } else {
        previous_cased = false;
      }
    }
    return Value::String(std::move(out));
  }
  if (name == "replace") {
    const Value* old = args.Get(0, "old");
    const Value* repl = args.Get(1, "new");
    if (old == nullptr || repl == nullptr || !old->is_string() || !repl->is_string()) {
      return absl::InvalidArgumentError("replace() takes two strings");
    }
    ASSIGN_OR_RETURN(int64_t count, OptionalInt(args.Get(2, "count"), -1));
    return Value::String(PyReplace(s, old->string_value(), repl->string_value(), count));
  }
  if (name == "find" || name == "rfind" || name == "count") {
    const Value* sub = args.Get(0, "sub");
    if (sub == nullptr || !sub->is_string()) return absl::InvalidArgumentError("expected str");
    const std::string& needle = sub->string_value();
    if (name == "count") {
      if (needle.empty()) return Value::Int(CodePointIndex(s, s.size()) + 1);
      int64_t n = 0;
      for (size_t at = s.find(needle); at != std::string::npos;
           at = s.find(needle, at + needle.size()))
        ++n;
      return Value::Int(n);
    }
    const size_t at = name == "find" ? s.find(needle) : s.rfind(needle);
    return Value::Int(at == std::string::npos ? -1 : CodePointIndex(s, at));
  }
  if (name == "join") {
    const Value* items = args.Get(0, "iterable");
    if (items == nullptr) return absl::InvalidArgumentError("join() takes an iterable");
    ASSIGN_OR_RETURN(List parts, Iterate(*items));
    std::string out;
    for (size_t i = 0; i < parts.size(); ++i) {
      if (!parts[i].is_string()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "sequence item ", i, ": expected str instance, ", parts[i].TypeName(), " found"));
      }
      if (i > 0) out += s;
      out += parts[i].string_value();
    }
    return Value::String(std::move(out));
  }
  if (name == "isdigit" || name == "isspace" || name == "isalpha") {
    std::vector<char32_t> cps = DecodeUtf8(s);
    bool all = !cps.empty();
    for (char32_t cp : cps) {
      const bool ok = name == "isdigit"   ? (cp >= '0' && cp <= '9')
                      : name == "isspace" ? IsPythonSpace(cp)
                                          : ((cp | 0x20) >= 'a' && (cp | 0x20) <= 'z');
      all = all && ok;
    }
    return Value::Bool(all);
  }
  return absl::InvalidArgumentError(absl::StrCat("'str' object has no attribute '", name, "'"));
}

}  // namespace expertd::chat_template
