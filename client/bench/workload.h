// Workload: the sequence of prompts expert-bench sends, from a JSONL file or
// synthetic, fully determined by the seed (same seed => same prompts, output
// lengths and per-request sampling seeds, in the same order).
//
// Length distributions (flag syntax):
//   "128"              fixed
//   "uniform:64,256"   uniform integer in [64, 256]
//   "normal:128,32"    normal(mean 128, std 32), rounded, clipped to [1, inf)
//
// JSONL prompts: one object per non-empty line, {"text": "..."} or
// {"token_ids": [1, 2, 3]}, optionally with "max_new_tokens": N (N >= 1; else
// the output-length distribution decides). Lines are used in a seeded random
// order, reshuffled on each pass through the file.
//
// Synthetic prompts are token ids drawn uniformly from [0, vocab_size) minus
// the excluded ids (the model's special tokens), with lengths from the input
// distribution; when input + output exceeds the context, the input is cut so
// that the request fits.
//
// Not thread-safe.
#ifndef EXPERTD_CLIENT_BENCH_WORKLOAD_H_
#define EXPERTD_CLIENT_BENCH_WORKLOAD_H_

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "client/bench/random.h"

namespace expertd::bench {

class LengthDistribution {
 public:
  static absl::StatusOr<LengthDistribution> Parse(const std::string& spec);
  static LengthDistribution Fixed(int64_t n);

  // A length >= 1.
  int64_t Sample(Rng* rng) const;
  // The mean of the distribution before clipping (for reports).
  double mean() const;
  const std::string& spec() const { return spec_; }

 private:
  enum class Kind { kFixed, kUniform, kNormal };
  Kind kind_ = Kind::kFixed;
  double a_ = 1, b_ = 0;  // fixed: a; uniform: [a, b]; normal: mean a, std b
  std::string spec_;
};

struct Prompt {
  std::string text;  // used when token_ids is empty
  std::vector<uint32_t> token_ids;
  int64_t max_new_tokens = 0;  // 0: from the output-length distribution
};

// Reads a JSONL prompt file. Errors name the line.
absl::StatusOr<std::vector<Prompt>> LoadJsonlPrompts(const std::string& path);

struct WorkloadOptions {
  std::vector<Prompt> dataset;  // empty: synthetic prompts
  LengthDistribution input_len = LengthDistribution::Fixed(128);
  LengthDistribution output_len = LengthDistribution::Fixed(128);
  uint32_t vocab_size = 0;          // synthetic: ids in [0, vocab_size)
  std::set<uint32_t> excluded_ids;  // synthetic: never drawn
  int64_t max_context = 0;          // synthetic: input + output <= this (0: no limit)
  uint64_t seed = 0;
};

struct PlannedRequest {
  int64_t index = 0;  // 0, 1, 2, ... in issue order
  Prompt prompt;
  int64_t input_tokens = -1;  // token_ids.size(); -1 for text (known from the server's usage)
  int64_t max_new_tokens = 1;
  uint64_t sampling_seed = 0;  // per request, so outputs are reproducible too
  uint64_t prompt_hash = 0;    // FNV-1a of the prompt, to compare schedules
};

class Workload {
 public:
  // REQUIRES: options.dataset non-empty, or vocab_size > excluded_ids.size().
  explicit Workload(WorkloadOptions options);

  PlannedRequest Next();

 private:
  Prompt NextPrompt();

  WorkloadOptions options_;
  Rng prompt_rng_;
  Rng length_rng_;
  Rng seed_rng_;
  std::vector<size_t> order_;  // dataset order for the current pass
  size_t position_ = 0;
  int64_t next_index_ = 0;
};

// FNV-1a over the prompt's ids (little-endian 4 bytes each) or text bytes.
uint64_t PromptHash(const Prompt& prompt);

}  // namespace expertd::bench

#endif  // EXPERTD_CLIENT_BENCH_WORKLOAD_H_
