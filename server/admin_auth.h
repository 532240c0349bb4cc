// Bearer-token check for AdminService calls. Pure logic (no gRPC types) so it
// is unit-tested directly; the service passes the `authorization` metadata.
#ifndef EXPERTD_SERVER_ADMIN_AUTH_H_
#define EXPERTD_SERVER_ADMIN_AUTH_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace expertd::server {

// Compares in time that depends only on the lengths, not on where the inputs
// differ, so the token cannot be guessed byte by byte from response times.
bool ConstantTimeEquals(absl::string_view a, absl::string_view b);

// `header` is the value of the `authorization` metadata, or null if absent.
// - no token configured           -> PERMISSION_DENIED ("admin API disabled")
// - header absent / not "Bearer " -> UNAUTHENTICATED
// - wrong token                   -> PERMISSION_DENIED
absl::Status CheckAdminToken(const std::string& configured_token, const absl::string_view* header);

}  // namespace expertd::server

#endif  // EXPERTD_SERVER_ADMIN_AUTH_H_
