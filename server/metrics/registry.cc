#include "server/metrics/registry.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <type_traits>

#include "absl/strings/str_cat.h"

namespace expertd::server::metrics {
namespace {

// Registration mistakes are programmer errors: fail loudly at startup.
void Check(bool ok, const std::string& what) {
  if (ok) return;
  std::fprintf(stderr, "metrics: %s\n", what.c_str());
  std::abort();
}

void AtomicAdd(std::atomic<double>* target, double delta) {
  double current = target->load(std::memory_order_relaxed);
  while (!target->compare_exchange_weak(current, current + delta, std::memory_order_relaxed)) {
  }
}

// `{a="x",b="y"}` for const labels + the family's labels (+ an extra one,
// e.g. le); empty when there are no labels at all.
std::string LabelSet(const std::vector<Label>& const_labels, const std::vector<std::string>& names,
                     const std::vector<std::string>& values, const Label* extra = nullptr) {
  std::string out;
  auto add = [&out](const std::string& name, const std::string& value) {
    absl::StrAppend(&out, out.empty() ? "{" : ",", name, "=\"", EscapeLabelValue(value), "\"");
  };
  for (const Label& l : const_labels) add(l.name, l.value);
  for (size_t i = 0; i < names.size(); ++i) add(names[i], values[i]);
  if (extra != nullptr) add(extra->name, extra->value);
  if (!out.empty()) out += "}";
  return out;
}

void RenderChild(const std::string& name, const std::string& labels, const Counter& c,
                 std::string* out) {
  absl::StrAppend(out, name, labels, " ", FormatValue(c.value()), "\n");
}

void RenderChild(const std::string& name, const std::string& labels, const Gauge& g,
                 std::string* out) {
  absl::StrAppend(out, name, labels, " ", FormatValue(g.value()), "\n");
}

const char* TypeName(MetricType type) {
  switch (type) {
    case MetricType::kCounter:
      return "counter";
    case MetricType::kGauge:
      return "gauge";
    case MetricType::kHistogram:
      return "histogram";
  }
  return "untyped";
}

}  // namespace

// ---------------------------------------------------------------- values

void Counter::Increment(double delta) {
  if (!(delta >= 0)) return;  // negative or NaN
  AtomicAdd(&value_, delta);
}

void Gauge::Add(double delta) { AtomicAdd(&value_, delta); }

Histogram::Histogram(std::vector<double> upper_bounds)
    : bounds_(std::move(upper_bounds)), counts_(new std::atomic<uint64_t>[bounds_.size() + 1]) {
  for (size_t i = 0; i < bounds_.size(); ++i) {
    Check(std::isfinite(bounds_[i]), "histogram bounds must be finite (+Inf is implicit)");
    Check(i == 0 || bounds_[i - 1] < bounds_[i], "histogram bounds must increase strictly");
  }
  for (size_t i = 0; i <= bounds_.size(); ++i) counts_[i].store(0, std::memory_order_relaxed);
}

void Histogram::Observe(double value, uint64_t count) {
  if (std::isnan(value) || count == 0) return;
  size_t i = 0;
  while (i < bounds_.size() && value > bounds_[i]) ++i;  // few buckets: linear is fastest
  counts_[i].fetch_add(count, std::memory_order_relaxed);
  AtomicAdd(&sum_, value * static_cast<double>(count));
}

Histogram::Snapshot Histogram::snapshot() const {
  Snapshot s;
  s.cumulative.resize(bounds_.size() + 1);
  uint64_t running = 0;
  for (size_t i = 0; i <= bounds_.size(); ++i) {
    running += counts_[i].load(std::memory_order_relaxed);
    s.cumulative[i] = running;
  }
  s.count = running;
  s.sum = sum_.load(std::memory_order_relaxed);
  return s;
}

// ---------------------------------------------------------------- families

FamilyBase::FamilyBase(std::string name, std::string help, MetricType type,
                       std::vector<std::string> label_names)
    : name_(std::move(name)),
      help_(std::move(help)),
      type_(type),
      label_names_(std::move(label_names)) {
  Check(IsValidMetricName(name_), "invalid metric name '" + name_ + "'");
  std::set<std::string> seen;
  for (const std::string& l : label_names_) {
    Check(IsValidLabelName(l), "metric '" + name_ + "': invalid label name '" + l + "'");
    Check(!(type_ == MetricType::kHistogram && l == "le"),
          "metric '" + name_ + "': 'le' is reserved");
    Check(seen.insert(l).second, "metric '" + name_ + "': duplicate label '" + l + "'");
  }
}

void FamilyBase::RenderHeader(std::string* out) const {
  absl::StrAppend(out, "# HELP ", name_, " ", EscapeHelp(help_), "\n", "# TYPE ", name_, " ",
                  TypeName(type_), "\n");
}

template <typename T>
Family<T>::Family(std::string name, std::string help, MetricType type,
                  std::vector<std::string> label_names, std::vector<double> upper_bounds)
    : FamilyBase(std::move(name), std::move(help), type, std::move(label_names)),
      upper_bounds_(std::move(upper_bounds)) {}

template <typename T>
T* Family<T>::WithLabels(const std::vector<std::string>& values) {
  Check(values.size() == label_names().size(),
        absl::StrCat("metric '", name(), "': ", values.size(), " label values for ",
                     label_names().size(), " labels"));
  absl::MutexLock lock(&mu_);
  std::unique_ptr<T>& child = children_[values];
  if (child == nullptr) {
    if constexpr (std::is_same_v<T, Histogram>) {
      child = std::make_unique<Histogram>(upper_bounds_);
    } else {
      child = std::make_unique<T>();
    }
  }
  return child.get();
}

template <typename T>
void Family<T>::Render(const std::vector<Label>& const_labels, std::string* out) const {
  RenderHeader(out);
  absl::MutexLock lock(&mu_);
  for (const auto& [values, child] : children_) {
    if constexpr (std::is_same_v<T, Histogram>) {
      Histogram::Snapshot s = child->snapshot();
      const std::vector<double>& bounds = child->upper_bounds();
      for (size_t i = 0; i <= bounds.size(); ++i) {
        Label le{"le", i < bounds.size() ? FormatValue(bounds[i]) : "+Inf"};
        absl::StrAppend(out, name(), "_bucket", LabelSet(const_labels, label_names(), values, &le),
                        " ", s.cumulative[i], "\n");
      }
      const std::string labels = LabelSet(const_labels, label_names(), values);
      absl::StrAppend(out, name(), "_sum", labels, " ", FormatValue(s.sum), "\n");
      absl::StrAppend(out, name(), "_count", labels, " ", s.count, "\n");
    } else {
      RenderChild(name(), LabelSet(const_labels, label_names(), values), *child, out);
    }
  }
}

template class Family<Counter>;
template class Family<Gauge>;
template class Family<Histogram>;

// ---------------------------------------------------------------- registry

Registry::Registry(std::vector<Label> const_labels) : const_labels_(std::move(const_labels)) {
  for (const Label& l : const_labels_)
    Check(IsValidLabelName(l.name), "invalid constant label '" + l.name + "'");
}

void Registry::AddFamily(std::unique_ptr<FamilyBase> family) {
  absl::MutexLock lock(&mu_);
  for (const auto& f : families_)
    Check(f->name() != family->name(), "duplicate metric '" + family->name() + "'");
  for (const std::string& l : family->label_names()) {
    for (const Label& c : const_labels_) {
      Check(c.name != l,
            "metric '" + family->name() + "': label '" + l + "' is also a constant label");
    }
  }
  families_.push_back(std::move(family));
}

Family<Counter>* Registry::AddCounter(const std::string& name, const std::string& help,
                                      std::vector<std::string> label_names) {
  auto family =
      std::make_unique<Family<Counter>>(name, help, MetricType::kCounter, std::move(label_names));
  Family<Counter>* f = family.get();
  AddFamily(std::move(family));
  if (f->label_names().empty()) f->Get();
  return f;
}

Family<Gauge>* Registry::AddGauge(const std::string& name, const std::string& help,
                                  std::vector<std::string> label_names) {
  auto family =
      std::make_unique<Family<Gauge>>(name, help, MetricType::kGauge, std::move(label_names));
  Family<Gauge>* f = family.get();
  AddFamily(std::move(family));
  if (f->label_names().empty()) f->Get();
  return f;
}

Family<Histogram>* Registry::AddHistogram(const std::string& name, const std::string& help,
                                          std::vector<double> upper_bounds,
                                          std::vector<std::string> label_names) {
  Histogram validate(upper_bounds);  // checks the bounds now, at registration
  auto family = std::make_unique<Family<Histogram>>(
      name, help, MetricType::kHistogram, std::move(label_names), std::move(upper_bounds));
  Family<Histogram>* f = family.get();
  AddFamily(std::move(family));
  if (f->label_names().empty()) f->Get();
  return f;
}

void Registry::AddCollectHook(std::function<void()> hook) {
  absl::MutexLock lock(&mu_);
  hooks_.push_back(std::move(hook));
}

std::string Registry::Render() const {
  absl::MutexLock lock(&mu_);
  for (const auto& hook : hooks_) hook();
  std::string out;
  for (const auto& f : families_) f->Render(const_labels_, &out);
  return out;
}

// ---------------------------------------------------------------- text format

std::string FormatValue(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (v == 0) return "0";
  char buf[32];
  if (v == std::trunc(v) && std::fabs(v) < 1e15) {
    std::snprintf(buf, sizeof(buf), "%.0f", v);
    return buf;
  }
  for (int precision = 1; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof(buf), "%.*g", precision, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  return buf;
}

std::string EscapeLabelValue(const std::string& value) {
  std::string out;
  out.reserve(value.size());
  for (char c : value) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string EscapeHelp(const std::string& help) {
  std::string out;
  out.reserve(help.size());
  for (char c : help) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

namespace {
bool NameChars(const std::string& name, bool allow_colon) {
  if (name.empty()) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const bool letter =
        (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || (allow_colon && c == ':');
    const bool digit = c >= '0' && c <= '9';
    if (!(letter || (i > 0 && digit))) return false;
  }
  return true;
}
}  // namespace

bool IsValidMetricName(const std::string& name) { return NameChars(name, /*allow_colon=*/true); }

bool IsValidLabelName(const std::string& name) {
  return NameChars(name, /*allow_colon=*/false) && name.rfind("__", 0) != 0;
}

std::vector<double> OneTwoFiveBuckets(double max) {
  std::vector<double> out;
  for (double base = 1; base <= max; base *= 10) {
    for (double m : {1.0, 2.0, 5.0}) {
      if (base * m <= max) out.push_back(base * m);
    }
  }
  return out;
}

}  // namespace expertd::server::metrics
