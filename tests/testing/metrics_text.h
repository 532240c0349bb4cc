// Reading the Prometheus text exposition (/metrics) in tests.
#ifndef EXPERTD_TESTS_TESTING_METRICS_TEXT_H_
#define EXPERTD_TESTS_TESTING_METRICS_TEXT_H_

#include <string>

namespace expertd::testing {

// The sum of a family's samples whose labels contain `labels` (e.g.
// `path="disk_to_host",format="bf16"`; "" matches every sample); -1 when no
// sample matches. A sample whose value does not parse fails the test.
double SumMetric(const std::string& body, const std::string& family, const std::string& labels);

}  // namespace expertd::testing

#endif  // EXPERTD_TESTS_TESTING_METRICS_TEXT_H_
