// Fills the public ModelInfo message from the loaded model and the options
// (memory placement). Conversion only: the numbers come from models/.
#ifndef EXPERTD_SERVER_MODEL_INFO_H_
#define EXPERTD_SERVER_MODEL_INFO_H_

#include "proto/expertd.pb.h"
#include "server/serving_state.h"

namespace expertd::server {

void FillModelInfo(const LoadedModel& model, const ServerOptions& options, v1::ModelInfo* info);

}  // namespace expertd::server

#endif  // EXPERTD_SERVER_MODEL_INFO_H_
