// The JobExecutor that fine-tunes the served model: it maps a FineTuneJobSpec
// onto engine/train (datasets, TrainModel, Trainer, checkpoints) and reports
// through the JobSink. No math here.
//
// Validate: the spec (training_spec.h) and every line of the training and
// validation files (code "invalid_training_file", naming the file and the
// first bad lines).
// Run: trains epochs x steps. Each step reports Progress (loss, lr, grad
// norm, tokens/s, trained tokens, training memory; expert load per MoE layer
// on the first step and every 10th, from a forward-only routing trace of the
// step's first micro-batch). Checkpoints go to
// <job_dir>/checkpoints/step-<N> every checkpoint_every_steps (else at each
// epoch end) and after the last step, each reported with CheckpointWritten
// once complete and durable; the validation loss is computed (and reported)
// with each checkpoint. StopRequested is honoured between steps
// (CancelledError). A run with resume_from continues from that checkpoint and
// ends bitwise where the uninterrupted run would (same spec, same thread cap).
// PREGATE jobs (200 distillation steps per epoch) checkpoint the heads at
// the same cadence, in those steps, and honour StopRequested between steps;
// a resumed PREGATE job restarts from step 0 (deterministic: bitwise the
// uninterrupted result) without writing its recorded checkpoints again.
// Error codes: invalid_spec, unsupported_model,
// invalid_training_file, out_of_memory, disk_full, checkpoint_write_failed,
// checkpoint_mismatch (resume_from was written by a different spec),
// invalid_model (the served model directory cannot be trained).
#ifndef EXPERTD_SERVER_JOBS_TRAINING_EXECUTOR_H_
#define EXPERTD_SERVER_JOBS_TRAINING_EXECUTOR_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "base/clock.h"
#include "base/env.h"
#include "engine/train/dataset.h"
#include "models/chat_template/chat_template.h"
#include "server/jobs/job_executor.h"

namespace expertd::server::jobs {

struct TrainingExecutorOptions {
  std::string model_dir;   // the served model (config.json, weights, tokenizer files)
  std::string model_name;  // its served name; fine-tunes are "<name>:ft-<suffix or job id>"
  int max_threads = 1;     // the training thread cap (serving keeps the rest)
  // Refuse (out_of_memory) a job whose weights + gradients + AdamW state
  // would exceed this; 0: no limit.
  uint64_t memory_limit_bytes = 0;
  // The device memory a job trains in (TrainSchedule::device_memory_bytes):
  // with schedule.offload_experts the experts move to the host when the
  // weights, gradients and AdamW state exceed it. 0: unlimited.
  uint64_t device_memory_bytes = 0;
  Env* env = nullptr;      // checkpoints and datasets; null: Env::Default()
  Clock* clock = nullptr;  // tokens/s; null: RealClock
};

// Fails (code "invalid_model") when model_dir has no readable config.json, or
// a tokenizer / chat template that does not load.
absl::StatusOr<std::unique_ptr<JobExecutor>> NewTrainingExecutor(
    const TrainingExecutorOptions& options);

// Renders chats for the dataset reader with a model's chat template.
train::ChatRenderer MakeChatRenderer(const chat_template::ChatFormatter* formatter);

}  // namespace expertd::server::jobs

#endif  // EXPERTD_SERVER_JOBS_TRAINING_EXECUTOR_H_
