#include "server/model_runtime.h"

#include <sys/stat.h>

#include <algorithm>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "base/log.h"
#include "base/status_macros.h"
#include "engine/backend/backend_factory.h"
#include "engine/parallel/multi_device_experts.h"
#include "engine/parallel/parallel_flags.h"

namespace expertd::server {
namespace {

bool FileExists(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// Adapts the tokenizer's streaming detokenizer to the scheduler's interface.
class DetokenizerStreamer final : public TextStreamer {
 public:
  DetokenizerStreamer(const models::Tokenizer* tokenizer, bool skip_special)
      : detok_(tokenizer, skip_special) {}
  std::string Push(int32_t id) override {
    absl::StatusOr<std::string> s = detok_.Push(id);
    return s.ok() ? *std::move(s) : std::string();  // ids come from the model: always valid
  }
  std::string Flush() override { return detok_.Flush(); }

 private:
  models::StreamingDetokenizer detok_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<ModelRuntime>> ModelRuntime::Load(const ServerOptions& o,
                                                                 SchedulerListener* listener,
                                                                 Clock* clock) {
  std::unique_ptr<ModelRuntime> rt(new ModelRuntime());
  ASSIGN_OR_RETURN(std::unique_ptr<models::Checkpoint> checkpoint,
                   models::Checkpoint::Open(o.model_dir));
  rt->checkpoint_ = std::move(checkpoint);
  RETURN_IF_ERROR(rt->checkpoint_->ValidateAgainstConfig());
  const models::ModelConfig& c = rt->checkpoint_->config();

  const std::string tokenizer_path = o.model_dir + "/tokenizer.json";
  if (FileExists(tokenizer_path)) {
    auto tok = models::Tokenizer::LoadFromFile(tokenizer_path);
    if (!tok.ok()) {
      return absl::Status(tok.status().code(),
                          absl::StrCat(tokenizer_path, ": ", tok.status().message()));
    }
    rt->tokenizer_ = *std::move(tok);
  } else {
    EXPERTD_LOG(Warn, "no tokenizer.json: text prompts, Tokenize and Detokenize are unavailable")
        .With("model_dir", o.model_dir);
  }

  ASSIGN_OR_RETURN(rt->chat_formatter_, LoadChatFormatter(o));

  engine::EngineOptions eo;
  eo.backend.name = engine::ResolveBackendName(o.backend);  // auto: CUDA when a GPU is usable
  eo.backend.threads = static_cast<int>(o.threads);
  // Validated by ParseOptions; the backend checks the CPU can run it.
  engine::ParseMatmulActivations(o.matmul_activations, &eo.backend.matmul_activations);
  eo.kv_cache_bytes = o.kv_cache_bytes;
  eo.kv_block_size = o.kv_block_size;
  eo.max_step_tokens = o.max_batch_tokens;
  eo.backend.device_memory_limit = o.device_memory_bytes;
  rt->backend_name_ = eo.backend.name;
  ASSIGN_OR_RETURN(std::optional<engine::ExpertStoreOptions> offload,
                   engine::ExpertStoreOptionsFromFlags(o.experts));
  if (offload.has_value()) {
    const engine::ExpertStoreOptions store_options = *offload;
    engine::ExpertStore** slot = &rt->expert_store_;
    eo.expert_provider_factory = [store_options, slot](const engine::ExpertProviderContext& context)
        -> absl::StatusOr<std::unique_ptr<engine::ExpertProvider>> {
      ASSIGN_OR_RETURN(std::unique_ptr<engine::ExpertStore> store,
                       engine::ExpertStore::Create(context, store_options));
      *slot = store.get();
      return std::unique_ptr<engine::ExpertProvider>(std::move(store));
    };
  }
  ASSIGN_OR_RETURN(std::optional<engine::parallel::MultiDeviceOptions> multi,
                   engine::parallel::MultiDeviceOptionsFromFlags(o.parallel, o.threads));
  ASSIGN_OR_RETURN(eo.expert_gemm, engine::parallel::ExpertGemmFromFlags(o.parallel));
  if (multi.has_value()) {
    multi->offload = offload;  // each device pages only its shards
    if (multi->offload.has_value()) {
      if (multi->counters == nullptr)
        multi->counters = std::make_shared<engine::parallel::MultiDeviceCounters>();
      rt->device_counters_ = multi->counters;
    }
    multi->device_backend.matmul_activations = eo.backend.matmul_activations;
    eo.expert_provider_factory = engine::parallel::MultiDeviceExpertsFactory(*multi);
    EXPERTD_LOG(Info, "multi-device experts")
        .With("devices", multi->devices)
        .With("moe_parallel", engine::parallel::MoeParallelismName(multi->mode))
        .With("capacity_factor", multi->capacity_factor)
        .With("expert_offload", multi->offload.has_value());
  }
  ASSIGN_OR_RETURN(rt->engine_, engine::Engine::Create(rt->checkpoint_, eo));
  if (rt->expert_store_ != nullptr) {
    const engine::ExpertStoreStats st = rt->expert_store_->stats();
    EXPERTD_LOG(Info, "expert offloading")
        .With("policy", st.policy)
        .With("prefetch", st.prefetch)
        .With("device_slots", st.device_slots)
        .With("host_slots", st.host_slots)
        .With("expert_bytes", st.expert_bytes)
        .With("pack", st.pack_path)
        .With("pack_built", st.pack_built)
        .With("direct_io", st.direct_io);
  }

  SchedulerOptions so;
  so.max_batch_tokens = o.max_batch_tokens;
  so.max_running = o.max_running_requests;
  so.max_queue = o.max_queue_length;
  so.eos_token_ids = c.eos_token_ids;
  so.max_context = c.max_position_embeddings;
  so.clock = clock;
  TextStreamerFactory text;
  if (rt->tokenizer_ != nullptr) {
    const models::Tokenizer* tok = rt->tokenizer_.get();
    text = [tok](bool skip_special) {
      return std::make_unique<DetokenizerStreamer>(tok, skip_special);
    };
  }
  rt->scheduler_ = std::make_unique<Scheduler>(rt->engine_.get(), std::move(text), so, listener);
  rt->scheduler_->Start();
  const int64_t kv_tokens = rt->scheduler_->kv_capacity_tokens();
  if (kv_tokens < c.max_position_embeddings) {
    rt->warnings_.push_back(absl::StrCat(
        "the KV cache (--kv_cache_bytes=", o.kv_cache_bytes, ") holds ", kv_tokens,
        " tokens, less than one full-context sequence (", c.max_position_embeddings,
        "): requests whose prompt + max_new_tokens exceed ", kv_tokens, " are refused"));
    EXPERTD_LOG(Warn, "KV cache cannot hold one full-context sequence")
        .With("kv_cache_bytes", o.kv_cache_bytes)
        .With("kv_cache_tokens", kv_tokens)
        .With("max_context", c.max_position_embeddings);
  }

  rt->limits_.model_name = o.model_name;
  rt->limits_.vocab_size = c.vocab_size;
  rt->limits_.max_context = c.max_position_embeddings;
  if (rt->tokenizer_ != nullptr) {
    // No token covers more bytes of text than its vocabulary entry has (byte
    // -level and SentencePiece entries spell each byte in >= 1 byte), so a
    // longer text cannot fit the context: refused before tokenizing.
    size_t longest = 1;
    for (int32_t id = 0; id < rt->tokenizer_->vocab_size(); ++id) {
      if (const std::string* t = rt->tokenizer_->IdToToken(id))
        longest = std::max(longest, t->size());
    }
    rt->limits_.max_prompt_bytes = static_cast<size_t>(c.max_position_embeddings) * longest;
  }
  return rt;
}

ModelRuntime::~ModelRuntime() {
  if (scheduler_ != nullptr) scheduler_->Drain(absl::ZeroDuration());
}

absl::StatusOr<std::shared_ptr<const chat_template::ChatFormatter>> ModelRuntime::LoadChatFormatter(
    const ServerOptions& o) {
  // A template we cannot render fails the load here, naming the construct,
  // rather than every chat request later.
  absl::StatusOr<chat_template::ChatFormatter> formatter =
      chat_template::ChatFormatter::FromModelDir(o.model_dir);
  if (absl::IsNotFound(formatter.status())) {
    formatter = chat_template::ChatFormatter::FromTokenizerConfig("{}");
  }
  if (!formatter.ok()) return formatter.status();
  if (!o.chat_template.empty()) {
    std::ifstream in(o.chat_template, std::ios::binary);
    if (!in)
      return absl::NotFoundError(
          absl::StrCat("--chat_template: cannot read '", o.chat_template, "'"));
    std::stringstream source;
    source << in.rdbuf();
    absl::Status s = formatter->OverrideTemplate(source.str());
    if (!s.ok()) return absl::Status(s.code(), absl::StrCat(o.chat_template, ": ", s.message()));
  }
  if (!formatter->has_template()) {
    EXPERTD_LOG(Warn, "no chat template: /v1/chat/completions is unavailable (see --chat_template)")
        .With("model_dir", o.model_dir);
  }
  return std::make_shared<const chat_template::ChatFormatter>(*std::move(formatter));
}

TextTokenizer ModelRuntime::text_tokenizer() const {
  if (tokenizer_ == nullptr) return nullptr;
  const models::Tokenizer* tok = tokenizer_.get();
  return
      [tok](const std::string& text, bool add_special) { return tok->Encode(text, add_special); };
}

}  // namespace expertd::server
