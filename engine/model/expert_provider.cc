#include "engine/model/expert_provider.h"

#include "models/checkpoint/tensor_names.h"

namespace expertd::engine {

ExpertTensorNames ExpertTensorNamesFor(const models::ModelConfig& config, int layer, int expert) {
  using models::ExpertProj;
  return ExpertTensorNames{models::ExpertWeightName(config, layer, expert, ExpertProj::kGate),
                           models::ExpertWeightName(config, layer, expert, ExpertProj::kUp),
                           models::ExpertWeightName(config, layer, expert, ExpertProj::kDown)};
}

}  // namespace expertd::engine
