#include "models/config/model_config.h"

#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "nlohmann/json.hpp"

namespace expertd::models {
namespace {

using json = nlohmann::json;

// Reads typed fields out of the config object with errors that name the file
// and the field.
class FieldReader {
 public:
  FieldReader(const json& obj, absl::string_view source) : obj_(obj), source_(source) {}

  absl::Status Error(absl::string_view field, absl::string_view what) const {
    return absl::InvalidArgumentError(absl::StrCat(source_, ": field '", field, "' ", what));
  }

  bool Has(const char* key) const { return obj_.contains(key) && !obj_[key].is_null(); }

  absl::StatusOr<int64_t> Int(const char* key, int64_t min, int64_t max) const {
    if (!Has(key)) return Error(key, "is required");
    const json& v = obj_[key];
    if (!v.is_number_integer())
      return Error(key, absl::StrCat("must be an integer, got ", v.dump()));
    int64_t x = v.get<int64_t>();
    if (x < min || x > max)
      return Error(key, absl::StrCat("must be in [", min, ", ", max, "], got ", x));
    return x;
  }
  absl::StatusOr<int64_t> IntOr(const char* key, int64_t fallback, int64_t min, int64_t max) const {
    if (!Has(key)) return fallback;
    return Int(key, min, max);
  }
  absl::StatusOr<double> Double(const char* key, double fallback, double min, double max) const {
    if (!Has(key)) return fallback;
    const json& v = obj_[key];
    if (!v.is_number()) return Error(key, absl::StrCat("must be a number, got ", v.dump()));
    double x = v.get<double>();
    if (!(x >= min && x <= max))
      return Error(key, absl::StrCat("must be in [", min, ", ", max, "], got ", x));
    return x;
  }
  absl::StatusOr<bool> Bool(const char* key, bool fallback) const {
    if (!Has(key)) return fallback;
    const json& v = obj_[key];
    if (!v.is_boolean()) return Error(key, absl::StrCat("must be true or false, got ", v.dump()));
    return v.get<bool>();
  }
  absl::StatusOr<std::string> String(const char* key, const std::string& fallback) const {
    if (!Has(key)) return fallback;
    const json& v = obj_[key];
    if (!v.is_string()) return Error(key, absl::StrCat("must be a string, got ", v.dump()));
    return v.get<std::string>();
  }
  // A token id or a list of them (HF allows both for eos_token_id).
  absl::StatusOr<std::vector<int32_t>> TokenIds(const char* key, int64_t vocab) const {
    std::vector<int32_t> ids;
    if (!Has(key)) return ids;
    const json& v = obj_[key];
    auto add = [&](const json& x) -> absl::Status {
      if (!x.is_number_integer() || x.get<int64_t>() < 0 || x.get<int64_t>() >= vocab) {
        return Error(key, absl::StrCat("must hold token ids in [0, ", vocab, "), got ", x.dump()));
      }
      ids.push_back(static_cast<int32_t>(x.get<int64_t>()));
      return absl::OkStatus();
    };
    if (v.is_array()) {
      for (const json& x : v) RETURN_IF_ERROR(add(x));
    } else {
      RETURN_IF_ERROR(add(v));
    }
    return ids;
  }
  const json& obj() const { return obj_; }

