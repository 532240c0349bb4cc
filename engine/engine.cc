#include "engine/engine.h"

#include <algorithm>
#include <unordered_set>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "engine/backend/backend_factory.h"
#include "engine/kv/kv_cache.h"
#include "engine/model/model.h"
#include "engine/model/resident_expert_provider.h"
#include "engine/model/workspace.h"

namespace expertd::engine {

struct Engine::Impl {
  // Declaration order is destruction order reversed: the weights and the
  // backend outlive everything that points into them.
  std::shared_ptr<const WeightSource> weights;
  std::unique_ptr<Backend> backend;
  EngineOptions options;
  std::unique_ptr<Model> model;
  std::unique_ptr<ExpertProvider> experts;
  std::unique_ptr<KvCache> kv;
  std::unique_ptr<Workspace> ws;

  absl::Status Validate(const StepRequest& req) const;
  absl::Status Reserve(const StepRequest& req);
  void Rollback(const StepRequest& req);
  absl::Status Upload(const StepRequest& req, StepBatch* batch);
  absl::StatusOr<StepResult> Collect(const StepRequest& req, const StepBatch& batch,
                                     const std::vector<RowRouting>* routing);
};

absl::StatusOr<std::unique_ptr<Engine>> Engine::Create(
    std::shared_ptr<const models::Checkpoint> checkpoint, const EngineOptions& options) {
  return Create(std::make_shared<CheckpointWeightSource>(std::move(checkpoint)), options);
}

absl::StatusOr<std::unique_ptr<Engine>> Engine::Create(std::shared_ptr<const WeightSource> weights,
                                                       const EngineOptions& options) {
  RETURN_IF_ERROR(CheckSupported(weights->config()));
  if (options.max_step_tokens < 1)
    return absl::InvalidArgumentError("max_step_tokens must be >= 1");
  auto impl = std::make_unique<Impl>();
  impl->weights = std::move(weights);
  impl->options = options;
  ASSIGN_OR_RETURN(impl->backend, options.backend_factory ? options.backend_factory(options.backend)
                                                          : CreateBackend(options.backend));
  Backend* be = impl->backend.get();
  ASSIGN_OR_RETURN(impl->model, Model::Create(be, impl->weights.get()));
  impl->model->set_expert_gemm(options.expert_gemm);
  const models::ModelConfig& c = impl->model->config();
  ExpertProviderContext ctx{be, &c, impl->weights.get()};
  ExpertProviderFactory factory = options.expert_provider_factory ? options.expert_provider_factory
                                                                  : ResidentExpertProviderFactory();
  ASSIGN_OR_RETURN(impl->experts, factory(ctx));
  KvCacheOptions kv;
  kv.num_layers = c.num_hidden_layers;
  kv.k_width = impl->model->kv_widths().k;
  kv.v_width = impl->model->kv_widths().v;
  kv.block_size = options.kv_block_size;
  kv.budget_bytes = options.kv_cache_bytes;
  ASSIGN_OR_RETURN(impl->kv, KvCache::Create(be, kv));
  impl->ws = std::make_unique<Workspace>(be, impl->model->dims());
  return std::unique_ptr<Engine>(new Engine(std::move(impl)));
}

Engine::Engine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Engine::~Engine() = default;

const models::ModelConfig& Engine::config() const { return impl_->model->config(); }
Backend* Engine::backend() { return impl_->backend.get(); }

absl::Status Engine::AddSequence(SequenceId id) { return impl_->kv->AddSequence(id); }
absl::Status Engine::RemoveSequence(SequenceId id) { return impl_->kv->RemoveSequence(id); }
bool Engine::HasSequence(SequenceId id) const { return impl_->kv->HasSequence(id); }
absl::StatusOr<int64_t> Engine::SequenceLength(SequenceId id) const {
  return impl_->kv->Length(id);
}
absl::StatusOr<int64_t> Engine::BlocksNeeded(SequenceId id, int64_t n) const {
  return impl_->kv->BlocksNeeded(id, n);
}

KvCacheStats Engine::kv_cache_stats() const { return impl_->kv->stats(); }

absl::Status Engine::Impl::Validate(const StepRequest& req) const {
  if (req.chunks.empty()) return absl::InvalidArgumentError("step has no sequences");
  const models::ModelConfig& c = model->config();
  std::unordered_set<SequenceId> seen;
  int64_t total = 0;
  for (const SequenceChunk& ch : req.chunks) {
    if (!seen.insert(ch.id).second)
      return absl::InvalidArgumentError(absl::StrCat("sequence ", ch.id, " repeated"));
    ASSIGN_OR_RETURN(int64_t len, kv->Length(ch.id));
    if (ch.tokens.empty())
      return absl::InvalidArgumentError(absl::StrCat("sequence ", ch.id, ": no tokens"));
    for (int32_t t : ch.tokens) {
      if (t < 0 || t >= c.vocab_size) {
        return absl::InvalidArgumentError(absl::StrCat("sequence ", ch.id, ": token id ", t,
                                                       " outside the vocabulary [0, ", c.vocab_size,
                                                       ")"));
      }
    }
    const int64_t n = static_cast<int64_t>(ch.tokens.size());
    if (c.max_position_embeddings > 0 && len + n > c.max_position_embeddings) {
      return absl::InvalidArgumentError(absl::StrCat("sequence ", ch.id, ": ", len + n,
                                                     " tokens exceed max_position_embeddings ",
                                                     c.max_position_embeddings));
    }
    total += n;
  }
  if (total > options.max_step_tokens) {
    return absl::InvalidArgumentError(absl::StrCat(
        "step has ", total, " tokens, more than max_step_tokens ", options.max_step_tokens));
  }
  return absl::OkStatus();
}

absl::Status Engine::Impl::Reserve(const StepRequest& req) {
  for (size_t i = 0; i < req.chunks.size(); ++i) {
    absl::Status st =
        kv->Reserve(req.chunks[i].id, static_cast<int64_t>(req.chunks[i].tokens.size()));
    if (!st.ok()) {
      for (size_t j = 0; j < i; ++j) kv->Rollback(req.chunks[j].id);
      return st;
    }
  }
  return absl::OkStatus();
}

void Engine::Impl::Rollback(const StepRequest& req) {
  for (const SequenceChunk& ch : req.chunks) kv->Rollback(ch.id);
}

// Builds the step's token layout on the host and uploads it.
absl::Status Engine::Impl::Upload(const StepRequest& req, StepBatch* batch) {
  std::vector<int32_t> tokens, positions, seq_index, logit_index;
  std::vector<int64_t> slots;
  int64_t max_blocks = 1;
  for (const SequenceChunk& ch : req.chunks) {
    max_blocks = std::max<int64_t>(max_blocks, kv->BlockTable(ch.id).size());
  }
  std::vector<int32_t> tables(req.chunks.size() * max_blocks, 0);
  for (size_t s = 0; s < req.chunks.size(); ++s) {
    const SequenceChunk& ch = req.chunks[s];
    const int64_t len = *kv->Length(ch.id);
    const std::vector<int32_t>& table = kv->BlockTable(ch.id);
    std::copy(table.begin(), table.end(), tables.begin() + s * max_blocks);
    for (size_t i = 0; i < ch.tokens.size(); ++i) {
      if (ch.all_logits || i + 1 == ch.tokens.size())
        logit_index.push_back(static_cast<int32_t>(tokens.size()));
      tokens.push_back(ch.tokens[i]);
      positions.push_back(static_cast<int32_t>(len + i));
      seq_index.push_back(static_cast<int32_t>(s));
      slots.push_back(kv->Slot(ch.id, len + i));
    }
  }
  batch->rows = static_cast<int64_t>(tokens.size());
  batch->num_seqs = static_cast<int64_t>(req.chunks.size());
  batch->max_blocks = max_blocks;
  batch->logit_rows = static_cast<int64_t>(logit_index.size());
  RETURN_IF_ERROR(ws->Prepare(
      WorkspaceDims{batch->rows, batch->logit_rows, static_cast<int64_t>(tables.size())}));
  auto up = [&](Buf b, const void* src, size_t bytes) {
    return backend->CopyToDevice(ws->i32(b), src, bytes);
  };
  RETURN_IF_ERROR(up(Buf::kTokenIds, tokens.data(), tokens.size() * 4));
  RETURN_IF_ERROR(up(Buf::kPositions, positions.data(), positions.size() * 4));
  RETURN_IF_ERROR(up(Buf::kSeqIndex, seq_index.data(), seq_index.size() * 4));
  RETURN_IF_ERROR(up(Buf::kSlotMap, slots.data(), slots.size() * 8));
  RETURN_IF_ERROR(up(Buf::kBlockTables, tables.data(), tables.size() * 4));
  return up(Buf::kLogitIndex, logit_index.data(), logit_index.size() * 4);
}

absl::StatusOr<StepResult> Engine::Impl::Collect(const StepRequest& req, const StepBatch& batch,
                                                 const std::vector<RowRouting>* routing) {
  const int64_t vocab = model->config().vocab_size;
  std::vector<float> logits(batch.logit_rows * vocab);
  RETURN_IF_ERROR(
      backend->CopyToHost(logits.data(), ws->f(Buf::kLogits), logits.size() * sizeof(float)));
  StepResult result;
  int64_t logit_row = 0, token_row = 0;
  for (const SequenceChunk& ch : req.chunks) {
    const int64_t n = static_cast<int64_t>(ch.tokens.size());
    SequenceResult r;
    r.id = ch.id;
    r.logit_rows = ch.all_logits ? n : 1;
    r.logits.assign(logits.begin() + logit_row * vocab,
                    logits.begin() + (logit_row + r.logit_rows) * vocab);
    logit_row += r.logit_rows;
    if (routing != nullptr) {
      for (const RowRouting& layer : *routing) {
        LayerRouting lr;
        lr.top_k = static_cast<int>(layer.top_k);
        const int64_t k = layer.top_k;
        lr.expert_ids.assign(layer.ids.begin() + token_row * k,
                             layer.ids.begin() + (token_row + n) * k);
        lr.weights.assign(layer.weights.begin() + token_row * k,
                          layer.weights.begin() + (token_row + n) * k);
        r.routing.push_back(std::move(lr));
      }
    }
    token_row += n;
    result.sequences.push_back(std::move(r));
  }
  return result;
}

absl::StatusOr<StepResult> Engine::Step(const StepRequest& req) {
  Impl& s = *impl_;
  RETURN_IF_ERROR(s.Validate(req));
  RETURN_IF_ERROR(s.Reserve(req));
  StepBatch batch;
  std::vector<RowRouting> routing;
  absl::Status st = s.Upload(req, &batch);
  if (st.ok()) {
    s.experts->BeginStep(batch.rows);
    st = s.model->Forward(batch, s.ws.get(), s.kv.get(), s.experts.get(),
                          req.record_routing ? &routing : nullptr);
    s.experts->EndStep();
  }
  absl::StatusOr<StepResult> result =
      st.ok() ? s.Collect(req, batch, req.record_routing ? &routing : nullptr)
              : absl::StatusOr<StepResult>(st);
  if (!result.ok()) {
    s.Rollback(req);
    return result.status();
  }
  for (const SequenceChunk& ch : req.chunks)
    s.kv->Commit(ch.id, static_cast<int64_t>(ch.tokens.size()));
  return result;
}

}  // namespace expertd::engine
