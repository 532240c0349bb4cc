#include "server/jobs/job_state.h"

#include "absl/strings/str_cat.h"
#include "server/jobs/job_store.h"

namespace expertd::server::jobs {
namespace {

struct Transition {
  v1::JobStatus from;
  v1::JobStatus to;
};

constexpr Transition kTransitions[] = {
    {v1::JOB_STATUS_VALIDATING, v1::JOB_STATUS_QUEUED},
    {v1::JOB_STATUS_VALIDATING, v1::JOB_STATUS_FAILED},
    {v1::JOB_STATUS_VALIDATING, v1::JOB_STATUS_CANCELLED},
    {v1::JOB_STATUS_QUEUED, v1::JOB_STATUS_RUNNING},
    {v1::JOB_STATUS_QUEUED, v1::JOB_STATUS_FAILED},
    {v1::JOB_STATUS_QUEUED, v1::JOB_STATUS_CANCELLED},
    {v1::JOB_STATUS_RUNNING, v1::JOB_STATUS_SUCCEEDED},
    {v1::JOB_STATUS_RUNNING, v1::JOB_STATUS_FAILED},
    {v1::JOB_STATUS_RUNNING, v1::JOB_STATUS_CANCELLED},
    {v1::JOB_STATUS_RUNNING, v1::JOB_STATUS_QUEUED},
};

}  // namespace

bool IsTerminal(v1::JobStatus status) {
  return status == v1::JOB_STATUS_SUCCEEDED || status == v1::JOB_STATUS_FAILED ||
         status == v1::JOB_STATUS_CANCELLED;
}

bool IsAllowedTransition(v1::JobStatus from, v1::JobStatus to) {
  for (const Transition& t : kTransitions) {
    if (t.from == from && t.to == to) return true;
  }
  return false;
}

absl::Status CheckTransition(v1::JobStatus from, v1::JobStatus to) {
  if (IsAllowedTransition(from, to)) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat("job is ", JobStatusText(from), "; cannot become ", JobStatusText(to)));
}

}  // namespace expertd::server::jobs
