// A small Prometheus client: counters, gauges and fixed-bucket histograms with
// labels, rendered in the text exposition format 0.0.4
// (https://prometheus.io/docs/instrumenting/exposition_formats/).
//
//   Registry registry({{"model_name", "mixtral"}});      // constant labels
//   Family<Counter>* requests = registry.AddCounter(
//       "expertd:requests_total", "Requests by outcome.", {"code"});
//   requests->WithLabels({"OK"})->Increment();
//   std::string text = registry.Render();
//
// Names: metric names match [a-zA-Z_:][a-zA-Z0-9_:]*, label names
// [a-zA-Z_][a-zA-Z0-9_]* (not starting with "__", not "le" for histograms).
// A bad name, a duplicate metric name or a wrong number of label values is a
// programmer error and aborts with a message (they are fixed at compile time).
//
// Thread safety: everything is safe to call from any thread. Updating a child
// (Increment/Set/Observe) is lock-free; WithLabels takes a per-family mutex,
// so hot paths should keep the returned pointer (it stays valid as long as the
// registry lives). Render() sees each child's values at some moment during
// the call; a histogram's buckets, _count and +Inf always agree.
#ifndef EXPERTD_SERVER_METRICS_REGISTRY_H_
#define EXPERTD_SERVER_METRICS_REGISTRY_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"

namespace expertd::server::metrics {

struct Label {
  std::string name;
  std::string value;
};

// Monotonic total. Increment(delta) with delta < 0 (or NaN) is ignored.
class Counter {
 public:
  void Increment(double delta = 1.0);
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0.0};
};

// A value that goes up and down.
class Gauge {
 public:
  void Set(double value) { value_.store(value, std::memory_order_relaxed); }
  void Add(double delta);
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0.0};
};

// Counts observations into fixed buckets (upper bounds, inclusive, strictly
// increasing; +Inf is implicit) and keeps their sum.
class Histogram {
 public:
  explicit Histogram(std::vector<double> upper_bounds);

  // Records `value` `count` times (count > 1 is for a batch of equal values,
  // e.g. several tokens produced by one step). NaN is ignored.
  void Observe(double value, uint64_t count = 1);

  struct Snapshot {
    std::vector<uint64_t> cumulative;  // per upper bound, then +Inf (= count)
    double sum = 0;
    uint64_t count = 0;
  };
  Snapshot snapshot() const;
  const std::vector<double>& upper_bounds() const { return bounds_; }

 private:
  const std::vector<double> bounds_;
  std::unique_ptr<std::atomic<uint64_t>[]> counts_;  // bounds_.size() + 1, non-cumulative
  std::atomic<double> sum_{0.0};
};

enum class MetricType { kCounter, kGauge, kHistogram };

class FamilyBase {
 public:
  FamilyBase(std::string name, std::string help, MetricType type,
             std::vector<std::string> label_names);
  virtual ~FamilyBase() = default;

  const std::string& name() const { return name_; }
  MetricType type() const { return type_; }
  const std::vector<std::string>& label_names() const { return label_names_; }

  // Appends the family (HELP, TYPE and every child) to *out. `const_labels`
  // come first in every sample's label set.
  virtual void Render(const std::vector<Label>& const_labels, std::string* out) const = 0;

 private:
  const std::string name_;
  const std::string help_;
  const MetricType type_;
  const std::vector<std::string> label_names_;

 protected:
  void RenderHeader(std::string* out) const;
};

// All children of one metric, one per distinct tuple of label values.
template <typename T>
class Family : public FamilyBase {
 public:
  Family(std::string name, std::string help, MetricType type, std::vector<std::string> label_names,
         std::vector<double> upper_bounds = {});

  // The child for `values` (one per label name, in order), created on first
  // use. A label-less family has one child, WithLabels({}) (also Get()).
  T* WithLabels(const std::vector<std::string>& values);
  T* Get() { return WithLabels({}); }

  void Render(const std::vector<Label>& const_labels, std::string* out) const override;

 private:
  const std::vector<double> upper_bounds_;  // histograms only
  mutable absl::Mutex mu_;
  std::map<std::vector<std::string>, std::unique_ptr<T>> children_ ABSL_GUARDED_BY(mu_);
};

class Registry {
 public:
  explicit Registry(std::vector<Label> const_labels = {});
  Registry(const Registry&) = delete;
  Registry& operator=(const Registry&) = delete;

  // Families render in the order they were added. A family without labels
  // gets its single child at once, so it shows 0 before the first update.
  Family<Counter>* AddCounter(const std::string& name, const std::string& help,
                              std::vector<std::string> label_names = {});
  Family<Gauge>* AddGauge(const std::string& name, const std::string& help,
                          std::vector<std::string> label_names = {});
  Family<Histogram>* AddHistogram(const std::string& name, const std::string& help,
                                  std::vector<double> upper_bounds,
                                  std::vector<std::string> label_names = {});

  // Runs before every Render(), e.g. to copy engine statistics into gauges.
  // Hooks run one Render at a time, in the order added, with the registry
  // locked: a hook may update metrics but must not add families or hooks.
  void AddCollectHook(std::function<void()> hook);

  // The whole registry in text format 0.0.4 (Content-Type
  // kTextContentType). Runs the collect hooks first.
  std::string Render() const;

 private:
  void AddFamily(std::unique_ptr<FamilyBase> family);

  const std::vector<Label> const_labels_;
  mutable absl::Mutex mu_;  // serialises Render() (and its hooks) with additions
  std::vector<std::unique_ptr<FamilyBase>> families_ ABSL_GUARDED_BY(mu_);
  std::vector<std::function<void()>> hooks_ ABSL_GUARDED_BY(mu_);
};

inline constexpr char kTextContentType[] = "text/plain; version=0.0.4; charset=utf-8";

// Text-format helpers (exposed for tests).
// A sample value or bucket bound: integers without a decimal point ("3"),
// others in the shortest form that reads back exactly ("0.1"), "+Inf",
// "-Inf", "NaN".
std::string FormatValue(double value);
// Label value escaping: backslash, double quote and newline.
std::string EscapeLabelValue(const std::string& value);
// HELP text escaping: backslash and newline.
std::string EscapeHelp(const std::string& help);
bool IsValidMetricName(const std::string& name);
bool IsValidLabelName(const std::string& name);

// 1, 2, 5, 10, 20, 50, ... up to and including the largest such value <= max.
std::vector<double> OneTwoFiveBuckets(double max);

}  // namespace expertd::server::metrics

#endif  // EXPERTD_SERVER_METRICS_REGISTRY_H_
