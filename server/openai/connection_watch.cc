#include "server/openai/connection_watch.h"

#include <dirent.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstdlib>

namespace expertd::server::openai {
namespace {

// Numeric host and port of a socket address; false for non-IP families.
bool HostAndPort(const sockaddr_storage& addr, socklen_t len, std::string* host, int* port) {
  if (addr.ss_family != AF_INET && addr.ss_family != AF_INET6) return false;
  char h[NI_MAXHOST];
  char p[NI_MAXSERV];
  if (getnameinfo(reinterpret_cast<const sockaddr*>(&addr), len, h, sizeof(h), p, sizeof(p),
                  NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
    return false;
  }
  *host = h;
  *port = std::atoi(p);
  return true;
}

bool IsConnection(int fd, const std::string& remote_addr, int remote_port, int local_port) {
  sockaddr_storage addr;
  socklen_t len = sizeof(addr);
  std::string host;
  int port;
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return false;  // not a socket
  if (!HostAndPort(addr, len, &host, &port) || port != local_port) return false;
  len = sizeof(addr);
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return false;
  return HostAndPort(addr, len, &host, &port) && port == remote_port && host == remote_addr;
}

}  // namespace

int ConnectionSocket(const std::string& remote_addr, int remote_port, int local_port) {
  if (remote_port <= 0 || local_port <= 0) return -1;
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return -1;
  int found = -1;
  while (dirent* entry = readdir(dir)) {
    char* end;
    const long fd = std::strtol(entry->d_name, &end, 10);
    if (*end != '\0' || end == entry->d_name || fd == dirfd(dir)) continue;
    if (IsConnection(static_cast<int>(fd), remote_addr, remote_port, local_port)) {
      found = static_cast<int>(fd);
      break;
    }
  }
  closedir(dir);
  return found;
}

bool PeerClosed(int fd) {
  if (fd < 0) return false;
  pollfd p{fd, POLLIN | POLLRDHUP, 0};
  int ready;
  do {
    ready = poll(&p, 1, 0);
  } while (ready < 0 && errno == EINTR);
  if (ready <= 0) return false;
  if (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) return true;
  // Readable: data (a pipelined request), or end of stream on kernels that
  // do not report POLLRDHUP.
  char byte;
  ssize_t n;
  do {
    n = recv(fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  } while (n < 0 && errno == EINTR);
  return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
}

}  // namespace expertd::server::openai
