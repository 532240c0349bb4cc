#include "server/model_info.h"

#include "absl/strings/str_cat.h"
#include "server/model_runtime.h"

namespace expertd::server {
namespace {

std::string DescribeRouter(const models::ModelConfig& c) {
  switch (c.router_scoring) {
    case models::RouterScoring::kSoftmax:
      return absl::StrCat("softmax top-", c.num_experts_per_tok,
                          c.norm_topk_prob ? ", renormalised" : "");
    case models::RouterScoring::kSigmoid:
      return absl::StrCat("sigmoid grouped top-", c.num_experts_per_tok, " (", c.topk_group, " of ",
                          c.n_group, " groups), scaled by ", c.routed_scaling_factor);
  }
  return "";
}

}  // namespace

void FillModelInfo(const LoadedModel& model, const ServerOptions& options, v1::ModelInfo* info) {
  const models::ModelConfig& c = model.config;
  info->set_model_name(model.name);
  info->set_architecture(models::ArchitectureName(c.architecture));
  info->set_model_type(c.model_type);
  info->set_vocab_size(c.vocab_size);
  info->set_hidden_size(c.hidden_size);
  info->set_num_layers(c.num_hidden_layers);
  info->set_num_attention_heads(c.num_attention_heads);
  info->set_num_key_value_heads(c.num_key_value_heads);
  info->set_head_dim(c.head_dim);
  info->set_max_context_length(c.max_position_embeddings);
  info->set_num_experts(c.num_experts);
  info->set_experts_per_token(c.num_experts_per_tok);
  info->set_num_moe_layers(c.num_moe_layers());
  info->set_expert_intermediate_size(c.moe_intermediate_size);
  info->set_shared_expert_intermediate_size(c.shared_expert_intermediate_size);
  info->set_dense_intermediate_size(c.intermediate_size);
  info->set_dtype(models::DTypeName(c.torch_dtype));
  info->set_total_params(c.TotalParams());
  info->set_active_params_per_token(c.ActiveParamsPerToken());
  info->set_expert_params(c.TotalExpertParams());
  for (int32_t id : c.eos_token_ids) info->add_eos_token_ids(id);
  if (c.bos_token_id >= 0) info->set_bos_token_id(c.bos_token_id);
  if (c.pad_token_id >= 0) info->set_pad_token_id(c.pad_token_id);
  info->set_router(DescribeRouter(c));
  if (model.runtime != nullptr) {
    for (const std::string& w : model.runtime->warnings()) info->add_warnings(w);
  }
  if (model.runtime != nullptr && model.runtime->tokenizer() != nullptr) {
    for (const models::SpecialToken& t : model.runtime->tokenizer()->special_tokens()) {
      v1::SpecialToken* st = info->add_special_tokens();
      st->set_id(static_cast<uint32_t>(t.id));
      st->set_content(t.content);
    }
  }

  v1::MemoryPlacement* p = info->mutable_placement();
  const uint64_t dtype_bytes = models::DTypeSize(c.torch_dtype);
  const uint64_t expert_bytes = static_cast<uint64_t>(c.TotalExpertParams()) * dtype_bytes;
  const std::string backend =
      model.runtime != nullptr ? model.runtime->backend_name() : options.backend;
  p->set_backend(backend);
  p->add_devices(backend == "cuda" ? "cuda:0" : "cpu");
  p->set_dense_weight_bytes((static_cast<uint64_t>(c.TotalParams()) - c.TotalExpertParams()) *
                            dtype_bytes);
  p->set_expert_weight_bytes(expert_bytes);
  const engine::ExpertStore* store =
      model.runtime != nullptr ? model.runtime->expert_store() : nullptr;
  info->set_matmul_activations(options.matmul_activations);
  if (store == nullptr) {  // every expert resident on the device
    p->set_device_expert_cache_bytes(expert_bytes);
    p->set_expert_cache_policy("resident");
    p->set_prefetch("none");
  } else {
    const engine::ExpertStoreStats st = store->stats();
    const int64_t experts = c.num_moe_layers() * c.num_experts;
    p->set_device_expert_cache_bytes(static_cast<uint64_t>(st.device_slots) * st.slot_bytes);
    p->set_host_expert_bytes(static_cast<uint64_t>(st.host_slots) * st.slot_bytes);
    // Experts beyond the host tier are read from the expert pack on disk.
    p->set_disk_tier(st.host_slots < experts);
    p->set_expert_cache_policy(st.policy);
    p->set_prefetch(st.prefetch);
    p->set_expert_storage(st.stored_format);
  }
  p->set_kv_cache_bytes(options.kv_cache_bytes);
  p->set_kv_block_size(options.kv_block_size);
}

}  // namespace expertd::server
