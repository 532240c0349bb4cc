// Decode ms/token on the CPU backend for a DeepSeek-V3-shaped model: every
// decoder layer at V3's full width (hidden 7168; MLA with q_lora_rank 1536,
// kv_lora_rank 512, 128 heads of 128 + 64 rope dims, v 128; 256 routed experts
// of width 2048, top-8 in 8 groups of which 4 are kept, one shared expert),
// a few layers, a small vocabulary, in bf16 or in block-scaled FP8 (128x128,
// as DeepSeek publishes it: attention and expert matrices FP8; embeddings,
// norms, router and lm_head bf16) -- against the memory-traffic floor: bytes
// of weights one token reads / a streaming read's bandwidth measured in the
// same run.
//
// 256 distinct experts per layer would not fit this machine's memory, so the
// routed experts alias a pool of --expert_pool distinct weight sets (expert e
// of layer l uses set (31 l + e) % pool). A token's 8 experts are then
// distinct memory (unless two alias the same set: counted once in the floor)
// and larger than the caches, so the traffic is the real one.
//
//   bazel build -c opt //engine/bench:deepseek_decode_benchmark
//   nice -n 19 bazel-bin/engine/bench/deepseek_decode_benchmark --layers=3 --tokens=8
#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/backend/cpu/thread_pool.h"
#include "engine/engine.h"
#include "engine/model/weight_source.h"
#include "models/checkpoint/expected_tensors.h"
#include "models/dtype/fp8_block.h"

namespace expertd::engine {
namespace {

struct Flags {
  int layers = 3;
  int tokens = 8;
  int pool = 24;
  int threads = 0;  // 0 = hardware concurrency
  std::string dtypes = "bf16,fp8";
};

std::string ConfigJson(const Flags& f, bool fp8) {
  return absl::StrCat(R"({
  "architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3",
  "vocab_size": 2048, "hidden_size": 7168, "intermediate_size": 18432,
  "moe_intermediate_size": 2048, "num_hidden_layers": )",
                      f.layers, R"(, "num_attention_heads": 128,
  "num_key_value_heads": 128, "max_position_embeddings": 163840, "q_lora_rank": 1536,
  "kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128,
  "n_routed_experts": 256, "num_experts_per_tok": 8, "n_group": 8, "topk_group": 4,
  "n_shared_experts": 1, "first_k_dense_replace": 0, "moe_layer_freq": 1,
  "norm_topk_prob": true, "routed_scaling_factor": 2.5, "scoring_func": "sigmoid",
  "topk_method": "noaux_tc", "rms_norm_eps": 1e-6, "rope_theta": 10000, "hidden_act": "silu",
  "rope_scaling": {"type": "yarn", "factor": 40, "original_max_position_embeddings": 4096,
                   "beta_fast": 32, "beta_slow": 1, "mscale": 1.0, "mscale_all_dim": 1.0},
  "attention_bias": false, "tie_word_embeddings": false, "bos_token_id": 0, "eos_token_id": 1,
  "torch_dtype": "bfloat16")",
                      fp8 ? R"(, "quantization_config": {"quant_method": "fp8", "fmt": "e4m3",
  "activation_scheme": "dynamic", "weight_block_size": [128, 128]})"
                          : "",
                      "}");
}

// Tensors by name; routed experts share storage through the pool.
class BenchWeights : public WeightSource {
 public:
  struct Tensor {
    models::DType dtype;
    std::vector<int64_t> shape;
    std::shared_ptr<std::vector<uint8_t>> bytes;
  };
  explicit BenchWeights(models::ModelConfig c) : config_(std::move(c)) {}
  const models::ModelConfig& config() const override { return config_; }
  bool Has(const std::string& name) const override { return tensors_.count(name) > 0; }
  absl::StatusOr<models::TensorView> Get(const std::string& name) const override {
    auto it = tensors_.find(name);
    if (it == tensors_.end()) return absl::NotFoundError(name);
    models::TensorView v;
    v.name = name;
    v.dtype = it->second.dtype;
    v.shape = it->second.shape;
    v.data = it->second.bytes->data();
    v.nbytes = it->second.bytes->size();
    v.file = "<memory>";
    return v;
  }
  std::map<std::string, Tensor> tensors_;

 private:
  models::ModelConfig config_;
};

// Deterministic uniform values with the variance of N(0, scale^2), fast.
void Fill(uint64_t seed, float scale, std::vector<float>* out) {
  uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
  const float a = scale * std::sqrt(3.0f) / 2147483648.0f;
  for (float& v : *out) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    v = static_cast<float>(static_cast<int32_t>(x >> 32)) * a;
  }
}

bool Quantized(const models::ExpectedTensor& t) {
  return t.shape.size() == 2 && (t.role == models::TensorRole::kLinear);
}

