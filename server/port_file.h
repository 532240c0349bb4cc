// The --port_file: the ports the daemon actually bound (port 0 in a listen
// address picks a free one), for scripts and tests that start it.
//
// One JSON object on one line, written atomically (tmp file + rename) once
// every listener is up:
//   {"grpc_port":50051,"admin_port":50052,"metrics_port":9090,"http_port":8000}
// admin_port is the port serving AdminService: grpc_port's value without
// --admin_listen. A listener that is not enabled is left out. New listeners
// add a key; readers must ignore keys they do not know.
#ifndef EXPERTD_SERVER_PORT_FILE_H_
#define EXPERTD_SERVER_PORT_FILE_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"

namespace expertd::server {

struct ListeningPorts {
  // (key, port) in the order written, e.g. {"grpc_port", 50051}; ports <= 0
  // (listener disabled) are skipped.
  std::vector<std::pair<std::string, int>> ports;
};

// The file's content (including the final newline).
std::string PortFileJson(const ListeningPorts& ports);
// Writes PortFileJson atomically to `path`.
absl::Status WritePortFile(const std::string& path, const ListeningPorts& ports);

}  // namespace expertd::server

#endif  // EXPERTD_SERVER_PORT_FILE_H_
