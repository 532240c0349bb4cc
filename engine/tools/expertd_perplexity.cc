// expertd-perplexity: perplexity of a checkpoint on a text, from the command line.
//
//   expertd-perplexity --model=DIR (--text=FILE | --token_ids=FILE.json) [--ctx=256]
//                      [--max_windows=N] [--weights=model.bf16.safetensors] [--threads=N]
//                      [--backend=cpu|cuda|auto] [--matmul_activations=fp32|bf16|int8]
//                      [the daemon's expert-store flags:
//                       --expert_dtype=bf16|int8|int4|mxfp4|fp8 --expert_group_size=G ...]
//
// The text is encoded with DIR/tokenizer.json (no special tokens added); --token_ids takes the
// ids instead (a JSON array), so another engine can be scored on exactly the same tokens. The
// ids are cut into consecutive, non-overlapping windows of --ctx tokens (the last one may be
// shorter); each window is a fresh sequence, prefilled in one step with the logits of every
// position, and every position but the last predicts the next token of its window. So a
// window of n tokens scores n - 1 predictions, and the first token of a window is context
// only. Perplexity = exp(mean negative log-likelihood over all scored predictions), the
// log-softmax in double precision.
//
// Prints ONE JSON object on stdout:
//   {"tokens", "windows", "scored", "mean_nll", "perplexity", "seconds"}
// Errors go to stderr with exit status 1 (2 for bad usage).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "base/flags.h"
#include "base/status_macros.h"
#include "engine/engine.h"
#include "engine/experts/expert_store.h"
#include "engine/experts/expert_store_flags.h"
#include "models/checkpoint/checkpoint.h"
#include "models/tokenizer/tokenizer.h"
#include "nlohmann/json.hpp"

