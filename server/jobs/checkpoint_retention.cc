// JobManager's checkpoint retention (see job_manager.h): a job keeps its
// newest keep_last_checkpoints checkpoints. Each older one is deleted record
// first (with an event, in one transaction), then its directory: a crash
// between the two leaves an unreferenced directory, never a record without
// its files. The directory is renamed to "<dir>.deleted" before it is
// removed, so a half-removed tree is never taken for a checkpoint; a crash
// during the removal leaves that "<dir>.deleted", which the job's next
// retention pass removes (only this code names directories so).
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/log.h"
#include "base/status_macros.h"
#include "server/jobs/job_manager.h"

namespace expertd::server::jobs {
namespace {

absl::Status RemoveTree(Env* env, const std::string& path) {
  ASSIGN_OR_RETURN(FileType type, env->GetFileType(path));
  if (type != FileType::kDirectory) return env->RemoveFile(path);
  ASSIGN_OR_RETURN(std::vector<std::string> entries, env->ListDir(path));
  for (const std::string& e : entries) RETURN_IF_ERROR(RemoveTree(env, path + "/" + e));
  return env->RemoveDir(path);
}

absl::Status RemoveCheckpointDir(Env* env, const std::string& dir) {
  if (!env->GetFileType(dir).ok()) return absl::OkStatus();  // already gone
  const std::string doomed = dir + ".deleted";
  RETURN_IF_ERROR(env->RenameFile(dir, doomed));
  return RemoveTree(env, doomed);
}

// Removes what a crash in the middle of RemoveCheckpointDir left behind.
void SweepDeletedDirs(Env* env, const std::string& job_dir) {
  absl::StatusOr<std::vector<std::string>> entries = env->ListDir(job_dir);
  if (!entries.ok()) return;  // no directory yet: nothing to sweep
  for (const std::string& e : *entries) {
    if (!absl::EndsWith(e, ".deleted")) continue;
    absl::Status s = RemoveTree(env, job_dir + e);
    if (!s.ok()) {
      EXPERTD_LOG(Warn, "checkpoint retention: cannot remove a leftover directory")
          .With("path", job_dir + e)
          .With("error", s);
    }
  }
}

}  // namespace

void JobManager::PruneCheckpoints(v1::FineTuneJob* job) {
  const v1::Hyperparameters& h = job->spec().hyperparameters();
  const uint32_t keep =
      h.has_keep_last_checkpoints() ? h.keep_last_checkpoints() : options_.keep_last_checkpoints;
  const std::string job_dir = absl::StrCat(data_dir(), "/jobs/", job->id(), "/");
  SweepDeletedDirs(options_.env, job_dir);
  if (keep == 0) return;
  std::vector<CheckpointRecord> deleted;
  {
    absl::MutexLock lock(&mu_);  // ResolveAndPin pins under it too
    absl::StatusOr<std::vector<CheckpointRecord>> all = store_->Checkpoints(job->id());
    if (!all.ok()) {
      EXPERTD_LOG(Warn, "checkpoint retention: cannot list").With("error", all.status());
      return;
    }
    // Oldest first; the newest `keep` (the resume point among them) stay.
    for (size_t i = 0; i + keep < all->size(); ++i) {
      const CheckpointRecord& c = (*all)[i];
      if (pins_.contains(c.id)) continue;           // loading or served
      if (!absl::StartsWith(c.path, job_dir)) continue;  // never outside the job
      EventDraft e;
      e.message = absl::StrCat("checkpoint ", c.id, " at step ", c.step,
                               " deleted (keep_last_checkpoints ", keep, ")");
      absl::Status s = store_->DeleteCheckpoint(*job, c.id, e, options_.clock->Now());
      if (!s.ok()) {
        EXPERTD_LOG(Warn, "checkpoint retention: cannot delete the record")
            .With("checkpoint_id", c.id)
            .With("error", s);
        continue;
      }
      deleted.push_back(c);
    }
  }
  if (deleted.empty()) return;
  auto* ids = job->mutable_checkpoints();
  for (const CheckpointRecord& c : deleted) {
    for (int i = 0; i < ids->size(); ++i) {
      if (ids->Get(i) == c.id) {
        ids->erase(ids->begin() + i);
        break;
      }
    }
    // The record is gone: nothing resolves to this directory any more.
    absl::Status s = RemoveCheckpointDir(options_.env, c.path);
    if (!s.ok()) {
      EXPERTD_LOG(Warn, "checkpoint retention: cannot remove the directory")
          .With("path", c.path)
          .With("error", s);
    }
  }
  Notify(job->id());
}

}  // namespace expertd::server::jobs
