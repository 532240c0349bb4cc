#include "base/flags.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "nlohmann/json.hpp"

namespace expertd {

absl::Status ParseByteSize(absl::string_view text, uint64_t* bytes) {
  std::string s = absl::AsciiStrToLower(absl::StripAsciiWhitespace(text));
  size_t i = 0;
  while (i < s.size() && (absl::ascii_isdigit(s[i]) || s[i] == '.')) ++i;
  std::string number = s.substr(0, i);
  std::string unit(absl::StripAsciiWhitespace(s.substr(i)));
  double value = 0;
  if (number.empty() || !absl::SimpleAtod(number, &value) || value < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("expected a byte size like 512MiB or 4GiB, got '", text, "'"));
  }
  static const std::pair<const char*, double> kUnits[] = {
      {"", 1},
      {"b", 1},
      {"k", 1024.0},
      {"kib", 1024.0},
      {"kb", 1e3},
      {"m", 1048576.0},
      {"mib", 1048576.0},
      {"mb", 1e6},
      {"g", 1073741824.0},
      {"gib", 1073741824.0},
      {"gb", 1e9},
      {"t", 1099511627776.0},
      {"tib", 1099511627776.0},
      {"tb", 1e12},
  };
  for (const auto& [name, scale] : kUnits) {
    if (unit == name) {
      double b = value * scale;
      if (b > 1.8e19)
        return absl::InvalidArgumentError(absl::StrCat("byte size too large: '", text, "'"));
      *bytes = static_cast<uint64_t>(std::llround(b));
      return absl::OkStatus();
    }
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown byte-size unit '", unit, "' in '", text,
                                                 "' (use B, KiB, MiB, GiB, TiB, KB, MB, GB, TB)"));
}

void FlagSet::Add(std::string name, Flag flag) { flags_[std::move(name)] = std::move(flag); }

void FlagSet::String(std::string name, std::string* dst, std::string help) {
  Add(std::move(name), Flag{Kind::kString, dst, 0, 0, 0, 0, std::move(help), *dst});
}
void FlagSet::Int(std::string name, int64_t* dst, int64_t min, int64_t max, std::string help) {
  Add(std::move(name), Flag{Kind::kInt, dst, min, max, 0, 0, std::move(help), absl::StrCat(*dst)});
}
void FlagSet::Double(std::string name, double* dst, double min, double max, std::string help) {
  Add(std::move(name),
      Flag{Kind::kDouble, dst, 0, 0, min, max, std::move(help), absl::StrCat(*dst)});
}
void FlagSet::Bool(std::string name, bool* dst, std::string help) {
  Add(std::move(name),
      Flag{Kind::kBool, dst, 0, 0, 0, 0, std::move(help), *dst ? "true" : "false"});
}
void FlagSet::ByteSize(std::string name, uint64_t* dst, std::string help) {
  Add(std::move(name), Flag{Kind::kByteSize, dst, 0, 0, 0, 0, std::move(help), absl::StrCat(*dst)});
}

absl::Status FlagSet::Set(absl::string_view name, absl::string_view value) {
  auto it = flags_.find(std::string(name));
  if (it == flags_.end()) {
    return absl::InvalidArgumentError(absl::StrCat("unknown flag --", name, " (see --help)"));
  }
  Flag& f = it->second;
  auto bad = [&](absl::string_view what) {
    return absl::InvalidArgumentError(
        absl::StrCat("flag --", name, ": expected ", what, ", got '", value, "'"));
  };
  switch (f.kind) {
    case Kind::kString:
      *static_cast<std::string*>(f.dst) = std::string(value);
      break;
    case Kind::kInt: {
      int64_t v;
      if (!absl::SimpleAtoi(value, &v) || v < f.imin || v > f.imax) {
        return bad(absl::StrCat("an integer in [", f.imin, ", ", f.imax, "]"));
      }
      *static_cast<int64_t*>(f.dst) = v;
      break;
    }
    case Kind::kDouble: {
      double v;
      if (!absl::SimpleAtod(value, &v) || !std::isfinite(v) || v < f.dmin || v > f.dmax) {
        return bad(absl::StrCat("a number in [", f.dmin, ", ", f.dmax, "]"));
      }
      *static_cast<double*>(f.dst) = v;
      break;
    }
    case Kind::kBool: {
      bool v;
      if (!absl::SimpleAtob(value, &v)) return bad("true or false");
      *static_cast<bool*>(f.dst) = v;
      break;
    }
    case Kind::kByteSize: {
      absl::Status s = ParseByteSize(value, static_cast<uint64_t*>(f.dst));
      if (!s.ok())
        return absl::InvalidArgumentError(absl::StrCat("flag --", name, ": ", s.message()));
      break;
    }
  }
  set_flags_.push_back(std::string(name));
  return absl::OkStatus();
}

