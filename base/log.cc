#include "base/log.h"

#include <atomic>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace expertd::log {
namespace {

std::atomic<int> g_min_level{static_cast<int>(Level::kInfo)};
std::atomic<int> g_format{static_cast<int>(Format::kJson)};
std::mutex g_write_mu;
std::string* g_sink = nullptr;  // guarded by g_write_mu

const char* LevelName(Level level) {
  switch (level) {
    case Level::kDebug:
      return "debug";
    case Level::kInfo:
      return "info";
    case Level::kWarn:
      return "warn";
    case Level::kError:
      return "error";
  }
  return "?";
}

// JSON string escaping (RFC 8259): quotes, backslash, control characters.
void AppendJsonString(std::string* out, absl::string_view s) {
  out->push_back('"');
  for (unsigned char c : s) {
    switch (c) {
      case '"':
        out->append("\\\"");
        break;
      case '\\':
        out->append("\\\\");
        break;
      case '\n':
        out->append("\\n");
        break;
      case '\r':
        out->append("\\r");
        break;
      case '\t':
        out->append("\\t");
        break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", c);
          out->append(buf);
        } else {
          out->push_back(static_cast<char>(c));
        }
    }
  }
  out->push_back('"');
}

Format CurrentFormat() { return static_cast<Format>(g_format.load(std::memory_order_relaxed)); }

}  // namespace

void SetMinLevel(Level level) { g_min_level.store(static_cast<int>(level)); }
void SetFormat(Format format) { g_format.store(static_cast<int>(format)); }
bool Enabled(Level level) {
  return static_cast<int>(level) >= g_min_level.load(std::memory_order_relaxed);
}

bool ParseLevel(absl::string_view name, Level* level) {
  if (name == "debug")
    *level = Level::kDebug;
  else if (name == "info")
    *level = Level::kInfo;
  else if (name == "warn")
    *level = Level::kWarn;
  else if (name == "error")
    *level = Level::kError;
  else
    return false;
  return true;
}

bool ParseFormat(absl::string_view name, Format* format) {
  if (name == "json")
    *format = Format::kJson;
  else if (name == "text")
    *format = Format::kText;
  else
    return false;
  return true;
}

void SetSinkForTesting(std::string* sink) {
  std::lock_guard<std::mutex> lock(g_write_mu);
  g_sink = sink;
}

Line::Line(Level level, const char* file, int line, absl::string_view message)
    : enabled_(Enabled(level)), level_(level), file_(file), line_(line) {
  if (enabled_) message_ = std::string(message);
}

void Line::AppendRaw(absl::string_view key, absl::string_view json_value,
                     absl::string_view text_value) {
  if (CurrentFormat() == Format::kJson) {
    fields_.push_back(',');
    AppendJsonString(&fields_, key);
    fields_.push_back(':');
    fields_.append(json_value.data(), json_value.size());
  } else {
    absl::StrAppend(&fields_, " ", key, "=", text_value);
  }
}

Line& Line::With(absl::string_view key, absl::string_view value) {
  if (!enabled_) return *this;
  std::string json;
  AppendJsonString(&json, value);
  // Text format quotes values containing spaces so they stay one token.
  bool needs_quotes = value.empty() || value.find_first_of(" \t\"=") != absl::string_view::npos;
  AppendRaw(key, json, needs_quotes ? absl::string_view(json) : value);
  return *this;
}

Line& Line::With(absl::string_view key, int64_t value) {
  if (enabled_) {
    std::string v = absl::StrCat(value);
    AppendRaw(key, v, v);
  }
  return *this;
}

Line& Line::With(absl::string_view key, uint64_t value) {
  if (enabled_) {
    std::string v = absl::StrCat(value);
    AppendRaw(key, v, v);
  }
  return *this;
}

Line& Line::With(absl::string_view key, double value) {
  if (enabled_) {
    // JSON has no NaN/Inf: write them as strings.
    std::string v = absl::StrCat(value);
    bool finite = std::isfinite(value);
    AppendRaw(key, finite ? v : absl::StrCat("\"", v, "\""), v);
  }
  return *this;
}

Line& Line::With(absl::string_view key, bool value) {
  if (enabled_) {
    const char* v = value ? "true" : "false";
    AppendRaw(key, v, v);
  }
  return *this;
}

Line& Line::With(absl::string_view key, const absl::Status& status) {
  return With(key, absl::string_view(status.ToString()));
}

Line::~Line() {
  if (!enabled_) return;
  std::string ts = absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", absl::Now(), absl::UTCTimeZone());
  absl::string_view file(file_);
  size_t slash = file.rfind('/');
  if (slash != absl::string_view::npos) file = file.substr(slash + 1);
  std::string out;
  if (CurrentFormat() == Format::kJson) {
    out = absl::StrCat("{\"ts\":\"", ts, "\",\"level\":\"", LevelName(level_), "\",\"msg\":");
    AppendJsonString(&out, message_);
    out.append(fields_);
    absl::StrAppend(&out, ",\"src\":\"", file, ":", line_, "\"}\n");
  } else {
    out = absl::StrCat(ts, " ", LevelName(level_), " ", message_, fields_, "  (", file, ":", line_,
                       ")\n");
  }
  std::lock_guard<std::mutex> lock(g_write_mu);
  if (g_sink != nullptr) {
    g_sink->append(out);
  } else {
    std::fwrite(out.data(), 1, out.size(), stderr);
    std::fflush(stderr);
  }
}

}  // namespace expertd::log