 private:
  const json& obj_;
  std::string source_;
};

constexpr int64_t kMaxDim = int64_t{1} << 20;
constexpr int64_t kMaxVocab = int64_t{1} << 24;

absl::StatusOr<Architecture> ParseArchitecture(const FieldReader& r) {
  const json& obj = r.obj();
  if (!obj.contains("architectures") || !obj["architectures"].is_array() ||
      obj["architectures"].empty() || !obj["architectures"][0].is_string()) {
    return r.Error("architectures", "must be a non-empty list of class names");
  }
  std::string name = obj["architectures"][0].get<std::string>();
  for (Architecture a : {Architecture::kMixtral, Architecture::kQwen2Moe, Architecture::kQwen3Moe,
                         Architecture::kOlmoe, Architecture::kDeepseekV3, Architecture::kGptOss}) {
    if (name == ArchitectureName(a)) return a;
  }
  return r.Error("architectures",
                 absl::StrCat("names unsupported architecture '", name,
                              "' (supported: MixtralForCausalLM, Qwen2MoeForCausalLM, "
                              "Qwen3MoeForCausalLM, OlmoeForCausalLM, DeepseekV3ForCausalLM, "
                              "GptOssForCausalLM)"));
}

absl::Status ParseRopeScaling(const FieldReader& r, ModelConfig* c) {
  // Newer transformers releases write "rope_parameters" (with rope_theta
  // inside) where older ones wrote "rope_scaling".
  const char* key = r.Has("rope_scaling") ? "rope_scaling" : "rope_parameters";
  if (!r.Has(key)) return absl::OkStatus();
  const json& rs = r.obj()[key];
  if (!rs.is_object()) return r.Error(key, "must be an object or null");
  FieldReader s(rs, "config.json rope_scaling");
  std::string type;
  if (rs.contains("rope_type") && rs["rope_type"].is_string())
    type = rs["rope_type"].get<std::string>();
  else if (rs.contains("type") && rs["type"].is_string())
    type = rs["type"].get<std::string>();
  RopeScaling& out = c->rope_scaling;
  if (rs.contains("rope_theta")) {
    ASSIGN_OR_RETURN(c->rope_theta, s.Double("rope_theta", 1e4, 1.0, 1e12));
  }
  if (type == "default") return absl::OkStatus();
  if (type == "linear")
    out.type = RopeScalingType::kLinear;
  else if (type == "llama3")
    out.type = RopeScalingType::kLlama3;
  else if (type == "yarn")
    out.type = RopeScalingType::kYarn;
  else
    return r.Error(
        key, absl::StrCat("has unsupported type '", type, "' (supported: linear, llama3, yarn)"));
  ASSIGN_OR_RETURN(out.factor, s.Double("factor", 1.0, 1e-3, 1e6));
  ASSIGN_OR_RETURN(
      out.original_max_position_embeddings,
      s.IntOr("original_max_position_embeddings", c->max_position_embeddings, 1, kMaxDim * 16));
  ASSIGN_OR_RETURN(out.low_freq_factor, s.Double("low_freq_factor", 1.0, 0, 1e6));
  ASSIGN_OR_RETURN(out.high_freq_factor, s.Double("high_freq_factor", 4.0, 0, 1e6));
  ASSIGN_OR_RETURN(out.beta_fast, s.Double("beta_fast", 32.0, 0, 1e6));
  ASSIGN_OR_RETURN(out.beta_slow, s.Double("beta_slow", 1.0, 0, 1e6));
  ASSIGN_OR_RETURN(out.mscale, s.Double("mscale", 1.0, 0, 1e6));
  ASSIGN_OR_RETURN(out.mscale_all_dim, s.Double("mscale_all_dim", 0.0, 0, 1e6));
  ASSIGN_OR_RETURN(out.truncate, s.Bool("truncate", true));
  return absl::OkStatus();
}

// quantization_config: absent / null, or block-scaled FP8 E4M3. Any other
// method is refused by name rather than misread as unquantized weights.
absl::Status ParseQuantization(const FieldReader& r, ModelConfig* c) {
  if (!r.Has("quantization_config")) return absl::OkStatus();
  const json& q = r.obj()["quantization_config"];
  if (!q.is_object()) return r.Error("quantization_config", "must be an object or null");
  FieldReader s(q, "config.json quantization_config");
  ASSIGN_OR_RETURN(std::string method, s.String("quant_method", ""));
  if (method == "mxfp4") {
    // gpt-oss as OpenAI publishes it: the experts as *_blocks / *_scales,
    // which the Checkpoint decodes (models/checkpoint/gpt_oss_experts.h).
    if (c->architecture == Architecture::kGptOss) return absl::OkStatus();
    return r.Error("quantization_config",
                   absl::StrCat("has quant_method 'mxfp4', which only GptOssForCausalLM "
                                "checkpoints use, not ",
                                ArchitectureName(c->architecture)));
  }
  if (method != "fp8") {
    return r.Error("quantization_config",
                   absl::StrCat("has unsupported quant_method '", method, "' (supported: fp8)"));
  }
  ASSIGN_OR_RETURN(std::string fmt, s.String("fmt", "e4m3"));
  if (fmt != "e4m3") {
    return r.Error("quantization_config",
                   absl::StrCat("has unsupported fmt '", fmt, "' (supported: e4m3)"));
  }
  if (!q.contains("weight_block_size") || !q["weight_block_size"].is_array() ||
      q["weight_block_size"].size() != 2 || !q["weight_block_size"][0].is_number_integer() ||
      !q["weight_block_size"][1].is_number_integer() || q["weight_block_size"][0] < 1 ||
      q["weight_block_size"][1] < 1 || q["weight_block_size"][0] > kMaxDim ||
      q["weight_block_size"][1] > kMaxDim) {
    return r.Error("quantization_config",
                   "weight_block_size must be two positive integers (per-tensor or per-channel "
                   "FP8 is not supported)");
  }
  c->fp8.enabled = true;
  c->fp8.block_rows = q["weight_block_size"][0].get<int64_t>();
  c->fp8.block_cols = q["weight_block_size"][1].get<int64_t>();
  return absl::OkStatus();
}

// gpt-oss' attention layers: "layer_types" (default: sliding_attention on
// even layers, full_attention on odd ones, as transformers fills it in) and
// the window of the sliding ones, "sliding_window" (default 128).
absl::Status ParseGptOssLayers(const FieldReader& r, ModelConfig* c) {
  ASSIGN_OR_RETURN(c->sliding_window, r.IntOr("sliding_window", 128, 1, kMaxDim * 16));
  for (int64_t i = 0; i < c->num_hidden_layers; ++i) c->sliding_layers[i] = i % 2 == 0;
  if (!r.Has("layer_types")) return absl::OkStatus();
  const json& v = r.obj()["layer_types"];
  if (!v.is_array() || static_cast<int64_t>(v.size()) != c->num_hidden_layers) {
    return r.Error("layer_types",
                   absl::StrCat("must list one type per layer (", c->num_hidden_layers, ")"));
  }
  for (int64_t i = 0; i < c->num_hidden_layers; ++i) {
    const std::string type = v[i].is_string() ? v[i].get<std::string>() : v[i].dump();
    if (type != "sliding_attention" && type != "full_attention") {
      return r.Error("layer_types",
                     absl::StrCat("holds '", type, "' at layer ", i,
                                  " (supported: sliding_attention, full_attention)"));
    }
    c->sliding_layers[i] = type == "sliding_attention";
  }
  return absl::OkStatus();
}

// Which decoder layers carry routed experts, as each architecture decides it.
absl::Status ParseMoeLayers(const FieldReader& r, ModelConfig* c) {
  c->is_moe_layer.assign(c->num_hidden_layers, true);
  switch (c->architecture) {
    case Architecture::kMixtral:
    case Architecture::kOlmoe:
    case Architecture::kGptOss:
      return absl::OkStatus();
    case Architecture::kQwen2Moe:
    case Architecture::kQwen3Moe: {
      ASSIGN_OR_RETURN(int64_t step, r.IntOr("decoder_sparse_step", 1, 1, kMaxDim));
      std::vector<bool> dense_only(c->num_hidden_layers, false);
      if (r.Has("mlp_only_layers")) {
        const json& v = r.obj()["mlp_only_layers"];
        if (!v.is_array()) return r.Error("mlp_only_layers", "must be a list of layer indices");
        for (const json& x : v) {
          if (!x.is_number_integer() || x.get<int64_t>() < 0 ||
              x.get<int64_t>() >= c->num_hidden_layers) {
            return r.Error("mlp_only_layers",
                           absl::StrCat("holds ", x.dump(), ", not a layer index in [0, ",
                                        c->num_hidden_layers, ")"));
          }
          dense_only[x.get<int64_t>()] = true;
        }
      }
      for (int64_t i = 0; i < c->num_hidden_layers; ++i) {
        c->is_moe_layer[i] = !dense_only[i] && c->num_experts > 0 && (i + 1) % step == 0;
      }
      return absl::OkStatus();
    }
    case Architecture::kDeepseekV3: {
      ASSIGN_OR_RETURN(int64_t first_dense,
                       r.IntOr("first_k_dense_replace", 0, 0, c->num_hidden_layers));
      ASSIGN_OR_RETURN(int64_t freq, r.IntOr("moe_layer_freq", 1, 1, kMaxDim));
      for (int64_t i = 0; i < c->num_hidden_layers; ++i) {
        c->is_moe_layer[i] = c->num_experts > 0 && i >= first_dense && i % freq == 0;
      }
      return absl::OkStatus();
    }
  }
  return absl::OkStatus();
}

absl::Status ParseMoe(const FieldReader& r, ModelConfig* c) {
  const bool deepseek = c->architecture == Architecture::kDeepseekV3;
  const bool local =
      c->architecture == Architecture::kMixtral || c->architecture == Architecture::kGptOss;
  const char* experts_key = local      ? "num_local_experts"
                            : deepseek ? "n_routed_experts"
                                       : "num_experts";
  ASSIGN_OR_RETURN(c->num_experts, r.Int(experts_key, 1, 1 << 16));
  ASSIGN_OR_RETURN(c->num_experts_per_tok, r.Int("num_experts_per_tok", 1, c->num_experts));
  if (local || c->architecture == Architecture::kOlmoe) {
    c->moe_intermediate_size = c->intermediate_size;  // experts use intermediate_size
  } else {
    ASSIGN_OR_RETURN(c->moe_intermediate_size, r.Int("moe_intermediate_size", 1, kMaxDim));
  }
  // Mixtral always renormalises, and gpt-oss' softmax over the top-k logits
  // is the same; the others say so in norm_topk_prob.
  if (local) {
    c->norm_topk_prob = true;
  } else {
    ASSIGN_OR_RETURN(c->norm_topk_prob, r.Bool("norm_topk_prob", false));
  }
  ASSIGN_OR_RETURN(c->router_aux_loss_coef,
                   r.Double(deepseek ? "aux_loss_alpha" : "router_aux_loss_coef", 0.0, 0.0, 1e3));
  if (c->architecture == Architecture::kQwen2Moe) {
    ASSIGN_OR_RETURN(c->shared_expert_intermediate_size,
                     r.IntOr("shared_expert_intermediate_size", 0, 0, kMaxDim));
    c->shared_expert_gated = c->shared_expert_intermediate_size > 0;
  }
  if (deepseek) {
    ASSIGN_OR_RETURN(std::string scoring, r.String("scoring_func", "softmax"));
    if (scoring == "sigmoid")
      c->router_scoring = RouterScoring::kSigmoid;
    else if (scoring != "softmax")
      return r.Error("scoring_func", absl::StrCat("has unsupported value '", scoring, "'"));
    ASSIGN_OR_RETURN(std::string method, r.String("topk_method", "greedy"));
    if (method != "noaux_tc" && method != "greedy" && method != "group_limited_greedy") {
      return r.Error("topk_method", absl::StrCat("has unsupported value '", method, "'"));
    }
    c->topk_method = method;
    ASSIGN_OR_RETURN(c->num_nextn_predict_layers, r.IntOr("num_nextn_predict_layers", 0, 0, 64));
    ASSIGN_OR_RETURN(c->n_group, r.IntOr("n_group", 1, 1, c->num_experts));
    ASSIGN_OR_RETURN(c->topk_group, r.IntOr("topk_group", 1, 1, c->n_group));
    if (c->num_experts % c->n_group != 0) return r.Error("n_group", "must divide n_routed_experts");
    ASSIGN_OR_RETURN(c->routed_scaling_factor, r.Double("routed_scaling_factor", 1.0, 0.0, 1e3));
    ASSIGN_OR_RETURN(int64_t n_shared, r.IntOr("n_shared_experts", 0, 0, 64));
    c->shared_expert_intermediate_size = n_shared * c->moe_intermediate_size;
    ASSIGN_OR_RETURN(c->q_lora_rank, r.IntOr("q_lora_rank", 0, 0, kMaxDim));
    ASSIGN_OR_RETURN(c->kv_lora_rank, r.Int("kv_lora_rank", 1, kMaxDim));
    ASSIGN_OR_RETURN(c->qk_nope_head_dim, r.Int("qk_nope_head_dim", 1, kMaxDim));
    ASSIGN_OR_RETURN(c->qk_rope_head_dim, r.Int("qk_rope_head_dim", 1, kMaxDim));
    ASSIGN_OR_RETURN(c->v_head_dim, r.Int("v_head_dim", 1, kMaxDim));
    c->head_dim = c->qk_nope_head_dim + c->qk_rope_head_dim;
  }
  return ParseMoeLayers(r, c);
}

}  // namespace

const char* ArchitectureName(Architecture arch) {
  switch (arch) {
    case Architecture::kMixtral:
      return "MixtralForCausalLM";
    case Architecture::kQwen2Moe:
      return "Qwen2MoeForCausalLM";
    case Architecture::kQwen3Moe:
      return "Qwen3MoeForCausalLM";
    case Architecture::kOlmoe:
      return "OlmoeForCausalLM";
    case Architecture::kDeepseekV3:
      return "DeepseekV3ForCausalLM";
    case Architecture::kGptOss:
      return "GptOssForCausalLM";
  }
  return "?";
}

int64_t ModelConfig::num_moe_layers() const {
  int64_t n = 0;
  for (bool moe : is_moe_layer) n += moe;
  return n;
}

int64_t ModelConfig::ExpertParamsPerExpert() const {
  return 3 * hidden_size * moe_intermediate_size;
}

int64_t ModelConfig::TotalExpertParams() const {
  return num_moe_layers() * num_experts * ExpertParamsPerExpert();
}

namespace {
int64_t AttentionParams(const ModelConfig& c) {
  const int64_t h = c.hidden_size;
  if (c.uses_mla()) {
    int64_t q = c.q_lora_rank > 0 ? h * c.q_lora_rank + c.q_lora_rank +
                                        c.q_lora_rank * c.num_attention_heads * c.head_dim
                                  : h * c.num_attention_heads * c.head_dim;
    int64_t kv = h * (c.kv_lora_rank + c.qk_rope_head_dim) + c.kv_lora_rank +
                 c.kv_lora_rank * c.num_attention_heads * (c.qk_nope_head_dim + c.v_head_dim);
    return q + kv + c.num_attention_heads * c.v_head_dim * h;
  }
  int64_t q = h * c.num_attention_heads * c.head_dim;
  int64_t kv = 2 * h * c.num_key_value_heads * c.head_dim;
  int64_t o = c.num_attention_heads * c.head_dim * h;
  int64_t bias =
      c.attention_bias ? (c.num_attention_heads + 2 * c.num_key_value_heads) * c.head_dim : 0;
  int64_t norms = c.qk_norm == QkNorm::kPerHead ? 2 * c.head_dim
                  : c.qk_norm == QkNorm::kWholeProjection
                      ? (c.num_attention_heads + c.num_key_value_heads) * c.head_dim
                      : 0;
  return q + kv + o + bias + norms;
}

// Everything in a layer except the routed experts.
int64_t LayerDenseParams(const ModelConfig& c, bool moe) {
  int64_t p = AttentionParams(c) + 2 * c.hidden_size;  // + two RMSNorms
  if (moe) {
    p += c.hidden_size * c.num_experts;                          // router
    p += 3 * c.hidden_size * c.shared_expert_intermediate_size;  // shared expert
    if (c.shared_expert_gated) p += c.hidden_size;
  } else {
    p += 3 * c.hidden_size * c.intermediate_size;
  }
  return p;
}
}  // namespace

int64_t ModelConfig::TotalParams() const {
  int64_t p = vocab_size * hidden_size * (tie_word_embeddings ? 1 : 2) + hidden_size;
  for (int64_t i = 0; i < num_hidden_layers; ++i) p += LayerDenseParams(*this, is_moe_layer[i]);
  return p + TotalExpertParams();
}

int64_t ModelConfig::ActiveParamsPerToken() const {
  int64_t p = vocab_size * hidden_size * (tie_word_embeddings ? 1 : 2) + hidden_size;
  for (int64_t i = 0; i < num_hidden_layers; ++i) {
    p += LayerDenseParams(*this, is_moe_layer[i]);
    if (is_moe_layer[i]) p += num_experts_per_tok * ExpertParamsPerExpert();
  }
  return p;
}

absl::StatusOr<ModelConfig> ParseModelConfig(absl::string_view text, absl::string_view source) {
  json obj = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (obj.is_discarded() || !obj.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": not a JSON object"));
  }
  FieldReader r(obj, source);
  ModelConfig c;
  ASSIGN_OR_RETURN(c.architecture, ParseArchitecture(r));
  ASSIGN_OR_RETURN(c.model_type, r.String("model_type", ""));
  ASSIGN_OR_RETURN(std::string act, r.String("hidden_act", "silu"));
  if (act != "silu")
    return r.Error("hidden_act", absl::StrCat("is '", act, "'; only 'silu' (SwiGLU) is supported"));

  ASSIGN_OR_RETURN(c.vocab_size, r.Int("vocab_size", 1, kMaxVocab));
  ASSIGN_OR_RETURN(c.hidden_size, r.Int("hidden_size", 1, kMaxDim));
  ASSIGN_OR_RETURN(c.num_hidden_layers, r.Int("num_hidden_layers", 1, 4096));
  ASSIGN_OR_RETURN(c.num_attention_heads, r.Int("num_attention_heads", 1, 4096));
  ASSIGN_OR_RETURN(c.num_key_value_heads,
                   r.IntOr("num_key_value_heads", c.num_attention_heads, 1, c.num_attention_heads));
  if (c.num_attention_heads % c.num_key_value_heads != 0) {
    return r.Error("num_key_value_heads",
                   absl::StrCat("(", c.num_key_value_heads, ") must divide num_attention_heads (",
                                c.num_attention_heads, ")"));
  }
  if (!r.Has("head_dim") && c.hidden_size % c.num_attention_heads != 0) {
    return r.Error("num_attention_heads", "must divide hidden_size when head_dim is not given");
  }
  ASSIGN_OR_RETURN(c.head_dim, r.IntOr("head_dim", c.hidden_size / c.num_attention_heads, 1, 4096));
  ASSIGN_OR_RETURN(c.intermediate_size, r.Int("intermediate_size", 1, kMaxDim));
  ASSIGN_OR_RETURN(c.max_position_embeddings,
                   r.IntOr("max_position_embeddings", 4096, 1, kMaxDim * 16));
  ASSIGN_OR_RETURN(c.rms_norm_eps, r.Double("rms_norm_eps", 1e-6, 0.0, 1.0));
  ASSIGN_OR_RETURN(c.rope_theta, r.Double("rope_theta", 10000.0, 1.0, 1e12));
  RETURN_IF_ERROR(ParseRopeScaling(r, &c));
  RETURN_IF_ERROR(ParseQuantization(r, &c));
  ASSIGN_OR_RETURN(c.tie_word_embeddings, r.Bool("tie_word_embeddings", false));

  // Qwen's sliding window (use_sliding_window with max_window_layers) has
  // meant different layers in different transformers releases: refuse it
  // rather than guess. Mixtral's "sliding_window" applies to every layer.
  ASSIGN_OR_RETURN(bool use_sliding, r.Bool("use_sliding_window", false));
  if (use_sliding)
    return r.Error("use_sliding_window",
                   "is true; Qwen's sliding-window attention is not supported");
  c.sliding_layers.assign(c.num_hidden_layers, false);
  if (c.architecture == Architecture::kMixtral && r.Has("sliding_window")) {
    ASSIGN_OR_RETURN(c.sliding_window, r.Int("sliding_window", 1, kMaxDim * 16));
    c.sliding_layers.assign(c.num_hidden_layers, true);
  }
  if (c.architecture == Architecture::kGptOss) RETURN_IF_ERROR(ParseGptOssLayers(r, &c));

  switch (c.architecture) {
    case Architecture::kQwen2Moe:
      c.attention_bias = true;
      break;
    case Architecture::kQwen3Moe: {
      c.qk_norm = QkNorm::kPerHead;
      ASSIGN_OR_RETURN(c.attention_bias, r.Bool("attention_bias", false));
      break;
    }
    case Architecture::kOlmoe: {
      c.qk_norm = QkNorm::kWholeProjection;
      ASSIGN_OR_RETURN(c.attention_bias, r.Bool("attention_bias", false));
      ASSIGN_OR_RETURN(c.clip_qkv, r.Double("clip_qkv", 0.0, 0.0, 1e9));
      break;
    }
    case Architecture::kDeepseekV3: {
      ASSIGN_OR_RETURN(c.attention_bias, r.Bool("attention_bias", false));
      break;
    }
    case Architecture::kMixtral:
      break;
    case Architecture::kGptOss: {
      ASSIGN_OR_RETURN(c.attention_bias, r.Bool("attention_bias", true));
      c.attention_out_bias = c.attention_bias;
      c.attention_sinks = true;
      c.router_bias = true;
      c.expert_bias = true;
      ASSIGN_OR_RETURN(c.swiglu_limit, r.Double("swiglu_limit", 7.0, 1e-6, 1e6));
      ASSIGN_OR_RETURN(c.swiglu_alpha, r.Double("swiglu_alpha", 1.702, 1e-6, 1e6));
      break;
    }
  }
  RETURN_IF_ERROR(ParseMoe(r, &c));

  ASSIGN_OR_RETURN(c.eos_token_ids, r.TokenIds("eos_token_id", c.vocab_size));
  ASSIGN_OR_RETURN(std::vector<int32_t> bos, r.TokenIds("bos_token_id", c.vocab_size));
  if (!bos.empty()) c.bos_token_id = bos[0];
  ASSIGN_OR_RETURN(std::vector<int32_t> pad, r.TokenIds("pad_token_id", c.vocab_size));
  if (!pad.empty()) c.pad_token_id = pad[0];

  ASSIGN_OR_RETURN(std::string dtype, r.String("torch_dtype", "float32"));
  if (dtype == "float32")
    c.torch_dtype = DType::kF32;
  else if (dtype == "bfloat16")
    c.torch_dtype = DType::kBF16;
  else if (dtype == "float16")
    c.torch_dtype = DType::kF16;
  else
    return r.Error("torch_dtype",
                   absl::StrCat("is '", dtype, "'; supported: float32, bfloat16, float16"));
  return c;
}

