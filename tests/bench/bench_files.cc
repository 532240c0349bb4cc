#include "tests/bench/bench_files.h"

#include <fstream>
#include <sstream>

#include "absl/strings/numbers.h"
#include "gtest/gtest.h"

namespace expertd::testing {
namespace {

std::vector<std::vector<std::string>> ParseCsv(const std::string& text) {
  std::vector<std::vector<std::string>> rows;
  std::vector<std::string> row;
  std::string cell;
  bool quoted = false, any = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    any = true;
    if (quoted) {
      if (c == '"' && i + 1 < text.size() && text[i + 1] == '"') {
        cell.push_back('"');
        ++i;
      } else if (c == '"') {
        quoted = false;
      } else {
        cell.push_back(c);
      }
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      row.push_back(std::move(cell));
      cell.clear();
    } else if (c == '\n') {
      row.push_back(std::move(cell));
      cell.clear();
      rows.push_back(std::move(row));
      row.clear();
      any = false;
    } else {
      cell.push_back(c);
    }
  }
  if (any) {
    row.push_back(std::move(cell));
    rows.push_back(std::move(row));
  }
  return rows;
}

void ExpectOrdered(const nlohmann::json& j, const std::string& metric) {
  auto at = [&](const std::string& stat) {
    return j.at(stat + "_" + metric + "_ms").get<double>();
  };
  const double min = at("min"), max = at("max");
  double previous = min;
  for (const char* p : {"p50", "p90", "p95", "p99"}) {
    EXPECT_LE(previous, at(p)) << metric << " " << p;
    previous = at(p);
  }
  EXPECT_LE(previous, max) << metric;
  EXPECT_DOUBLE_EQ(at("median"), at("p50")) << metric;
  EXPECT_LE(min, at("mean")) << metric;
  EXPECT_LE(at("mean"), max) << metric;
  EXPECT_GE(at("std"), 0) << metric;
}

}  // namespace

std::string ReadText(const std::string& path) {
  std::ifstream in(path);
  std::stringstream buf;
  buf << in.rdbuf();
  return buf.str();
}

std::vector<CsvRow> ReadCsv(const std::string& path) {
  std::vector<std::vector<std::string>> raw = ParseCsv(ReadText(path));
  std::vector<CsvRow> rows;
  if (raw.empty()) return rows;
  for (size_t r = 1; r < raw.size(); ++r) {
    EXPECT_EQ(raw[r].size(), raw[0].size()) << "row " << r << " of " << path;
    CsvRow row;
    for (size_t c = 0; c < raw[0].size() && c < raw[r].size(); ++c) row[raw[0][c]] = raw[r][c];
    rows.push_back(std::move(row));
  }
  return rows;
}

nlohmann::json ReadJson(const std::string& path) {
  return nlohmann::json::parse(ReadText(path), nullptr, /*allow_exceptions=*/false);
}

double Num(const CsvRow& row, const std::string& column) {
  auto it = row.find(column);
  double v;
  if (it == row.end() || it->second.empty() || !absl::SimpleAtod(it->second, &v)) return -1;
  return v;
}

void ExpectConsistent(const nlohmann::json& j, const std::vector<CsvRow>& rows) {
  ASSERT_TRUE(j.is_object());
  const int64_t issued = j.at("issued"), completed = j.at("completed"), failed = j.at("failed");
  EXPECT_EQ(completed + failed, issued);
  EXPECT_EQ(j.at("num_prompts").get<int64_t>(), issued);
  int64_t outcome_sum = 0, error_sum = 0;
  for (const auto& [name, n] : j.at("outcomes").items()) outcome_sum += n.get<int64_t>();
  for (const auto& [name, n] : j.at("error_counts").items()) error_sum += n.get<int64_t>();
  EXPECT_EQ(outcome_sum, issued);
  EXPECT_EQ(error_sum, failed);

  int64_t measured = 0, warmup = 0, ok = 0, out_tokens = 0, in_tokens = 0, itl_samples = 0;
  for (const CsvRow& row : rows) {
    if (row.at("phase") == "warmup") {
      ++warmup;
      continue;
    }
    ++measured;
    const double ttft = Num(row, "ttft_ms"), e2e = Num(row, "e2e_ms");
    EXPECT_GE(e2e, 0) << "request " << row.at("index");
    if (ttft >= 0) EXPECT_LE(ttft, e2e) << "request " << row.at("index");
    if (row.at("outcome") != "ok") continue;
    ++ok;
    out_tokens += static_cast<int64_t>(Num(row, "output_tokens"));
    in_tokens += static_cast<int64_t>(Num(row, "input_tokens"));
    itl_samples += static_cast<int64_t>(Num(row, "messages")) - 1;
    EXPECT_EQ(Num(row, "output_tokens"), Num(row, "server_output_tokens"))
        << "request " << row.at("index");
  }
  EXPECT_EQ(measured, issued);
  EXPECT_EQ(warmup, j.at("warmup_requests").get<int64_t>());
  EXPECT_EQ(ok, completed);
  EXPECT_EQ(out_tokens, j.at("total_output_tokens").get<int64_t>());
  EXPECT_EQ(in_tokens, j.at("total_input_tokens").get<int64_t>());
  EXPECT_EQ(j.at("num_ttft_samples").get<int64_t>(), completed);
  EXPECT_EQ(j.at("num_e2el_samples").get<int64_t>(), completed);
  EXPECT_EQ(j.at("num_itl_samples").get<int64_t>(), itl_samples);
  EXPECT_EQ(j.at("usage_mismatches").get<int64_t>(), 0);
  if (completed > 0) {
    const double duration = j.at("duration");
    EXPECT_GT(duration, 0);
    EXPECT_NEAR(j.at("request_throughput").get<double>(), completed / duration,
                1e-9 * completed / duration);
    EXPECT_NEAR(j.at("output_throughput").get<double>(), out_tokens / duration,
                1e-9 * (1 + out_tokens / duration));
    for (const char* metric : {"ttft", "tpot", "itl", "e2el"}) ExpectOrdered(j, metric);
    EXPECT_LE(j.at("max_concurrent_requests").get<int64_t>(), issued);
  }
}

}  // namespace expertd::testing
