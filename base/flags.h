// A small, testable command-line flag parser shared by every expertd binary.
//
// Flags are bound to fields of a caller-owned struct (no globals), so a test can
// parse an argv and inspect the result. Accepted forms: --name=value,
// --name value, --bool_flag, --nobool_flag, --bool_flag=true|false. A JSON
// config file (an object whose keys are flag names) can be applied first, so
// flags on the command line override it.
//
// Errors name the flag and the offending value, e.g.
//   "flag --port: expected an integer in [1, 65535], got '70000'".
#ifndef EXPERTD_BASE_FLAGS_H_
#define EXPERTD_BASE_FLAGS_H_

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace expertd {

// Parses a byte size: "1048576", "512MiB", "4GiB", "1.5GB", "64k". Binary
// suffixes (KiB, MiB, GiB, TiB) and decimal ones (KB, MB, GB, TB) are both
// accepted; "k/m/g/t" alone mean binary.
absl::Status ParseByteSize(absl::string_view text, uint64_t* bytes);

class FlagSet {
 public:
  explicit FlagSet(std::string program_usage) : usage_(std::move(program_usage)) {}

  // The pointers must outlive Parse*(). `help` is one line.
  void String(std::string name, std::string* dst, std::string help);
  void Int(std::string name, int64_t* dst, int64_t min, int64_t max, std::string help);
  void Double(std::string name, double* dst, double min, double max, std::string help);
  void Bool(std::string name, bool* dst, std::string help);
  void ByteSize(std::string name, uint64_t* dst, std::string help);

  // Parses argv[1..]. Non-flag arguments go to *positional (may be null, in
  // which case they are an error). "--" ends flag parsing. "--help" sets
  // help_requested() and stops. "--config=FILE" (if `allow_config_file`) loads
  // the JSON file before the remaining flags are applied, wherever it appears.
  absl::Status Parse(int argc, const char* const* argv, std::vector<std::string>* positional);

  // Applies one flag by name, as if given on the command line.
  absl::Status Set(absl::string_view name, absl::string_view value);

  // Applies a JSON object file: {"port": 50051, "backend": "cpu", ...}.
  absl::Status ApplyConfigFile(const std::string& path);

  void AllowConfigFile() { allow_config_file_ = true; }
  bool help_requested() const { return help_requested_; }
  // Names of flags that were set explicitly (command line or config file).
  const std::vector<std::string>& set_flags() const { return set_flags_; }
  std::string Usage() const;

 private:
  enum class Kind { kString, kInt, kDouble, kBool, kByteSize };
  struct Flag {
    Kind kind;
    void* dst;
    int64_t imin = 0, imax = 0;
    double dmin = 0, dmax = 0;
    std::string help;
    std::string default_text;
  };
  void Add(std::string name, Flag flag);

  std::string usage_;
  std::map<std::string, Flag> flags_;
  std::vector<std::string> set_flags_;
  bool allow_config_file_ = false;
  bool help_requested_ = false;
};

}  // namespace expertd

#endif  // EXPERTD_BASE_FLAGS_H_