// One tensor (and its scale tensor when FP8) from deterministic values.
void AddTensor(BenchWeights* w, const models::ExpectedTensor& t, bool fp8, uint64_t seed,
               std::map<std::string, BenchWeights::Tensor>* cache, const std::string& key) {
  if (!key.empty() && cache->count(key)) {
    w->tensors_[t.name] = (*cache)[key];
    if (cache->count(key + "#s")) w->tensors_[t.name + "_scale_inv"] = (*cache)[key + "#s"];
    return;
  }
  int64_t n = 1;
  for (int64_t d : t.shape) n *= d;
  std::vector<float> v(n);
  if (t.role == models::TensorRole::kNorm) {
    std::fill(v.begin(), v.end(), 1.0f);
  } else if (t.role == models::TensorRole::kRouterBias) {
    std::fill(v.begin(), v.end(), 0.0f);
  } else {
    Fill(seed, t.role == models::TensorRole::kEmbedding ? 1.0f : 1.0f / std::sqrt(t.shape.back()),
         &v);
  }
  BenchWeights::Tensor out{models::DType::kBF16, t.shape, std::make_shared<std::vector<uint8_t>>()};
  if (fp8 && Quantized(t)) {
    const models::Fp8BlockShape s{t.shape[0], t.shape[1], 128, 128};
    out.dtype = models::DType::kF8E4M3;
    out.bytes->resize(n);
    BenchWeights::Tensor sc{
        models::DType::kF32,
        {s.scale_rows(), s.scale_cols()},
        std::make_shared<std::vector<uint8_t>>(s.scale_rows() * s.scale_cols() * 4)};
    models::QuantizeFp8Block(s, v.data(), out.bytes->data(),
                             reinterpret_cast<float*>(sc.bytes->data()));
    w->tensors_[t.name + "_scale_inv"] = sc;
    if (!key.empty()) (*cache)[key + "#s"] = sc;
  } else {
    if (t.role == models::TensorRole::kRouterBias) out.dtype = models::DType::kF32;
    out.bytes->resize(n * models::DTypeSize(out.dtype));
    models::ConvertFromF32(out.dtype, v.data(), out.bytes->data(), n);
  }
  w->tensors_[t.name] = out;
  if (!key.empty()) (*cache)[key] = out;
}

std::shared_ptr<BenchWeights> MakeWeights(const Flags& f, bool fp8) {
  auto config = models::ParseModelConfig(ConfigJson(f, fp8), "bench config");
  if (!config.ok()) {
    std::fprintf(stderr, "%s\n", config.status().ToString().c_str());
    std::exit(1);
  }
  auto w = std::make_shared<BenchWeights>(*config);
  std::map<std::string, BenchWeights::Tensor> pool;
  uint64_t seed = 1;
  for (const models::ExpectedTensor& t : models::ExpectedTensors(*config)) {
    std::string key;
    if (t.expert >= 0) {
      const int64_t set = (31 * t.layer + t.expert) % f.pool;
      key = absl::StrCat(set, ":", t.name.substr(t.name.rfind('.', t.name.size() - 8)));
    }
    AddTensor(w.get(), t, fp8, seed++, &pool, key);
  }
  return w;
}

