// Routing traces: which experts every token chose, per step and MoE layer,
// recorded by the engine (through the expert provider's routing
// notification) for the cache simulator and for analysis.
//
// File format (JSON lines, UTF-8; documented in docs/offload.md):
//   line 1, the header:
//     {"format":"expertd.routing_trace","version":1,"num_layers":L,
//      "num_experts":E,"top_k":K,"expert_bytes":B,"model":"..."}
//   then one line per (step, MoE layer), in execution order:
//     {"step":S,"layer":l,"experts":[[e,e,...],[e,...],...]}
//   "experts" has one array per token of the step's batch (K ids each, in the
//   router's rank order). Steps are non-decreasing; dense layers have no line.
//   expert_bytes (0 = unknown) is one expert's size, so a byte budget can be
//   turned into a number of experts.
#ifndef EXPERTD_ENGINE_EXPERTS_TRACE_ROUTING_TRACE_H_
#define EXPERTD_ENGINE_EXPERTS_TRACE_ROUTING_TRACE_H_

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "engine/experts/expert_key.h"

namespace expertd::engine {

struct RoutingTraceHeader {
  int32_t num_layers = 0;
  int32_t num_experts = 0;
  int32_t top_k = 0;
  uint64_t expert_bytes = 0;
  std::string model;
};

// One MoE layer of one step: ids is [num_tokens, top_k] row-major.
struct RoutingRecord {
  int64_t step = 0;
  int32_t layer = 0;
  std::vector<int32_t> ids;

  int64_t num_tokens(int32_t top_k) const {
    return top_k > 0 ? static_cast<int64_t>(ids.size()) / top_k : 0;
  }
};

struct RoutingTrace {
  RoutingTraceHeader header;
  std::vector<RoutingRecord> records;
};

// Checks a record against the header (layer and ids in range, whole tokens)
// and against the previous step (non-decreasing). InvalidArgument otherwise.
absl::Status ValidateRoutingRecord(const RoutingTraceHeader& header, const RoutingRecord& record,
                                   int64_t previous_step);

// Parses a whole trace; errors name the line number.
absl::StatusOr<RoutingTrace> ParseRoutingTrace(absl::string_view text);
absl::StatusOr<RoutingTrace> ReadRoutingTrace(const std::string& path);
// Serialises (the inverse of ParseRoutingTrace).
std::string FormatRoutingTraceHeader(const RoutingTraceHeader& header);
std::string FormatRoutingRecord(const RoutingRecord& record, int32_t top_k);

// Appends records to a trace file as they happen. Thread-safe.
class RoutingTraceWriter {
 public:
  // Creates (truncates) `path` and writes the header.
  static absl::StatusOr<std::unique_ptr<RoutingTraceWriter>> Create(
      const std::string& path, const RoutingTraceHeader& header);
  ~RoutingTraceWriter();  // flushes and closes

  // Validates and appends one line.
  absl::Status Append(const RoutingRecord& record);
  absl::Status Flush();
  const RoutingTraceHeader& header() const { return header_; }

 private:
  RoutingTraceWriter(std::FILE* file, RoutingTraceHeader header, std::string path);

  const RoutingTraceHeader header_;
  const std::string path_;
  absl::Mutex mu_;
  std::FILE* file_ ABSL_GUARDED_BY(mu_);
  int64_t last_step_ ABSL_GUARDED_BY(mu_) = -1;
};

// The demand access sequence a trace implies for an expert cache: for each
// record in order, the distinct experts it used, ascending by expert id (the
// order the store acquires them in). This is what the simulator replays.
std::vector<ExpertKey> TraceAccesses(const RoutingTrace& trace);

// Distinct expert ids of one record, ascending.
std::vector<int32_t> DistinctExperts(const RoutingRecord& record);

}  // namespace expertd::engine

#endif  // EXPERTD_ENGINE_EXPERTS_TRACE_ROUTING_TRACE_H_
