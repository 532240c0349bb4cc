// Noticing that an HTTP client went away while its request is still being
// computed. cpp-httplib (0.11) tells a handler nothing about its connection
// until it writes, and a non-streaming response is written only at the end,
// so a client that gives up on a long completion would otherwise keep its
// sequence (and KV blocks) running to max_tokens.
//
// The handler finds its connection's socket from the addresses httplib puts
// in the Request (ConnectionSocket), then polls it while it waits
// (PeerClosed). The socket stays open meanwhile: httplib closes it only after
// the handler returns, on the handler's own thread.
#ifndef EXPERTD_SERVER_OPENAI_CONNECTION_WATCH_H_
#define EXPERTD_SERVER_OPENAI_CONNECTION_WATCH_H_

#include <string>

namespace expertd::server::openai {

// The descriptor of this process's TCP socket whose local port is
// `local_port` and whose peer is `remote_addr`:`remote_port` (numeric host,
// as getnameinfo(NI_NUMERICHOST) spells it: what httplib's Request carries);
// -1 when there is none. Scans /proc/self/fd: a few microseconds per open
// descriptor, once per request.
int ConnectionSocket(const std::string& remote_addr, int remote_port, int local_port);

// True when the peer of `fd` closed or reset the connection (or shut down its
// sending side: HTTP clients do not half-close while awaiting a response).
// Never blocks; bytes the peer sent (a pipelined request) do not count as
// closed. False for fd < 0.
bool PeerClosed(int fd);

}  // namespace expertd::server::openai

#endif  // EXPERTD_SERVER_OPENAI_CONNECTION_WATCH_H_
