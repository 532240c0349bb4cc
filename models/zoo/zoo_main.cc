// expertd-zoo: writes a deterministic tiny Hugging Face MoE checkpoint.
//
//   expertd-zoo [--arch=mixtral|qwen2_moe|qwen3_moe|olmoe] [--preset=tiny|default|olmoe_1b7b_4l]
//               [--hidden=N --layers=N --experts=N --top_k=N --moe_intermediate=N --heads=N
//                --kv_heads=N --head_dim=N --vocab=N --dtype=bf16|f32|f16 --seed=N --shards=N
//                --tie_word_embeddings --if_missing] --out=DIR
//
// The preset gives every size; explicit flags override it. Prints one JSON
// line describing the model in DIR (re-opened and validated); errors go to
// stderr with exit code 1. With --if_missing an existing DIR/config.json
// (which the generator writes last) means "already complete": nothing is
// written, the existing model is validated and described.
#include <sys/stat.h>

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
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
  s.seed = static_cast<uint64_t>(o.seed);
  s.tie_word_embeddings = o.tie_word_embeddings;
  if (!o.dtype.empty()) {
    if (o.dtype == "bf16")
      s.dtype = DType::kBF16;
    else if (o.dtype == "f32")
      s.dtype = DType::kF32;
    else if (o.dtype == "f16")
      s.dtype = DType::kF16;
    else
      return absl::InvalidArgumentError("flag --dtype: expected bf16, f32 or f16, got '" + o.dtype +
                                        "'");
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
  flags.String("arch", &o.arch, "mixtral | qwen2_moe | qwen3_moe | olmoe");
  flags.String("preset", &o.preset, "tiny | default | olmoe_1b7b_4l (sizes; flags below override)");
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
  flags.String("dtype", &o.dtype, "bf16 | f32 | f16 (default: the preset's)");
  flags.Int("seed", &o.seed, 0, INT64_MAX, "weights seed");
  flags.Int("shards", &o.shards, 1, 1024, "number of safetensors shards");
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
