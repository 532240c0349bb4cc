// A FineTuneJobSpec checked against the served model and resolved into the
// training engine's options, with the defaults the proto comments promise.
// Errors carry a job error code (job_executor.h WithJobErrorCode):
//   "invalid_spec"          a field out of range, named in the message
//   "unsupported_model"     an architecture the trainer cannot train
#ifndef EXPERTD_SERVER_JOBS_TRAINING_SPEC_H_
#define EXPERTD_SERVER_JOBS_TRAINING_SPEC_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "engine/train/lora.h"
#include "engine/train/trainer.h"
#include "models/config/model_config.h"
#include "nlohmann/json.hpp"
#include "proto/expertd.pb.h"

namespace expertd::server::jobs {

enum class JobScope { kFull, kExperts, kPregate, kLora };

struct ResolvedTrainingSpec {
  JobScope scope = JobScope::kFull;
  train::TrainOptions train;  // lr, weight decay, clipping, schedule, warmup (total_steps: later)
  train::LoraOptions lora;    // kLora only
  int64_t epochs = 1;
  int64_t batch_size = 8;  // sequences per micro-batch
  int64_t accumulation = 1;
  int64_t max_seq_len = 0;
  int64_t checkpoint_every_steps = 0;  // 0: once per epoch
  uint64_t seed = 0;
};

// `job_id` seeds runs whose spec has no seed (stable across restarts).
absl::StatusOr<ResolvedTrainingSpec> ResolveTrainingSpec(const v1::FineTuneJobSpec& spec,
                                                         const models::ModelConfig& config,
                                                         const std::string& job_id);

// What must match for a checkpoint to resume this spec bitwise.
nlohmann::json ResumeFingerprint(const ResolvedTrainingSpec& spec);

}  // namespace expertd::server::jobs

#endif  // EXPERTD_SERVER_JOBS_TRAINING_SPEC_H_
