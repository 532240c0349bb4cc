// StopStringMatcher: finds stop strings in generated text across token
// boundaries and decides how much text may be streamed now.
//
// Text that could still be the beginning of a stop string is held back; once
// a stop string appears, everything before it is released and the rest
// (the stop string and anything after it) is dropped. Deltas given to Append
// must be UTF-8 complete; what it returns then is too.
#ifndef EXPERTD_SERVER_STOP_MATCHER_H_
#define EXPERTD_SERVER_STOP_MATCHER_H_

#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace expertd::server {

class StopStringMatcher {
 public:
  explicit StopStringMatcher(std::vector<std::string> stop_strings);

  struct Result {
    std::string emit;  // text that may be sent to the client now
    bool stopped = false;
    std::string matched;  // the stop string that matched (when stopped)
  };

  // REQUIRES: !stopped() so far.
  Result Append(absl::string_view delta);
  // Releases everything held back (generation ended without a stop string).
  std::string Flush();
  bool stopped() const { return stopped_; }

 private:
  // Length of the longest suffix of held_ that is a proper prefix of a stop string.
  size_t PartialMatchLength() const;

  std::vector<std::string> stops_;
  size_t max_stop_len_ = 0;
  std::string held_;  // generated text not yet released
  bool stopped_ = false;
};

}  // namespace expertd::server

#endif  // EXPERTD_SERVER_STOP_MATCHER_H_
