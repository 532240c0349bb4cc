#include "client/bench/run_config.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace expertd::bench {

std::string PointName(const RunConfig& config) {
  if (!config.open_loop) return absl::StrCat("c", config.concurrency);
  if (std::isinf(config.request_rate)) return "rinf";
  return absl::StrFormat("r%g", config.request_rate);
}

}  // namespace expertd::bench
