// Checks a FineTuneJobSpec before it becomes a job: every value in range,
// every enum known, LoRA settings only with the LoRA scope. The files are
// resolved separately (FileStore::Resolve), the model-dependent checks are
// the executor's (JobExecutor::Validate).
#ifndef EXPERTD_SERVER_JOBS_JOB_SPEC_H_
#define EXPERTD_SERVER_JOBS_JOB_SPEC_H_

#include "absl/status/status.h"
#include "proto/expertd.pb.h"

namespace expertd::server::jobs {

// OK, or InvalidArgument whose message starts with the field's path
// ("spec.hyperparameters.learning_rate: must be > 0, got -1").
absl::Status ValidateJobSpec(const v1::FineTuneJobSpec& spec);

}  // namespace expertd::server::jobs

#endif  // EXPERTD_SERVER_JOBS_JOB_SPEC_H_
