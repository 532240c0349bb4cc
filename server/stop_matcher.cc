#include "server/stop_matcher.h"

#include <algorithm>

namespace expertd::server {

StopStringMatcher::StopStringMatcher(std::vector<std::string> stop_strings)
    : stops_(std::move(stop_strings)) {
  stops_.erase(std::remove(stops_.begin(), stops_.end(), std::string()), stops_.end());
  for (const std::string& s : stops_) max_stop_len_ = std::max(max_stop_len_, s.size());
}

StopStringMatcher::Result StopStringMatcher::Append(absl::string_view delta) {
  Result r;
  held_.append(delta.data(), delta.size());
  if (stops_.empty()) {
    r.emit.swap(held_);
    return r;
  }
  // Earliest stop string occurrence wins (ties: the first listed).
  size_t best = std::string::npos;
  for (const std::string& s : stops_) {
    size_t pos = held_.find(s);
    if (pos != std::string::npos && pos < best) {
      best = pos;
      r.matched = s;
    }
  }
  if (best != std::string::npos) {
    r.emit = held_.substr(0, best);
    r.stopped = true;
    stopped_ = true;
    held_.clear();
    return r;
  }
  size_t keep = PartialMatchLength();
  r.emit = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return r;
}

size_t StopStringMatcher::PartialMatchLength() const {
  size_t longest = 0;
  const size_t limit = std::min(held_.size(), max_stop_len_ - 1);
  for (const std::string& s : stops_) {
    for (size_t len = std::min(limit, s.size() - 1); len > longest; --len) {
      if (held_.compare(held_.size() - len, len, s, 0, len) == 0) {
        longest = len;
        break;
      }
    }
  }
  return longest;
}

std::string StopStringMatcher::Flush() {
  std::string out;
  out.swap(held_);
  return out;
}

}  // namespace expertd::server