absl::StatusOr<ModelConfig> LoadModelConfig(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open model config"));
  std::stringstream buf;
  buf << in.rdbuf();
  return ParseModelConfig(buf.str(), path);
}

absl::Status ApplyGenerationConfig(const std::string& path, ModelConfig* config) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::OkStatus();  // optional file
  std::stringstream buf;
  buf << in.rdbuf();
  return ApplyGenerationConfigJson(buf.str(), path, config);
}

absl::Status ApplyGenerationConfigJson(absl::string_view text, absl::string_view source,
                                       ModelConfig* config) {
  json obj = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (obj.is_discarded() || !obj.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": not a JSON object"));
  }
  FieldReader r(obj, source);
  ASSIGN_OR_RETURN(std::vector<int32_t> eos, r.TokenIds("eos_token_id", config->vocab_size));
  if (!eos.empty()) config->eos_token_ids = eos;
  ASSIGN_OR_RETURN(std::vector<int32_t> bos, r.TokenIds("bos_token_id", config->vocab_size));
  if (!bos.empty()) config->bos_token_id = bos[0];
  ASSIGN_OR_RETURN(std::vector<int32_t> pad, r.TokenIds("pad_token_id", config->vocab_size));
  if (!pad.empty()) config->pad_token_id = pad[0];
  return absl::OkStatus();
}

absl::StatusOr<std::string> GenerationConfigFromModelConfig(absl::string_view config_json,
                                                            absl::string_view source) {
  const json config =
      json::parse(config_json.begin(), config_json.end(), nullptr, /*allow_exceptions=*/false);
  if (config.is_discarded() || !config.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": not a JSON object"));
  }
  // Only what differs from GenerationConfig's defaults is written; the token
  // ids default to None, so an absent or null id stays out.
  json out = json::object();
  out["_from_model_config"] = true;
  for (const char* key : {"bos_token_id", "eos_token_id", "pad_token_id"}) {
    auto it = config.find(key);
    if (it != config.end() && !it->is_null()) out[key] = *it;
  }
  return out.dump(2) + "\n";
}

}  // namespace expertd::models
