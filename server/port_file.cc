#include "server/port_file.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>

#include "absl/strings/str_cat.h"

namespace expertd::server {

std::string PortFileJson(const ListeningPorts& ports) {
  std::string out = "{";
  bool first = true;
  for (const auto& [key, port] : ports.ports) {
    if (port <= 0) continue;
    absl::StrAppend(&out, first ? "" : ",", "\"", key, "\":", port);
    first = false;
  }
  out += "}\n";
  return out;
}

absl::Status WritePortFile(const std::string& path, const ListeningPorts& ports) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    if (!(out << PortFileJson(ports)) || !out.flush()) {
      return absl::UnavailableError(absl::StrCat("cannot write port file '", tmp, "'"));
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot rename '", tmp, "' to '", path, "': ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

}  // namespace expertd::server
