// Parser for the head of an HTTP/1.x request (request line + headers), as
// sent by Prometheus, Kubernetes probes and curl to the metrics port. Bytes
// from the network: every input is either parsed, incomplete, or refused;
// nothing is read past `data`.
#ifndef EXPERTD_SERVER_METRICS_HTTP_REQUEST_H_
#define EXPERTD_SERVER_METRICS_HTTP_REQUEST_H_

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"

namespace expertd::server::metrics {

struct HttpRequestHead {
  std::string method;                                        // "GET"
  std::string target;                                        // "/metrics?x=1" as sent
  std::string path;                                          // target without the query: "/metrics"
  int minor_version = 1;                                     // HTTP/1.<minor_version>
  std::vector<std::pair<std::string, std::string>> headers;  // names lower-cased
  bool keep_alive = true;  // HTTP/1.1 unless "Connection: close"; 1.0 only with keep-alive
  bool has_body = false;   // Content-Length > 0 or Transfer-Encoding (not supported here)

  // The first header named `name` (lower case); empty when absent.
  absl::string_view Header(absl::string_view name) const;
};

enum class HttpParse {
  kIncomplete,  // no blank line yet, and fewer than max_head_bytes seen
  kComplete,    // *head filled; *consumed = bytes of the head (incl. CRLFCRLF)
  kBad,         // not an HTTP/1.x request head: answer 400 and close
  kTooLarge,    // no end of head within max_head_bytes: answer 431 and close
};

// Parses the head at the start of `data`. Accepts CRLF or bare LF line ends.
HttpParse ParseHttpRequestHead(absl::string_view data, size_t max_head_bytes, HttpRequestHead* head,
                               size_t* consumed);

}  // namespace expertd::server::metrics

#endif  // EXPERTD_SERVER_METRICS_HTTP_REQUEST_H_
