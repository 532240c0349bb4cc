#include "engine/experts/trace/routing_trace.h"

#include <algorithm>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/status_macros.h"
#include "nlohmann/json.hpp"

namespace expertd::engine {
namespace {

constexpr char kFormat[] = "expertd.routing_trace";
constexpr int kVersion = 1;

absl::Status LineError(int64_t line, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("routing trace line ", line, ": ", what));
}

// Reads a non-negative integer field that fits in int32 (or uint64 when
// `wide`). Returns false if missing or of the wrong type.
bool GetInt(const nlohmann::json& j, const char* key, int64_t* out) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_number_integer()) return false;
  *out = it->get<int64_t>();
  return *out >= 0;
}

absl::StatusOr<RoutingTraceHeader> ParseHeader(const nlohmann::json& j) {
  if (!j.is_object() || j.value("format", "") != kFormat) {
    return LineError(
        1, absl::StrCat("not a routing trace header (want \"format\":\"", kFormat, "\")"));
  }
  int64_t version = 0, layers = 0, experts = 0, k = 0, bytes = 0;
  if (!GetInt(j, "version", &version) || version != kVersion) {
    return LineError(1, absl::StrCat("unsupported version (want ", kVersion, ")"));
  }
  if (!GetInt(j, "num_layers", &layers) || !GetInt(j, "num_experts", &experts) ||
      !GetInt(j, "top_k", &k) || layers <= 0 || experts <= 0 || k <= 0 || k > experts ||
      layers > INT32_MAX || experts > INT32_MAX) {
    return LineError(
        1, "num_layers, num_experts, top_k must be positive integers with top_k <= num_experts");
  }
  if (j.contains("expert_bytes") && !GetInt(j, "expert_bytes", &bytes)) {
    return LineError(1, "expert_bytes must be a non-negative integer");
  }
  RoutingTraceHeader h;
  h.num_layers = static_cast<int32_t>(layers);
  h.num_experts = static_cast<int32_t>(experts);
  h.top_k = static_cast<int32_t>(k);
  h.expert_bytes = static_cast<uint64_t>(bytes);
  auto model = j.find("model");
  if (model != j.end() && model->is_string()) h.model = model->get<std::string>();
  return h;
}

absl::StatusOr<RoutingRecord> ParseRecord(const nlohmann::json& j, int32_t top_k) {
  RoutingRecord r;
  int64_t step = 0, layer = 0;
  if (!j.is_object() || !GetInt(j, "step", &step) || !GetInt(j, "layer", &layer) ||
      layer > INT32_MAX) {
    return absl::InvalidArgumentError("want {\"step\":S,\"layer\":L,\"experts\":[[...],...]}");
  }
  r.step = step;
  r.layer = static_cast<int32_t>(layer);
  auto experts = j.find("experts");
  if (experts == j.end() || !experts->is_array())
    return absl::InvalidArgumentError("missing \"experts\" array");
  for (const auto& token : *experts) {
    if (!token.is_array() || token.size() != static_cast<size_t>(top_k)) {
      return absl::InvalidArgumentError(absl::StrCat("each token needs ", top_k, " expert ids"));
    }
    for (const auto& id : token) {
      if (!id.is_number_integer()) return absl::InvalidArgumentError("expert ids must be integers");
      const int64_t v = id.get<int64_t>();
      if (v < 0 || v > INT32_MAX)
        return absl::InvalidArgumentError(absl::StrCat("expert id ", v, " out of range"));
      r.ids.push_back(static_cast<int32_t>(v));
    }
  }
  return r;
}

}  // namespace

