#include "server/metrics/http_request.h"

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"

namespace expertd::server::metrics {
namespace {

// RFC 9110 token characters (method and header names).
bool IsTokenChar(char c) {
  return absl::ascii_isalnum(static_cast<unsigned char>(c)) ||
         absl::string_view("!#$%&'*+-.^_`|~").find(c) != absl::string_view::npos;
}

bool IsToken(absl::string_view s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (!IsTokenChar(c)) return false;
  }
  return true;
}

// Visible ASCII only (no controls, no spaces) in the request target.
bool IsTarget(absl::string_view s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (static_cast<unsigned char>(c) <= 0x20 || static_cast<unsigned char>(c) >= 0x7f)
      return false;
  }
  return true;
}

absl::string_view StripCr(absl::string_view line) {
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  return line;
}

bool ParseRequestLine(absl::string_view line, HttpRequestHead* head) {
  std::vector<absl::string_view> parts = absl::StrSplit(line, ' ');
  if (parts.size() != 3 || !IsToken(parts[0]) || !IsTarget(parts[1])) return false;
  if (parts[2] == "HTTP/1.1") {
    head->minor_version = 1;
  } else if (parts[2] == "HTTP/1.0") {
    head->minor_version = 0;
  } else {
    return false;
  }
  head->method = std::string(parts[0]);
  head->target = std::string(parts[1]);
  head->path = head->target.substr(0, head->target.find('?'));
  return true;
}

bool ParseHeaderLine(absl::string_view line, HttpRequestHead* head) {
  const size_t colon = line.find(':');
  if (colon == absl::string_view::npos || !IsToken(line.substr(0, colon))) return false;
  absl::string_view value = absl::StripAsciiWhitespace(line.substr(colon + 1));
  for (char c : value) {
    if ((static_cast<unsigned char>(c) < 0x20 && c != '\t') || c == 0x7f) return false;
  }
  head->headers.emplace_back(absl::AsciiStrToLower(line.substr(0, colon)), std::string(value));
  return true;
}

}  // namespace

absl::string_view HttpRequestHead::Header(absl::string_view name) const {
  for (const auto& [k, v] : headers) {
    if (k == name) return v;
  }
  return {};
}

HttpParse ParseHttpRequestHead(absl::string_view data, size_t max_head_bytes, HttpRequestHead* head,
                               size_t* consumed) {
  // Find the blank line that ends the head, looking at max_head_bytes only.
  const absl::string_view window = data.substr(0, max_head_bytes);
  size_t end = absl::string_view::npos;
  size_t pos = 0;
  while (pos < window.size()) {
    const size_t nl = window.find('\n', pos);
    if (nl == absl::string_view::npos) break;
    if (StripCr(window.substr(pos, nl - pos)).empty() && pos > 0) {
      end = nl + 1;
      break;
    }
    pos = nl + 1;
  }
  if (end == absl::string_view::npos) {
    // A client may send blank lines before the request line (RFC 9112 2.2):
    // not supported; a leading blank line is simply a bad request.
    if (!window.empty() && (window[0] == '\n' || absl::StartsWith(window, "\r\n")))
      return HttpParse::kBad;
    return data.size() >= max_head_bytes ? HttpParse::kTooLarge : HttpParse::kIncomplete;
  }
  *head = HttpRequestHead();
  std::vector<absl::string_view> lines = absl::StrSplit(data.substr(0, end), '\n');
  // The split ends with the blank line and an empty remainder.
  if (lines.size() < 3 || !ParseRequestLine(StripCr(lines[0]), head)) return HttpParse::kBad;
  for (size_t i = 1; i + 2 < lines.size(); ++i) {
    if (!ParseHeaderLine(StripCr(lines[i]), head)) return HttpParse::kBad;
  }
  const std::string connection = absl::AsciiStrToLower(head->Header("connection"));
  head->keep_alive = head->minor_version == 1 ? !absl::StrContains(connection, "close")
                                              : absl::StrContains(connection, "keep-alive");
  const absl::string_view length = head->Header("content-length");
  uint64_t n = 0;
  if (!length.empty() && !absl::SimpleAtoi(length, &n)) return HttpParse::kBad;
  head->has_body = n > 0 || !head->Header("transfer-encoding").empty();
  *consumed = end;
  return HttpParse::kComplete;
}

}  // namespace expertd::server::metrics
