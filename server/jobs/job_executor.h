// The seam between the job system (records, files, events, the job thread)
// and the code that trains. The job manager owns the state machine and the
// SQLite records; a JobExecutor validates and runs one job and reports
// through a JobSink. Tests drive the manager with a fake executor and the
// executor with a fake sink.
#ifndef EXPERTD_SERVER_JOBS_JOB_EXECUTOR_H_
#define EXPERTD_SERVER_JOBS_JOB_EXECUTOR_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/cord.h"
#include "absl/strings/string_view.h"
#include "proto/expertd.pb.h"

namespace expertd::server::jobs {

// A checkpoint directory written by the executor: a Hugging Face model
// directory (config.json, model.safetensors, tokenizer files,
// generation_config.json) plus the training state needed to resume.
struct CheckpointRecord {
  std::string id;          // "ckpt-<job id>-<step>", unique
  std::string job_id;
  std::string path;        // absolute directory path
  uint64_t step = 0;       // optimizer steps done when it was written
  std::string model_name;  // served name once activated
};

// One progress report; maps onto v1::JobProgress plus the extra event fields.
struct JobProgressUpdate {
  uint64_t step = 0;
  uint64_t total_steps = 0;
  double epoch = 0.0;
  double train_loss = 0.0;
  std::optional<double> validation_loss;
  double learning_rate = 0.0;
  double grad_norm = 0.0;
  double tokens_per_second = 0.0;
  uint64_t trained_tokens = 0;
  // Tokens routed to each expert in the step, per MoE layer.
  std::vector<std::vector<uint64_t>> expert_load;
  uint64_t memory_bytes = 0;  // training memory in use (weights, state, activations)
};

// Implemented by the job manager; called from the executor's thread.
class JobSink {
 public:
  virtual ~JobSink() = default;
  // A human-readable event (e.g. "validated 1200 examples", "resumed at step 40").
  virtual void Event(v1::FineTuneJobEvent::Level level, std::string message) = 0;
  virtual void Progress(const JobProgressUpdate& progress) = 0;
  // The checkpoint at record.path is complete and durable (written to a temp
  // name, fsynced, renamed). The manager records it in the database; only
  // recorded checkpoints are resumed from. An error here fails the job.
  virtual absl::Status CheckpointWritten(const CheckpointRecord& record) = 0;
  // True once the operator cancelled the job or the daemon is shutting down;
  // the executor returns (absl::CancelledError) at the next step boundary.
  virtual bool StopRequested() const = 0;
};

// What the manager hands the executor for one job.
struct JobRun {
  std::string job_id;
  v1::FineTuneJobSpec spec;
  std::string training_file_path;    // resolved inside --data_dir
  std::string validation_file_path;  // empty: none
  std::string job_dir;               // --data_dir/jobs/<job id>: the executor's to write
  // The latest recorded checkpoint of this job, when resuming after a restart.
  std::optional<CheckpointRecord> resume_from;
};

class JobExecutor {
 public:
  virtual ~JobExecutor() = default;
  // Validate and Run are called from different threads and may overlap (a
  // job is validated while another trains): both must be thread-safe.
  //
  // Checks the spec against the served model and reads the whole dataset.
  // Errors carry a job error code (WithJobErrorCode), e.g.
  // "invalid_training_file" with the first bad line numbers in the message.
  virtual absl::Status Validate(const JobRun& run) = 0;
  // Trains to the end. Returns OK (succeeded), CancelledError (StopRequested),
  // or an error with a job error code ("out_of_memory", "disk_full",
  // "checkpoint_write_failed", ...). Never crashes the daemon.
  virtual absl::Status Run(const JobRun& run, JobSink* sink) = 0;
};

// Job error codes travel on the status as a payload, so a plain absl::Status
// can cross the seam.
inline constexpr absl::string_view kJobErrorCodeUrl = "type.expertd/job_error_code";

inline absl::Status WithJobErrorCode(absl::Status status, absl::string_view code) {
  status.SetPayload(kJobErrorCodeUrl, absl::Cord(code));
  return status;
}

// The code set by WithJobErrorCode, else "internal_error" for a non-OK status.
inline std::string JobErrorCodeOf(const absl::Status& status) {
  if (status.ok()) return "";
  auto code = status.GetPayload(kJobErrorCodeUrl);  // absl::optional in this Abseil
  return code.has_value() ? std::string(*code) : "internal_error";
}

// Finds checkpoints for ActivateCheckpoint; implemented by the job store.
class CheckpointCatalog {
 public:
  virtual ~CheckpointCatalog() = default;
  // Exactly one of job_id (its latest checkpoint) or checkpoint_id is set.
  // NotFound for an unknown job/checkpoint or a job without a checkpoint.
  virtual absl::StatusOr<CheckpointRecord> Resolve(absl::string_view job_id,
                                                   absl::string_view checkpoint_id) = 0;
  // Resolve, and pins the checkpoint in the same step: checkpoint retention
  // (keep_last_checkpoints) never deletes a pinned checkpoint. The activator
  // pins the checkpoint it loads and keeps the pin while it is served; every
  // pin is released by one Unpin.
  virtual absl::StatusOr<CheckpointRecord> ResolveAndPin(absl::string_view job_id,
                                                         absl::string_view checkpoint_id) {
    return Resolve(job_id, checkpoint_id);
  }
  // Releases one pin of `checkpoint_id`; no-op for one without pins.
  virtual void Unpin(absl::string_view checkpoint_id) {}
};

}  // namespace expertd::server::jobs

#endif  // EXPERTD_SERVER_JOBS_JOB_EXECUTOR_H_