// Best-of-5 streaming read over 1 GiB split over `threads` (GB/s).
double ReadBandwidth(int threads) {
  const int64_t n = 256ll << 20;  // floats
  float* a = static_cast<float*>(std::aligned_alloc(64, n * 4));
  ThreadPool pool(threads);
  pool.ParallelFor(n / 8, 1, [&](int64_t s, int64_t e) {
    for (int64_t i = s * 8; i < e * 8; ++i) a[i] = 1.0f;
  });
  std::vector<float> sums(threads * 16, 0.0f);
  double best = 1e30;
  for (int rep = 0; rep < 5; ++rep) {
    auto t0 = std::chrono::steady_clock::now();
    pool.ParallelFor(n / 8, 1024, [&](int64_t s, int64_t e) {
      __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
      int64_t i = s;
      for (; i + 1 < e; i += 2) {
        acc0 = _mm256_add_ps(acc0, _mm256_load_ps(a + i * 8));
        acc1 = _mm256_add_ps(acc1, _mm256_load_ps(a + i * 8 + 8));
      }
      alignas(32) float out[8];
      _mm256_store_ps(out, _mm256_add_ps(acc0, acc1));
      sums[(s * threads / (n / 8)) * 16] += out[0];
    });
    best = std::min(best,
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::free(a);
  volatile float sink = sums[0];
  (void)sink;
  return n * 4.0 / best / 1e9;
}

// Bytes of weights one decode token reads: everything but the routed experts
// and the embedding table, plus one embedding row and the chosen experts'
// distinct weight sets (from the routing the engine reports).
uint64_t BytesTouched(const BenchWeights& w, const std::vector<LayerRouting>& routing) {
  const models::ModelConfig& c = w.config();
  uint64_t bytes = 0;
  for (const auto& [name, t] : w.tensors_) {
    if (name.find(".mlp.experts.") != std::string::npos) continue;
    if (name == "model.embed_tokens.weight") {
      bytes += t.bytes->size() / c.vocab_size;
      continue;
    }
    bytes += t.bytes->size();
  }
  std::set<const void*> seen;
  for (int64_t l = 0; l < static_cast<int64_t>(routing.size()); ++l) {
    for (const int32_t e : routing[l].expert_ids) {
      for (const char* proj : {"gate_proj", "up_proj", "down_proj"}) {
        const std::string n =
            absl::StrCat("model.layers.", l, ".mlp.experts.", e, ".", proj, ".weight");
        for (const std::string& name : {n, n + "_scale_inv"}) {
          auto it = w.tensors_.find(name);
          if (it != w.tensors_.end() && seen.insert(it->second.bytes->data()).second)
            bytes += it->second.bytes->size();
        }
      }
    }
  }
  return bytes;
}

void RunOne(const Flags& f, bool fp8, double read_gbps, int threads) {
  auto t0 = std::chrono::steady_clock::now();
  std::shared_ptr<BenchWeights> weights = MakeWeights(f, fp8);
  EngineOptions opts;
  opts.backend.threads = threads;
  opts.kv_cache_bytes = 256ull << 20;
  auto engine = Engine::Create(weights, opts);
  if (!engine.ok()) {
    std::fprintf(stderr, "engine: %s\n", engine.status().ToString().c_str());
    std::exit(1);
  }
  const double build_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  (void)(*engine)->AddSequence(1);
  auto r = (*engine)->Step(StepRequest{{SequenceChunk{1, {5, 17, 300, 41}}}});
  std::vector<double> ms;
  uint64_t bytes_sum = 0;
  for (int i = 0; i < f.tokens; ++i) {
    const int32_t next = static_cast<int32_t>(
        std::max_element(r->sequences[0].logits.begin(), r->sequences[0].logits.end()) -
        r->sequences[0].logits.begin());
    auto s0 = std::chrono::steady_clock::now();
    r = (*engine)->Step(StepRequest{{SequenceChunk{1, {next}}}, /*record_routing=*/true});
    ms.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - s0).count());
    if (!r.ok()) {
      std::fprintf(stderr, "step: %s\n", r.status().ToString().c_str());
      std::exit(1);
    }
    bytes_sum += BytesTouched(*weights, r->sequences[0].routing);
  }
  std::vector<double> sorted = ms;
  std::sort(sorted.begin(), sorted.end());
  const double median = sorted[sorted.size() / 2];
  const double bytes = static_cast<double>(bytes_sum) / f.tokens;
  const double floor_ms = bytes / (read_gbps * 1e9) * 1e3;
  std::printf(
      "%-5s layers=%d threads=%d  ms/token median %.1f (min %.1f, max %.1f)  weight bytes/token "
      "%.1f MB  read floor %.1f ms  x_floor %.2f  weight GB/s %.2f  (build %.0f s)\n",
      fp8 ? "fp8" : "bf16", f.layers, threads, median, sorted.front(), sorted.back(), bytes / 1e6,
      floor_ms, median / floor_ms, bytes / (median / 1e3) / 1e9, build_s);
  std::fflush(stdout);
}

}  // namespace
}  // namespace expertd::engine

int main(int argc, char** argv) {
  expertd::engine::Flags f;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto val = [&](const char* name) -> const char* {
      const std::string p = std::string("--") + name + "=";
      return a.rfind(p, 0) == 0 ? argv[i] + p.size() : nullptr;
    };
    if (const char* v = val("layers"))
      f.layers = std::atoi(v);
    else if (const char* v = val("tokens"))
      f.tokens = std::atoi(v);
    else if (const char* v = val("expert_pool"))
      f.pool = std::atoi(v);
    else if (const char* v = val("threads"))
      f.threads = std::atoi(v);
    else if (const char* v = val("dtypes"))
      f.dtypes = v;
    else {
      std::fprintf(stderr,
                   "usage: %s [--layers=N] [--tokens=N] [--expert_pool=N] [--threads=N] "
                   "[--dtypes=bf16,fp8]\n",
                   argv[0]);
      return 2;
    }
  }
  if (f.layers < 1 || f.tokens < 1 || f.pool < 8) {
    std::fprintf(stderr, "--layers, --tokens >= 1 and --expert_pool >= 8 required\n");
    return 2;
  }
  const int threads = f.threads > 0 ? f.threads : std::max(1u, std::thread::hardware_concurrency());
  const double read_gbps = expertd::engine::ReadBandwidth(threads);
  std::printf("streaming read bandwidth (%d threads): %.2f GB/s\n", threads, read_gbps);
  for (const std::string d : {"bf16", "fp8"}) {
    if (f.dtypes.find(d) == std::string::npos) continue;
    expertd::engine::RunOne(f, d == "fp8", read_gbps, threads);
  }
  return 0;
}
