#include "engine/train/trace_recorder.h"

#include <fstream>

#include "nlohmann/json.hpp"

namespace expertd::train {

namespace {

const char* LaneName(TraceRecorder::Lane lane) {
  switch (lane) {
    case TraceRecorder::kCompute:
      return "expert compute";
    case TraceRecorder::kUpload:
      return "expert upload (host -> device)";
    case TraceRecorder::kDispatch:
      return "dispatch (gather)";
    case TraceRecorder::kCombine:
      return "combine (scatter)";
    case TraceRecorder::kOptimizer:
      return "optimizer";
    case TraceRecorder::kStep:
      return "training step";
  }
  return "?";
}

}  // namespace

TraceRecorder::TraceRecorder() : origin_(std::chrono::steady_clock::now()) {}

int64_t TraceRecorder::NowMicros() const {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() -
                                                               origin_)
      .count();
}

void TraceRecorder::Record(const std::string& name, Lane lane, int64_t start_us, int64_t end_us) {
  std::lock_guard<std::mutex> lock(mu_);
  events_.push_back({name, lane, start_us, end_us - start_us});
}

TraceRecorder::Span::Span(TraceRecorder* r, std::string name, Lane lane)
    : r_(r), name_(std::move(name)), lane_(lane), start_(r != nullptr ? r->NowMicros() : 0) {}

TraceRecorder::Span::~Span() {
  if (r_ != nullptr) r_->Record(name_, lane_, start_, r_->NowMicros());
}

size_t TraceRecorder::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return events_.size();
}

absl::Status TraceRecorder::WriteJson(const std::string& path) const {
  nlohmann::json events = nlohmann::json::array();
  for (Lane lane : {kCompute, kUpload, kDispatch, kCombine, kOptimizer, kStep}) {
    events.push_back({{"name", "thread_name"},
                      {"ph", "M"},
                      {"pid", 1},
                      {"tid", static_cast<int>(lane)},
                      {"args", {{"name", LaneName(lane)}}}});
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const Event& e : events_) {
      events.push_back({{"name", e.name},
                        {"ph", "X"},
                        {"pid", 1},
                        {"tid", static_cast<int>(e.lane)},
                        {"ts", e.start_us},
                        {"dur", e.dur_us}});
    }
  }
  std::ofstream out(path);
  out << nlohmann::json{{"traceEvents", events}, {"displayTimeUnit", "ms"}}.dump() << "\n";
  if (!out) return absl::InternalError("--trace_out: cannot write " + path);
  return absl::OkStatus();
}

}  // namespace expertd::train
