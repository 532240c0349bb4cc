// Structured logging: one line per event, JSON by default (for log shippers),
// or "text" for people at a terminal. Thread-safe; a line is written atomically.
//
//   EXPERTD_LOG(Info, "listening").With("address", addr).With("port", port);
//
// The line is emitted when the temporary is destroyed (end of the statement).
#ifndef EXPERTD_BASE_LOG_H_
#define EXPERTD_BASE_LOG_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace expertd::log {

enum class Level { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3 };
enum class Format { kJson, kText };

// Global settings, normally set once at start-up.
void SetMinLevel(Level level);
void SetFormat(Format format);
bool ParseLevel(absl::string_view name, Level* level);
bool ParseFormat(absl::string_view name, Format* format);
bool Enabled(Level level);

// Test hook: when non-null, lines go to *sink instead of stderr.
void SetSinkForTesting(std::string* sink);

class Line {
 public:
  Line(Level level, const char* file, int line, absl::string_view message);
  ~Line();
  Line(const Line&) = delete;
  Line& operator=(const Line&) = delete;

  Line& With(absl::string_view key, absl::string_view value);
  Line& With(absl::string_view key, const char* value) {
    return With(key, absl::string_view(value));
  }
  Line& With(absl::string_view key, const std::string& value) {
    return With(key, absl::string_view(value));
  }
  Line& With(absl::string_view key, int64_t value);
  Line& With(absl::string_view key, uint64_t value);
  Line& With(absl::string_view key, int value) { return With(key, static_cast<int64_t>(value)); }
  Line& With(absl::string_view key, unsigned value) {
    return With(key, static_cast<uint64_t>(value));
  }
  Line& With(absl::string_view key, long long value) {
    return With(key, static_cast<int64_t>(value));
  }
  Line& With(absl::string_view key, unsigned long long value) {
    return With(key, static_cast<uint64_t>(value));
  }
  Line& With(absl::string_view key, double value);
  Line& With(absl::string_view key, bool value);
  Line& With(absl::string_view key, const absl::Status& status);

 private:
  void AppendKey(absl::string_view key);
  void AppendRaw(absl::string_view key, absl::string_view json_value, absl::string_view text_value);

  bool enabled_;
  Level level_;
  std::string fields_;  // already formatted: `,"k":v` (JSON) or ` k=v` (text)
  std::string message_;
  const char* file_;
  int line_;
};

}  // namespace expertd::log

#define EXPERTD_LOG(severity, message) \
  ::expertd::log::Line(::expertd::log::Level::k##severity, __FILE__, __LINE__, (message))

#endif  // EXPERTD_BASE_LOG_H_
