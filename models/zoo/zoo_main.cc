// expertd-zoo: writes a deterministic tiny Hugging Face MoE checkpoint.
//
//   expertd-zoo [--arch=mixtral|qwen2_moe|qwen3_moe|olmoe|deepseek_v3]
//               [--preset=tiny|default|olmoe_1b7b_4l|qwen3_30b_a3b_2l|deepseek_v3_2l]
//               [--hidden=N --layers=N --experts=N --top_k=N --moe_intermediate=N --heads=N
//                --kv_heads=N --head_dim=N --vocab=N --dtype=bf16|f32|f16|fp8 --seed=N --shards=N
//                --tie_word_embeddings --if_missing]
//               [deepseek_v3: --q_lora_rank=N --kv_lora_rank=N --n_group=N --topk_group=N
//                --shared_experts=N --first_k_dense_replace=N] --out=DIR
//
// The preset gives every size; explicit flags override it. Prints one JSON
// line describing the model in DIR (re-opened and validated); errors go to
// stderr with exit code 1. With --if_missing an existing DIR/config.json
// (which the generator writes last) means "already complete": nothing is
// written, the existing model is validated and described.
#include <sys/stat.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/flags.h"
#include "base/status_macros.h"
#include "models/checkpoint/checkpoint.h"
#include "models/zoo/generator.h"
#include "models/zoo/zoo_spec.h"
#include "nlohmann/json.hpp"

