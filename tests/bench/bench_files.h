// Test helpers for expert-bench's output files: a CSV reader (RFC 4180
// quoting) and the consistency checks every run's JSON + CSV must pass.
#ifndef EXPERTD_TESTS_BENCH_BENCH_FILES_H_
#define EXPERTD_TESTS_BENCH_BENCH_FILES_H_

#include <map>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"

namespace expertd::testing {

using CsvRow = std::map<std::string, std::string>;

// Rows keyed by the header's column names.
std::vector<CsvRow> ReadCsv(const std::string& path);
nlohmann::json ReadJson(const std::string& path);
std::string ReadText(const std::string& path);
double Num(const CsvRow& row, const std::string& column);  // empty cell -> -1

// gtest expectations: counts add up (completed + failed == issued, outcomes
// and CSV rows agree), token totals match the CSV, every latency
// distribution is ordered (min <= p50 <= p90 <= p95 <= p99 <= max, median ==
// p50), TTFT <= E2E per request, sample counts match the CSV.
void ExpectConsistent(const nlohmann::json& result, const std::vector<CsvRow>& rows);

}  // namespace expertd::testing

#endif  // EXPERTD_TESTS_BENCH_BENCH_FILES_H_