absl::Status ValidateRoutingRecord(const RoutingTraceHeader& header, const RoutingRecord& record,
                                   int64_t previous_step) {
  if (record.layer < 0 || record.layer >= header.num_layers) {
    return absl::InvalidArgumentError(
        absl::StrCat("layer ", record.layer, " not in [0, ", header.num_layers, ")"));
  }
  if (record.step < previous_step) {
    return absl::InvalidArgumentError(
        absl::StrCat("step ", record.step, " after step ", previous_step));
  }
  if (header.top_k <= 0 || record.ids.size() % header.top_k != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(record.ids.size(), " ids is not a multiple of top_k ", header.top_k));
  }
  for (int32_t id : record.ids) {
    if (id < 0 || id >= header.num_experts) {
      return absl::InvalidArgumentError(
          absl::StrCat("expert id ", id, " not in [0, ", header.num_experts, ")"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<RoutingTrace> ParseRoutingTrace(absl::string_view text) {
  RoutingTrace trace;
  int64_t line_no = 0;
  int64_t previous_step = 0;
  bool have_header = false;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_no;
    if (line.empty()) continue;
    nlohmann::json j =
        nlohmann::json::parse(line.begin(), line.end(), nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) return LineError(line_no, "not valid JSON");
    if (!have_header) {
      if (line_no != 1) return LineError(line_no, "the header must be the first line");
      ASSIGN_OR_RETURN(trace.header, ParseHeader(j));
      have_header = true;
      continue;
    }
    auto record = ParseRecord(j, trace.header.top_k);
    if (!record.ok()) return LineError(line_no, record.status().message());
    absl::Status valid = ValidateRoutingRecord(trace.header, *record, previous_step);
    if (!valid.ok()) return LineError(line_no, valid.message());
    previous_step = record->step;
    trace.records.push_back(std::move(*record));
  }
  if (!have_header) return LineError(1, "empty trace (no header)");
  return trace;
}

absl::StatusOr<RoutingTrace> ReadRoutingTrace(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open routing trace ", path));
  std::stringstream s;
  s << in.rdbuf();
  auto trace = ParseRoutingTrace(s.str());
  if (!trace.ok())
    return absl::Status(trace.status().code(), absl::StrCat(path, ": ", trace.status().message()));
  return trace;
}

std::string FormatRoutingTraceHeader(const RoutingTraceHeader& h) {
  nlohmann::json j = {{"format", kFormat},
                      {"version", kVersion},
                      {"num_layers", h.num_layers},
                      {"num_experts", h.num_experts},
                      {"top_k", h.top_k},
                      {"expert_bytes", h.expert_bytes},
                      {"model", h.model}};
  return j.dump();
}

std::string FormatRoutingRecord(const RoutingRecord& r, int32_t top_k) {
  std::string out = absl::StrCat("{\"step\":", r.step, ",\"layer\":", r.layer, ",\"experts\":[");
  for (size_t i = 0; i < r.ids.size(); ++i) {
    if (i % top_k == 0)
      absl::StrAppend(&out, i == 0 ? "[" : "],[");
    else
      absl::StrAppend(&out, ",");
    absl::StrAppend(&out, r.ids[i]);
  }
  absl::StrAppend(&out, r.ids.empty() ? "]}" : "]]}");
  return out;
}

RoutingTraceWriter::RoutingTraceWriter(std::FILE* file, RoutingTraceHeader header, std::string path)
    : header_(std::move(header)), path_(std::move(path)), file_(file) {}

RoutingTraceWriter::~RoutingTraceWriter() {
  absl::MutexLock lock(&mu_);
  if (file_ != nullptr) std::fclose(file_);
}

absl::StatusOr<std::unique_ptr<RoutingTraceWriter>> RoutingTraceWriter::Create(
    const std::string& path, const RoutingTraceHeader& header) {
  if (header.num_layers <= 0 || header.num_experts <= 0 || header.top_k <= 0 ||
      header.top_k > header.num_experts) {
    return absl::InvalidArgumentError(
        "routing trace header: num_layers, num_experts, top_k must be positive");
  }
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr)
    return absl::PermissionDeniedError(absl::StrCat("cannot create routing trace ", path));
  std::string line = FormatRoutingTraceHeader(header) + "\n";
  if (std::fwrite(line.data(), 1, line.size(), f) != line.size()) {
    std::fclose(f);
    return absl::DataLossError(absl::StrCat("cannot write routing trace ", path));
  }
  return std::unique_ptr<RoutingTraceWriter>(new RoutingTraceWriter(f, header, path));
}

absl::Status RoutingTraceWriter::Append(const RoutingRecord& record) {
  absl::MutexLock lock(&mu_);
  RETURN_IF_ERROR(ValidateRoutingRecord(header_, record, last_step_));
  std::string line = FormatRoutingRecord(record, header_.top_k) + "\n";
  if (std::fwrite(line.data(), 1, line.size(), file_) != line.size()) {
    return absl::DataLossError(absl::StrCat("cannot write routing trace ", path_));
  }
  last_step_ = record.step;
  return absl::OkStatus();
}

absl::Status RoutingTraceWriter::Flush() {
  absl::MutexLock lock(&mu_);
  if (std::fflush(file_) != 0)
    return absl::DataLossError(absl::StrCat("cannot flush routing trace ", path_));
  return absl::OkStatus();
}

std::vector<int32_t> DistinctExperts(const RoutingRecord& record) {
  std::vector<int32_t> ids = record.ids;
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  return ids;
}

std::vector<ExpertKey> TraceAccesses(const RoutingTrace& trace) {
  std::vector<ExpertKey> out;
  for (const RoutingRecord& r : trace.records) {
    for (int32_t e : DistinctExperts(r)) out.push_back(ExpertKey{r.layer, e});
  }
  return out;
}

}  // namespace expertd::engine
