#include "server/admin_auth.h"

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"

namespace expertd::server {

bool ConstantTimeEquals(absl::string_view a, absl::string_view b) {
  // Walk the longer input fully; any difference (length or byte) sets a bit.
  size_t n = a.size() > b.size() ? a.size() : b.size();
  volatile unsigned char diff = static_cast<unsigned char>(a.size() != b.size());
  for (size_t i = 0; i < n; ++i) {
    unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff = diff | (x ^ y);
  }
  return diff == 0;
}

absl::Status CheckAdminToken(const std::string& configured_token, const absl::string_view* header) {
  if (configured_token.empty()) {
    return absl::PermissionDeniedError(
        "admin API disabled: start expertd with --admin_token_file (or --admin_token)");
  }
  if (header == nullptr) {
    return absl::UnauthenticatedError("missing 'authorization: Bearer <token>' metadata");
  }
  absl::string_view value = absl::StripAsciiWhitespace(*header);
  constexpr absl::string_view kPrefix = "Bearer ";
  if (value.size() < kPrefix.size() ||
      !absl::EqualsIgnoreCase(value.substr(0, kPrefix.size()), kPrefix)) {
    return absl::UnauthenticatedError("authorization metadata must be 'Bearer <token>'");
  }
  absl::string_view token = absl::StripAsciiWhitespace(value.substr(kPrefix.size()));
  if (!ConstantTimeEquals(token, configured_token)) {
    return absl::PermissionDeniedError("invalid admin token");
  }
  return absl::OkStatus();
}

}  // namespace expertd::server
