#include "tests/testing/metrics_text.h"

#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"

namespace expertd::testing {

double SumMetric(const std::string& body, const std::string& family, const std::string& labels) {
  double sum = -1;
  for (absl::string_view line : absl::StrSplit(body, '\n')) {
    if (!absl::StartsWith(line, family + "{") || !absl::StrContains(line, labels)) continue;
    double v = 0;
    EXPECT_TRUE(absl::SimpleAtod(line.substr(line.rfind(' ') + 1), &v)) << line;
    sum = std::max(sum, 0.0) + v;
  }
  return sum;
}

}  // namespace expertd::testing
