#ifndef EXPERTD_SERVER_VERSION_H_
#define EXPERTD_SERVER_VERSION_H_

namespace expertd::server {
inline constexpr char kVersion[] = "0.1.0";
}  // namespace expertd::server

#endif  // EXPERTD_SERVER_VERSION_H_