absl::Status FlagSet::ApplyConfigFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("config file '", path, "': cannot open"));
  std::stringstream buf;
  buf << in.rdbuf();
  nlohmann::json doc = nlohmann::json::parse(buf.str(), nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat("config file '", path, "': not a JSON object"));
  }
  for (const auto& [key, value] : doc.items()) {
    std::string text;
    if (value.is_string())
      text = value.get<std::string>();
    else if (value.is_boolean())
      text = value.get<bool>() ? "true" : "false";
    else if (value.is_number_integer())
      text = absl::StrCat(value.get<int64_t>());
    else if (value.is_number())
      text = absl::StrCat(value.get<double>());
    else
      return absl::InvalidArgumentError(absl::StrCat("config file '", path, "': key '", key,
                                                     "' must be a string, number or boolean"));
    absl::Status s = Set(key, text);
    if (!s.ok())
      return absl::InvalidArgumentError(absl::StrCat("config file '", path, "': ", s.message()));
  }
  return absl::OkStatus();
}

absl::Status FlagSet::Parse(int argc, const char* const* argv,
                            std::vector<std::string>* positional) {
  // The config file is applied first so that explicit flags override it.
  std::vector<std::pair<std::string, std::string>> assignments;
  std::string config_path;
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg(argv[i]);
    if (arg == "--") {
      for (++i; i < argc; ++i) {
        if (positional == nullptr)
          return absl::InvalidArgumentError(absl::StrCat("unexpected argument '", argv[i], "'"));
        positional->push_back(argv[i]);
      }
      break;
    }
    if (arg.size() < 2 || arg.substr(0, 2) != "--") {
      if (positional == nullptr)
        return absl::InvalidArgumentError(absl::StrCat("unexpected argument '", arg, "'"));
      positional->push_back(std::string(arg));
      continue;
    }
    arg.remove_prefix(2);
    if (arg == "help" || arg == "h") {
      help_requested_ = true;
      return absl::OkStatus();
    }
    std::string name, value;
    size_t eq = arg.find('=');
    if (eq != absl::string_view::npos) {
      name = std::string(arg.substr(0, eq));
      value = std::string(arg.substr(eq + 1));
    } else {
      name = std::string(arg);
      auto it = flags_.find(name);
      if (it != flags_.end() && it->second.kind == Kind::kBool) {
        value = "true";
      } else if (it == flags_.end() && name.rfind("no", 0) == 0 && flags_.count(name.substr(2)) &&
                 flags_[name.substr(2)].kind == Kind::kBool) {
        name = name.substr(2);
        value = "false";
      } else if (name == "config" || it != flags_.end()) {
        if (i + 1 >= argc)
          return absl::InvalidArgumentError(absl::StrCat("flag --", name, ": missing value"));
        value = argv[++i];
      } else {
        return absl::InvalidArgumentError(absl::StrCat("unknown flag --", name, " (see --help)"));
      }
    }
    if (name == "config" && allow_config_file_) {
      config_path = value;
    } else {
      assignments.emplace_back(std::move(name), std::move(value));
    }
  }
  if (!config_path.empty()) RETURN_IF_ERROR(ApplyConfigFile(config_path));
  for (const auto& [name, value] : assignments) RETURN_IF_ERROR(Set(name, value));
  return absl::OkStatus();
}

std::string FlagSet::Usage() const {
  std::string out = absl::StrCat(usage_, "\n\nFlags:\n");
  if (allow_config_file_)
    absl::StrAppend(
        &out,
        "  --config=FILE\n      JSON object of flag values; command-line flags override it\n");
  for (const auto& [name, f] : flags_) {
    absl::StrAppend(&out, "  --", name,
                    "  (default: ", f.default_text.empty() ? "\"\"" : f.default_text, ")\n      ",
                    f.help, "\n");
  }
  return out;
}

}  // namespace expertd
