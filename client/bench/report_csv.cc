#include "client/bench/report_csv.h"

#include <algorithm>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"

namespace expertd::bench {
namespace {

std::string Quote(const std::string& s) {
  if (s.find_first_of(",\"\n\r") == std::string::npos) return s;
  return absl::StrCat("\"", absl::StrReplaceAll(s, {{"\"", "\"\""}}), "\"");
}

std::string Ms(double seconds) { return absl::StrFormat("%.3f", seconds * 1e3); }
std::string MsOrEmpty(double seconds) { return seconds < 0 ? "" : Ms(seconds); }

std::string Row(const RequestRecord& r) {
  double itl_sum = 0, itl_max = -1;
  for (size_t i = 1; i < r.message_times_s.size(); ++i) {
    const double gap = r.message_times_s[i] - r.message_times_s[i - 1];
    itl_sum += gap;
    itl_max = std::max(itl_max, gap);
  }
  const size_t gaps = r.message_times_s.empty() ? 0 : r.message_times_s.size() - 1;
  std::vector<std::string> cells = {
      absl::StrCat(r.index),
      r.warmup ? "warmup" : "measure",
      r.outcome,
      r.finish_reason,
      MsOrEmpty(r.scheduled_s),
      Ms(r.start_s),
      r.has_first_token() ? Ms(r.ttft_s()) : "",
      Ms(r.e2e_s()),
      MsOrEmpty(r.tpot_s()),
      r.input_tokens >= 0 ? absl::StrCat(r.input_tokens) : "",
      absl::StrCat(r.output_tokens),
      r.server_output_tokens >= 0 ? absl::StrCat(r.server_output_tokens) : "",
      absl::StrCat(r.max_new_tokens),
      absl::StrCat(r.message_times_s.size()),
      gaps > 0 ? Ms(itl_sum / gaps) : "",
      MsOrEmpty(itl_max),
      MsOrEmpty(r.server_queue_s),
      MsOrEmpty(r.server_ttft_s),
      absl::StrFormat("%016x", r.prompt_hash),
      Quote(r.error_message),
  };
  return absl::StrJoin(cells, ",");
}

}  // namespace

std::string RequestsCsv(const RunResult& run) {
  std::string out =
      "index,phase,outcome,finish_reason,scheduled_ms,start_ms,ttft_ms,e2e_ms,tpot_ms,input_tokens,"
      "output_tokens,server_output_tokens,max_new_tokens,messages,itl_mean_ms,itl_max_ms,server_"
      "queue_ms,"
      "server_ttft_ms,prompt_hash,error\n";
  for (const RequestRecord& r : run.records) absl::StrAppend(&out, Row(r), "\n");
  return out;
}

absl::Status WriteRequestsCsv(const std::string& path, const RunResult& run) {
  std::ofstream out(path);
  out << RequestsCsv(run);
  out.close();
  if (!out) return absl::InternalError(absl::StrCat("cannot write '", path, "'"));
  return absl::OkStatus();
}

}  // namespace expertd::bench