namespace expertd::models::zoo {
namespace {

struct Options {
  std::string arch = "qwen3_moe";
  std::string preset = "default";
  std::string out;
  std::string dtype;
  std::string mlp_only_layers;
  int64_t hidden = 0, layers = 0, experts = 0, top_k = 0, moe_intermediate = 0, heads = 0,
          kv_heads = 0;
  int64_t head_dim = 0, vocab = 0, seed = 0, shards = 1, intermediate = 0, shared_intermediate = 0;
  int64_t q_lora_rank = 0, kv_lora_rank = 0, n_group = 0, topk_group = 0, shared_experts = 0,
          first_k_dense_replace = 0;
  bool tie_word_embeddings = false;
  bool if_missing = false;
};

bool FileExists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

void Override(const std::vector<std::string>& set, const char* flag, int64_t value,
              int64_t* field) {
  for (const std::string& s : set) {
    if (s == flag) *field = value;
  }
}

// The deepseek_v3-only size flags; naming one for another architecture is
// an error rather than silently ignored.
absl::Status ApplyDeepseekFlags(const Options& o, const std::vector<std::string>& set, ZooSpec* s) {
  const std::vector<std::pair<const char*, std::pair<int64_t, int64_t*>>> flags = {
      {"q_lora_rank", {o.q_lora_rank, &s->q_lora_rank}},
      {"kv_lora_rank", {o.kv_lora_rank, &s->kv_lora_rank}},
      {"n_group", {o.n_group, &s->n_group}},
      {"topk_group", {o.topk_group, &s->topk_group}},
      {"shared_experts", {o.shared_experts, &s->shared_experts}},
      {"first_k_dense_replace", {o.first_k_dense_replace, &s->first_k_dense_replace}}};
  for (const auto& [flag, value] : flags) {
    const bool given = std::find(set.begin(), set.end(), flag) != set.end();
    if (given && s->arch != Architecture::kDeepseekV3)
      return absl::InvalidArgumentError(absl::StrCat("flag --", flag, " is for deepseek_v3"));
    Override(set, flag, value.first, value.second);
  }
  // Latent attention has no kv heads: DeepSeek's config repeats the heads.
  const bool kv_heads_given = std::find(set.begin(), set.end(), "kv_heads") != set.end();
  if (s->arch == Architecture::kDeepseekV3 && !kv_heads_given) s->kv_heads = s->heads;
  return absl::OkStatus();
}

absl::StatusOr<ZooSpec> BuildSpec(const Options& o, const std::vector<std::string>& set) {
  ASSIGN_OR_RETURN(Architecture arch, ParseZooArch(o.arch));
  ASSIGN_OR_RETURN(ZooSpec s, PresetSpec(o.preset, arch));
  Override(set, "hidden", o.hidden, &s.hidden);
  Override(set, "layers", o.layers, &s.layers);
  Override(set, "experts", o.experts, &s.experts);
  Override(set, "top_k", o.top_k, &s.top_k);
  Override(set, "moe_intermediate", o.moe_intermediate, &s.moe_intermediate);
  Override(set, "intermediate", o.intermediate, &s.intermediate);
  Override(set, "shared_intermediate", o.shared_intermediate, &s.shared_intermediate);
  Override(set, "heads", o.heads, &s.heads);
  Override(set, "kv_heads", o.kv_heads, &s.kv_heads);
  Override(set, "head_dim", o.head_dim, &s.head_dim);
  Override(set, "vocab", o.vocab, &s.vocab);
  Override(set, "shards", o.shards, &s.shards);
  RETURN_IF_ERROR(ApplyDeepseekFlags(o, set, &s));
  s.seed = static_cast<uint64_t>(o.seed);
  s.tie_word_embeddings = o.tie_word_embeddings;
  if (!o.dtype.empty()) {
    if (o.dtype == "bf16")
      s.dtype = DType::kBF16;
    else if (o.dtype == "f32")
      s.dtype = DType::kF32;
    else if (o.dtype == "f16")
      s.dtype = DType::kF16;
    else if (o.dtype == "fp8")
      s.dtype = DType::kF8E4M3;
    else
      return absl::InvalidArgumentError("flag --dtype: expected bf16, f32, f16 or fp8, got '" +
                                        o.dtype + "'");
  }
  for (absl::string_view part : absl::StrSplit(o.mlp_only_layers, ',', absl::SkipEmpty())) {
    int64_t layer;
    if (!absl::SimpleAtoi(part, &layer)) {
      return absl::InvalidArgumentError(
          "flag --mlp_only_layers: expected comma-separated layer indices");
    }
    s.mlp_only_layers.push_back(layer);
  }
  return s;
}

int Run(int argc, char** argv) {
  Options o;
  FlagSet flags(
      "expertd-zoo --out=DIR [--arch=qwen3_moe] [--preset=default] [size flags]: writes a "
      "deterministic "
      "random Hugging Face MoE checkpoint (config.json, tokenizer.json, safetensors)");
  flags.String("out", &o.out, "output directory (created if missing)");
  flags.String("arch", &o.arch, "mixtral | qwen2_moe | qwen3_moe | olmoe | deepseek_v3");
  flags.String("preset", &o.preset,
               "tiny | default | olmoe_1b7b_4l | qwen3_30b_a3b_2l | deepseek_v3_2l (sizes; flags "
               "below override)");
  flags.Int("hidden", &o.hidden, 1, 65536, "hidden size");
  flags.Int("layers", &o.layers, 1, 1024, "decoder layers");
  flags.Int("experts", &o.experts, 1, 4096, "routed experts per layer");
  flags.Int("top_k", &o.top_k, 1, 4096, "experts per token");
  flags.Int("moe_intermediate", &o.moe_intermediate, 1, 65536, "routed expert width");
  flags.Int("intermediate", &o.intermediate, 1, 262144,
            "dense MLP width (qwen; default 2 x moe_intermediate)");
  flags.Int("shared_intermediate", &o.shared_intermediate, 1, 262144,
            "qwen2_moe shared expert width (default 2 x moe_intermediate)");
  flags.String("mlp_only_layers", &o.mlp_only_layers, "qwen: comma-separated dense layer indices");
  flags.Int("heads", &o.heads, 1, 1024, "attention heads");
  flags.Int("kv_heads", &o.kv_heads, 1, 1024, "key/value heads");
  flags.Int("head_dim", &o.head_dim, 2, 1024, "head dim (qwen3_moe only; default hidden / heads)");
  flags.Int("vocab", &o.vocab, 259, 1 << 20, "vocabulary size (== the generated tokenizer's)");
  flags.String("dtype", &o.dtype,
               "bf16 | f32 | f16 | fp8 (block-scaled E4M3 Linear weights, the rest bf16; "
               "default: the preset's)");
  flags.Int("seed", &o.seed, 0, INT64_MAX, "weights seed");
  flags.Int("shards", &o.shards, 1, 1024, "number of safetensors shards");
  flags.Int("q_lora_rank", &o.q_lora_rank, 0, 65536,
            "deepseek_v3: query low-rank width (0: a plain q_proj)");
  flags.Int("kv_lora_rank", &o.kv_lora_rank, 1, 65536, "deepseek_v3: compressed KV width");
  flags.Int("n_group", &o.n_group, 1, 4096, "deepseek_v3: expert groups");
  flags.Int("topk_group", &o.topk_group, 1, 4096, "deepseek_v3: groups kept per token");
  flags.Int("shared_experts", &o.shared_experts, 0, 64, "deepseek_v3: shared experts");
  flags.Int("first_k_dense_replace", &o.first_k_dense_replace, 0, 1024,
            "deepseek_v3: leading dense layers");
  flags.Bool("tie_word_embeddings", &o.tie_word_embeddings, "share embeddings and lm_head");
  flags.Bool("if_missing", &o.if_missing,
             "do nothing if OUT/config.json exists (a complete model is there)");
  absl::Status st = flags.Parse(argc, argv, nullptr);
  if (flags.help_requested()) {
    std::printf("%s", flags.Usage().c_str());
    return 0;
  }
  if (st.ok() && o.out.empty()) st = absl::InvalidArgumentError("flag --out is required");
  absl::StatusOr<ZooSpec> spec =
      st.ok() ? BuildSpec(o, flags.set_flags()) : absl::StatusOr<ZooSpec>(st);
  if (!spec.ok())
    st = spec.status();
  else if (!(o.if_missing && FileExists(o.out + "/config.json")))
    st = GenerateModel(*spec, o.out);
  // Read back what was written, as a user of the checkpoint would.
  std::unique_ptr<Checkpoint> ckpt;
  if (st.ok()) {
    auto opened = Checkpoint::Open(o.out);
    st = opened.ok() ? (*opened)->ValidateAgainstConfig() : opened.status();
    if (opened.ok()) ckpt = std::move(opened).value();
  }
  if (!st.ok()) {
    std::fprintf(stderr, "expertd-zoo: %s\n", std::string(st.message()).c_str());
    return 1;
  }
  const ModelConfig& c = ckpt->config();
  nlohmann::json summary = {{"out", o.out},
                            {"architecture", ArchitectureName(c.architecture)},
                            {"vocab_size", c.vocab_size},
                            {"hidden_size", c.hidden_size},
                            {"layers", c.num_hidden_layers},
                            {"experts", c.num_experts},
                            {"top_k", c.num_experts_per_tok},
                            {"params", c.TotalParams()},
                            {"bytes", ckpt->total_bytes()},
                            {"files", ckpt->files().size()}};
  std::printf("%s\n", summary.dump().c_str());
  return 0;
}

}  // namespace
}  // namespace expertd::models::zoo

int main(int argc, char** argv) { return expertd::models::zoo::Run(argc, argv); }
