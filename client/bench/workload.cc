#include "client/bench/workload.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <fstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "nlohmann/json.hpp"

namespace expertd::bench {
namespace {

absl::Status BadSpec(const std::string& spec) {
  return absl::InvalidArgumentError(absl::StrCat(
      "bad length distribution '", spec, "': expected N, uniform:MIN,MAX or normal:MEAN,STD"));
}

absl::StatusOr<std::pair<double, double>> TwoNumbers(absl::string_view rest,
                                                     const std::string& spec) {
  std::vector<std::string> parts = absl::StrSplit(rest, ',');
  double a, b;
  if (parts.size() != 2 || !absl::SimpleAtod(parts[0], &a) || !absl::SimpleAtod(parts[1], &b))
    return BadSpec(spec);
  return std::make_pair(a, b);
}

absl::StatusOr<Prompt> ParsePromptLine(const std::string& line, int line_number,
                                       const std::string& path) {
  auto fail = [&](const std::string& why) {
    return absl::InvalidArgumentError(absl::StrCat(path, ":", line_number, ": ", why));
  };
  nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return fail("not a JSON object");
  Prompt p;
  if (j.contains("text")) {
    if (!j["text"].is_string() || j["text"].get<std::string>().empty())
      return fail("\"text\" must be a non-empty string");
    p.text = j["text"].get<std::string>();
  } else if (j.contains("token_ids")) {
    const auto& ids = j["token_ids"];
    if (!ids.is_array() || ids.empty()) return fail("\"token_ids\" must be a non-empty array");
    for (const auto& id : ids) {
      if (!id.is_number_unsigned() || id.get<uint64_t>() > UINT32_MAX)
        return fail("\"token_ids\" must hold uint32 ids");
      p.token_ids.push_back(id.get<uint32_t>());
    }
  } else {
    return fail("needs \"text\" or \"token_ids\"");
  }
  if (j.contains("max_new_tokens")) {
    const auto& m = j["max_new_tokens"];
    if (!m.is_number_unsigned() || m.get<uint64_t>() < 1 || m.get<uint64_t>() > UINT32_MAX) {
      return fail("\"max_new_tokens\" must be an integer >= 1");
    }
    p.max_new_tokens = m.get<int64_t>();
  }
  return p;
}

}  // namespace

absl::StatusOr<LengthDistribution> LengthDistribution::Parse(const std::string& spec) {
  LengthDistribution d;
  d.spec_ = spec;
  absl::string_view rest = spec;
  if (absl::ConsumePrefix(&rest, "uniform:")) {
    auto ab = TwoNumbers(rest, spec);
    if (!ab.ok()) return ab.status();
    d.kind_ = Kind::kUniform;
    std::tie(d.a_, d.b_) = *ab;
    if (d.a_ < 1 || d.b_ < d.a_ || d.a_ != std::floor(d.a_) || d.b_ != std::floor(d.b_))
      return BadSpec(spec);
  } else if (absl::ConsumePrefix(&rest, "normal:")) {
    auto ab = TwoNumbers(rest, spec);
    if (!ab.ok()) return ab.status();
    d.kind_ = Kind::kNormal;
    std::tie(d.a_, d.b_) = *ab;
    if (d.a_ < 1 || d.b_ < 0) return BadSpec(spec);
  } else {
    int64_t n;
    if (!absl::SimpleAtoi(spec, &n) || n < 1) return BadSpec(spec);
    d.a_ = static_cast<double>(n);
  }
  return d;
}

LengthDistribution LengthDistribution::Fixed(int64_t n) {
  LengthDistribution d;
  d.a_ = static_cast<double>(n);
  d.spec_ = std::to_string(n);
  return d;
}

int64_t LengthDistribution::Sample(Rng* rng) const {
  switch (kind_) {
    case Kind::kFixed:
      return static_cast<int64_t>(a_);
    case Kind::kUniform:
      return static_cast<int64_t>(a_) +
             static_cast<int64_t>(rng->UniformInt(static_cast<uint64_t>(b_ - a_ + 1)));
    case Kind::kNormal:
      return std::max<int64_t>(1, std::llround(rng->Normal(a_, b_)));
  }
  return 1;
}

double LengthDistribution::mean() const { return kind_ == Kind::kUniform ? (a_ + b_) / 2 : a_; }

absl::StatusOr<std::vector<Prompt>> LoadJsonlPrompts(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read prompt file '", path, "'"));
  std::vector<Prompt> prompts;
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    if (absl::StripAsciiWhitespace(line).empty()) continue;
    auto p = ParsePromptLine(line, n, path);
    if (!p.ok()) return p.status();
    prompts.push_back(*std::move(p));
  }
  if (prompts.empty())
    return absl::InvalidArgumentError(absl::StrCat("prompt file '", path, "' has no prompts"));
  return prompts;
}

uint64_t PromptHash(const Prompt& prompt) {
  uint64_t h = 0xcbf29ce484222325ULL;
  auto mix = [&h](uint8_t byte) { h = (h ^ byte) * 0x100000001b3ULL; };
  if (!prompt.token_ids.empty()) {
    for (uint32_t id : prompt.token_ids) {
      for (int shift = 0; shift < 32; shift += 8) mix(static_cast<uint8_t>(id >> shift));
    }
  } else {
    for (char c : prompt.text) mix(static_cast<uint8_t>(c));
  }
  return h;
}

Workload::Workload(WorkloadOptions options)
    : options_(std::move(options)),
      prompt_rng_(DeriveSeed(options_.seed, 1)),
      length_rng_(DeriveSeed(options_.seed, 2)),
      seed_rng_(DeriveSeed(options_.seed, 3)) {
  assert(!options_.dataset.empty() || options_.vocab_size > options_.excluded_ids.size());
}

Prompt Workload::NextPrompt() {
  if (!options_.dataset.empty()) {
    if (position_ == order_.size()) {
      order_.resize(options_.dataset.size());
      for (size_t i = 0; i < order_.size(); ++i) order_[i] = i;
      for (size_t i = order_.size(); i > 1; --i)
        std::swap(order_[i - 1], order_[prompt_rng_.UniformInt(i)]);
      position_ = 0;
    }
    return options_.dataset[order_[position_++]];
  }
  Prompt p;
  const int64_t n = options_.input_len.Sample(&length_rng_);
  while (static_cast<int64_t>(p.token_ids.size()) < n) {
    const uint32_t id = static_cast<uint32_t>(prompt_rng_.UniformInt(options_.vocab_size));
    if (options_.excluded_ids.count(id) == 0) p.token_ids.push_back(id);
  }
  return p;
}

PlannedRequest Workload::Next() {
  PlannedRequest r;
  r.index = next_index_++;
  r.prompt = NextPrompt();
  r.max_new_tokens = r.prompt.max_new_tokens > 0 ? r.prompt.max_new_tokens
                                                 : options_.output_len.Sample(&length_rng_);
  const bool synthetic = options_.dataset.empty();
  if (synthetic && options_.max_context > 0) {
    r.max_new_tokens = std::min<int64_t>(r.max_new_tokens, options_.max_context - 1);
    const int64_t room = options_.max_context - r.max_new_tokens;
    if (static_cast<int64_t>(r.prompt.token_ids.size()) > room) r.prompt.token_ids.resize(room);
  }
  r.input_tokens =
      r.prompt.token_ids.empty() ? -1 : static_cast<int64_t>(r.prompt.token_ids.size());
  r.sampling_seed = seed_rng_.Next();
  r.prompt_hash = PromptHash(r.prompt);
  return r;
}

}  // namespace expertd::bench
