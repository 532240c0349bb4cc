// The job state machine, as a transition table:
//
//   validating -> queued | failed | cancelled
//   queued     -> running | failed | cancelled
//   running    -> succeeded | failed | cancelled
//              -> queued     (daemon shutdown or restart: resumes later)
//   succeeded, failed, cancelled: terminal
//
// The manager changes a job's status only through CheckTransition.
#ifndef EXPERTD_SERVER_JOBS_JOB_STATE_H_
#define EXPERTD_SERVER_JOBS_JOB_STATE_H_

#include "absl/status/status.h"
#include "proto/expertd.pb.h"

namespace expertd::server::jobs {

bool IsTerminal(v1::JobStatus status);
bool IsAllowedTransition(v1::JobStatus from, v1::JobStatus to);
// OK, or FailedPrecondition naming both states ("job is succeeded; cannot
// become running").
absl::Status CheckTransition(v1::JobStatus from, v1::JobStatus to);

}  // namespace expertd::server::jobs

#endif  // EXPERTD_SERVER_JOBS_JOB_STATE_H_
