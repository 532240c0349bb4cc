#include "client/bench/prometheus_text.h"

#include <cmath>
#include <cstdlib>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace expertd::bench {
namespace {

bool ParseValue(absl::string_view text, double* value) {
  if (text == "+Inf")
    *value = INFINITY;
  else if (text == "-Inf")
    *value = -INFINITY;
  else if (text == "NaN")
    *value = NAN;
  else
    return absl::SimpleAtod(text, value);
  return true;
}

// Parses `{a="x",b="y"}` starting at line[*pos] == '{'; leaves *pos after '}'.
bool ParseLabels(absl::string_view line, size_t* pos, std::map<std::string, std::string>* labels) {
  size_t i = *pos + 1;
  while (i < line.size() && line[i] != '}') {
    const size_t eq = line.find('=', i);
    if (eq == absl::string_view::npos || eq + 1 >= line.size() || line[eq + 1] != '"') return false;
    std::string key(absl::StripAsciiWhitespace(line.substr(i, eq - i)));
    std::string value;
    size_t j = eq + 2;
    for (; j < line.size() && line[j] != '"'; ++j) {
      if (line[j] == '\\' && j + 1 < line.size()) {
        ++j;
        value.push_back(line[j] == 'n' ? '\n' : line[j]);
      } else {
        value.push_back(line[j]);
      }
    }
    if (j >= line.size()) return false;
    (*labels)[key] = value;
    i = j + 1;
    if (i < line.size() && line[i] == ',') ++i;
  }
  if (i >= line.size()) return false;
  *pos = i + 1;
  return true;
}

}  // namespace

absl::StatusOr<std::vector<PrometheusSample>> ParsePrometheusText(const std::string& text) {
  std::vector<PrometheusSample> samples;
  int line_number = 0;
  for (absl::string_view raw : absl::StrSplit(text, '\n')) {
    ++line_number;
    absl::string_view line = absl::StripAsciiWhitespace(raw);
    if (line.empty() || line[0] == '#') continue;
    PrometheusSample s;
    size_t pos = 0;
    while (pos < line.size() && line[pos] != '{' && line[pos] != ' ' && line[pos] != '\t') ++pos;
    s.name = std::string(line.substr(0, pos));
    bool ok = !s.name.empty();
    if (ok && pos < line.size() && line[pos] == '{') ok = ParseLabels(line, &pos, &s.labels);
    if (ok) {
      std::vector<absl::string_view> rest =
          absl::StrSplit(line.substr(pos), absl::ByAnyChar(" \t"), absl::SkipEmpty());
      ok = !rest.empty() && rest.size() <= 2 && ParseValue(rest[0], &s.value);
    }
    if (!ok)
      return absl::InvalidArgumentError(
          absl::StrCat("metrics line ", line_number, ": cannot parse '", line, "'"));
    samples.push_back(std::move(s));
  }
  return samples;
}

double SumSamples(const std::vector<PrometheusSample>& samples, const std::string& name,
                  const std::map<std::string, std::string>& match) {
  double sum = 0;
  for (const PrometheusSample& s : samples) {
    if (s.name != name) continue;
    bool all = true;
    for (const auto& [k, v] : match) {
      auto it = s.labels.find(k);
      all = all && it != s.labels.end() && it->second == v;
    }
    if (all) sum += s.value;
  }
  return sum;
}

}  // namespace expertd::bench