namespace expertd {
namespace {

struct Options {
  std::string model, text, token_ids, weights;
  std::string backend = "cpu";
  int64_t ctx = 256, max_windows = 0, threads = 0;
  std::string matmul_activations = "fp32";
  engine::ExpertStoreFlags experts;
};

absl::StatusOr<std::string> ReadFile(const std::string& path, const char* flag) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(std::string("--") + flag + ": cannot read " + path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

absl::StatusOr<std::vector<int32_t>> LoadIds(const Options& o) {
  if (o.text.empty() == o.token_ids.empty()) {
    return absl::InvalidArgumentError("exactly one of --text=FILE and --token_ids=FILE is needed");
  }
  if (!o.text.empty()) {
    ASSIGN_OR_RETURN(std::string text, ReadFile(o.text, "text"));
    ASSIGN_OR_RETURN(std::unique_ptr<models::Tokenizer> tok,
                     models::Tokenizer::LoadFromFile(o.model + "/tokenizer.json"));
    return tok->Encode(text, /*add_special_tokens=*/false);
  }
  ASSIGN_OR_RETURN(std::string text, ReadFile(o.token_ids, "token_ids"));
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_array()) {
    return absl::InvalidArgumentError("--token_ids: " + o.token_ids + " is not a JSON array");
  }
  std::vector<int32_t> ids;
  for (const nlohmann::json& v : j) {
    if (!v.is_number_integer()) {
      return absl::InvalidArgumentError("--token_ids: every element must be an integer id");
    }
    ids.push_back(v.get<int32_t>());
  }
  return ids;
}

// Sum over positions i < n - 1 of -log softmax(logits[i])[window[i + 1]].
double WindowNll(const std::vector<float>& logits, int64_t vocab,
                 const std::vector<int32_t>& window) {
  double nll = 0.0;
  for (size_t i = 0; i + 1 < window.size(); ++i) {
    const float* row = logits.data() + i * vocab;
    const double peak = *std::max_element(row, row + vocab);
    double sum = 0.0;
    for (int64_t v = 0; v < vocab; ++v) sum += std::exp(static_cast<double>(row[v]) - peak);
    nll += peak + std::log(sum) - row[window[i + 1]];
  }
  return nll;
}

absl::StatusOr<std::unique_ptr<engine::Engine>> MakeEngine(const Options& o) {
  models::CheckpointOptions copts;
  copts.weights_file = o.weights;
  ASSIGN_OR_RETURN(std::unique_ptr<models::Checkpoint> ckpt,
                   models::Checkpoint::Open(o.model, copts));
  engine::EngineOptions eopts;
  eopts.backend.name = o.backend;
  eopts.backend.threads = static_cast<int>(o.threads);
  if (!engine::ParseMatmulActivations(o.matmul_activations, &eopts.backend.matmul_activations)) {
    return absl::InvalidArgumentError("flag --matmul_activations: expected fp32, bf16 or int8, got '" +
                                      o.matmul_activations + "'");
  }
  eopts.max_step_tokens = std::max<int64_t>(8192, o.ctx);
  eopts.kv_cache_bytes = 256ull << 20;
  ASSIGN_OR_RETURN(auto offload, engine::ExpertStoreOptionsFromFlags(o.experts));
  if (offload.has_value()) eopts.expert_provider_factory = engine::ExpertStoreFactory(*offload);
  return engine::Engine::Create(std::shared_ptr<const models::Checkpoint>(std::move(ckpt)), eopts);
}

absl::Status Run(const Options& o) {
  if (o.model.empty()) return absl::InvalidArgumentError("--model=DIR is required");
  ASSIGN_OR_RETURN(std::vector<int32_t> ids, LoadIds(o));
  if (ids.size() < 2) return absl::InvalidArgumentError("the text has fewer than 2 tokens");
  ASSIGN_OR_RETURN(std::unique_ptr<engine::Engine> engine, MakeEngine(o));
  const int64_t vocab = engine->config().vocab_size;
  const auto start = std::chrono::steady_clock::now();
  double nll = 0.0;
  int64_t scored = 0, windows = 0;
  for (size_t begin = 0; begin + 1 < ids.size(); begin += o.ctx) {
    if (o.max_windows > 0 && windows == o.max_windows) break;
    const size_t end = std::min(ids.size(), begin + static_cast<size_t>(o.ctx));
    std::vector<int32_t> window(ids.begin() + begin, ids.begin() + end);
    if (window.size() < 2) break;
    const engine::SequenceId id = windows + 1;
    RETURN_IF_ERROR(engine->AddSequence(id));
    engine::StepRequest request;
    request.chunks.push_back({id, window, /*all_logits=*/true});
    absl::StatusOr<engine::StepResult> step = engine->Step(request);
    RETURN_IF_ERROR(engine->RemoveSequence(id));
    if (!step.ok()) return step.status();
    nll += WindowNll(step->sequences[0].logits, vocab, window);
    scored += static_cast<int64_t>(window.size()) - 1;
    ++windows;
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const double mean = nll / static_cast<double>(scored);
  nlohmann::json out = {{"tokens", ids.size()}, {"windows", windows},   {"scored", scored},
                        {"mean_nll", mean},     {"perplexity", std::exp(mean)},
                        {"seconds", seconds}};
  std::cout << out.dump() << std::endl;
  return absl::OkStatus();
}

}  // namespace
}  // namespace expertd

int main(int argc, char** argv) {
  expertd::Options o;
  expertd::FlagSet flags(
      "expertd-perplexity --model=DIR (--text=FILE | --token_ids=FILE.json) [--ctx=256] "
      "[--expert_dtype=bf16|int8|int4|mxfp4|fp8 --expert_group_size=G]");
  flags.String("model", &o.model, "Hugging Face checkpoint directory (config.json + safetensors)");
  flags.String("text", &o.text, "UTF-8 text to score, encoded with DIR/tokenizer.json");
  flags.String("token_ids", &o.token_ids, "JSON array of token ids to score (instead of --text)");
  flags.Int("ctx", &o.ctx, 2, 1 << 20, "tokens per window (each window is a fresh sequence)");
  flags.Int("max_windows", &o.max_windows, 0, 1ll << 40, "score at most N windows (0 = all)");
  flags.String("backend", &o.backend, "auto | cpu | cuda");
  flags.String("weights", &o.weights,
               "weights file inside DIR (e.g. model.bf16.safetensors); default model.safetensors");
  flags.Int("threads", &o.threads, 0, 1024, "CPU threads (0 = all cores)");
  flags.String("matmul_activations", &o.matmul_activations, expertd::engine::kMatmulActivationsHelp);
  expertd::engine::RegisterExpertStoreFlags(&flags, &o.experts);
  absl::Status st = flags.Parse(argc, argv, nullptr);
  if (flags.help_requested()) {
    std::cout << flags.Usage();
    return 0;
  }
  if (!st.ok()) {
    std::cerr << "expertd-perplexity: " << st.message() << "\n" << flags.Usage();
    return 2;
  }
  st = expertd::Run(o);
  if (!st.ok()) {
    std::cerr << "expertd-perplexity: " << st << "\n";
    return 1;
  }
  return 0;
}
