// TraceRecorder: a timeline of a training schedule's work (expert uploads,
// expert compute, optimizer steps) written as Chrome trace JSON
// (chrome://tracing, Perfetto: "X" complete events, microseconds), so a person
// can see what overlapped what.
//
// Thread safety: Record and Span may be called from any thread.
#ifndef EXPERTD_ENGINE_TRAIN_TRACE_RECORDER_H_
#define EXPERTD_ENGINE_TRAIN_TRACE_RECORDER_H_

#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace expertd::train {

class TraceRecorder {
 public:
  // The timeline's lanes (Chrome "tid").
  // kStep: the trainer's phases of each optimizer step (forward and backward
  // of its micro-batches; what runs after backward), the frame the others
  // are read against.
  enum Lane { kCompute = 1, kUpload = 2, kDispatch = 3, kCombine = 4, kOptimizer = 5, kStep = 6 };

  TraceRecorder();

  // Microseconds since construction.
  int64_t NowMicros() const;
  void Record(const std::string& name, Lane lane, int64_t start_us, int64_t end_us);

  // Records [construction-relative now, destruction) as one event. A null
  // recorder records nothing.
  class Span {
   public:
    Span(TraceRecorder* r, std::string name, Lane lane);
    ~Span();

   private:
    TraceRecorder* r_;
    std::string name_;
    Lane lane_;
    int64_t start_ = 0;
  };

  absl::Status WriteJson(const std::string& path) const;
  size_t size() const;

 private:
  struct Event {
    std::string name;
    Lane lane;
    int64_t start_us, dur_us;
  };
  const std::chrono::steady_clock::time_point origin_;
  mutable std::mutex mu_;
  std::vector<Event> events_;
};

}  // namespace expertd::train

#endif  // EXPERTD_ENGINE_TRAIN_TRACE_RECORDER_H_
