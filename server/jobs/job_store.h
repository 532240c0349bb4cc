// JobStore: the durable records of the job system in one SQLite database
// (--data_dir/expertd.db): uploaded files, jobs, their events and their
// checkpoints. docs/jobs.md documents the schema for operators who open it
// with the sqlite3 shell.
//
// Durability: WAL journal, synchronous=FULL, so a write that returned OK
// survives kill -9 and power loss. Every write runs on ONE writer thread, in
// its own transaction, in the order callers submitted them; reads use a
// second connection (WAL lets them run beside the writer). The schema is
// versioned (table schema_version); Open applies the missing migrations.
//
// Thread-safe.
#ifndef EXPERTD_SERVER_JOBS_JOB_STORE_H_
#define EXPERTD_SERVER_JOBS_JOB_STORE_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "proto/expertd.pb.h"
#include "server/jobs/job_executor.h"
#include "server/jobs/sqlite.h"

namespace expertd::server::jobs {

// The schema version this build writes; Open migrates older databases to it
// and refuses newer ones (FailedPrecondition).
inline constexpr int kJobStoreSchemaVersion = 1;

struct StoredFile {
  v1::FileInfo info;
  std::string path;  // absolute
};

struct StoredJob {
  v1::FineTuneJob job;     // with checkpoints, oldest first
  std::string request_id;  // empty: none given
};

// An event to append; the store assigns the next sequence of the job.
struct EventDraft {
  v1::FineTuneJobEvent::Level level = v1::FineTuneJobEvent::LEVEL_INFO;
  std::string message;
  std::optional<v1::JobProgress> progress;
};

class JobStore {
 public:
  static absl::StatusOr<std::unique_ptr<JobStore>> Open(const std::string& db_path);
  // Finishes the queued writes, then stops the writer thread.
  ~JobStore();

  // ---- Writes (the writer thread; each is one transaction) ----
  absl::Status InsertFile(const StoredFile& file);
  absl::Status DeleteFile(const std::string& file_id);
  // Inserts the job row (its status as given) and its first event.
  absl::Status InsertJob(const v1::FineTuneJob& job, const std::string& request_id,
                         const EventDraft& first_event, absl::Time now);
  // Saves the job's status, error, progress, timestamps and model name, and
  // appends `event` (stamped with the saved status) when given. Returns the
  // event's sequence (0 without one).
  absl::StatusOr<uint64_t> UpdateJob(const v1::FineTuneJob& job, const EventDraft* event,
                                     absl::Time now);
  absl::Status InsertCheckpoint(const CheckpointRecord& checkpoint, absl::Time now);
  // Removes the checkpoint's record and appends `event` to its job (stamped
  // with job.status()), in one transaction. NotFound for an unknown id.
  absl::Status DeleteCheckpoint(const v1::FineTuneJob& job, const std::string& checkpoint_id,
                                const EventDraft& event, absl::Time now);

  // ---- Reads ----
  absl::StatusOr<std::vector<v1::FileInfo>> ListFiles();  // newest first
  absl::StatusOr<std::optional<StoredFile>> GetFile(const std::string& file_id);
  absl::StatusOr<std::optional<StoredJob>> GetJob(const std::string& job_id);
  absl::StatusOr<std::optional<StoredJob>> FindJobByRequestId(const std::string& request_id);
  // Jobs newest first, starting below the row `before_row` (0: from the
  // newest); *rows receives each returned job's row (a page token).
  absl::StatusOr<std::vector<v1::FineTuneJob>> ListJobs(int64_t before_row, int limit,
                                                        std::vector<int64_t>* rows);
  absl::StatusOr<std::vector<v1::FineTuneJobEvent>> EventsAfter(const std::string& job_id,
                                                                uint64_t after_sequence, int limit);
  absl::StatusOr<std::vector<CheckpointRecord>> Checkpoints(const std::string& job_id);
  absl::StatusOr<std::optional<CheckpointRecord>> GetCheckpoint(const std::string& checkpoint_id);
  // Ids of the jobs in any of `statuses`, oldest first.
  absl::StatusOr<std::vector<std::string>> JobIdsWithStatus(
      const std::vector<v1::JobStatus>& statuses);
  // Ids of validating, queued or running jobs naming `file_id`.
  absl::StatusOr<std::vector<std::string>> ActiveJobsUsingFile(const std::string& file_id);

 private:
  using WriteFn = std::function<absl::Status(SqliteDb*)>;
  struct WriteTask {
    WriteFn fn;
    absl::Status result;
    bool done = false;
  };

  JobStore(std::unique_ptr<SqliteDb> writer, std::unique_ptr<SqliteDb> reader);
  // Runs `fn` in a transaction on the writer thread and waits for it.
  absl::Status Write(WriteFn fn);
  void WriterLoop();
  absl::StatusOr<std::vector<CheckpointRecord>> CheckpointsLocked(const std::string& job_id)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(read_mu_);
  absl::StatusOr<std::optional<StoredJob>> ReadJobWhere(const char* where, const std::string& key);

  std::unique_ptr<SqliteDb> writer_db_;  // only the writer thread touches it
  absl::Mutex read_mu_;
  std::unique_ptr<SqliteDb> reader_db_ ABSL_GUARDED_BY(read_mu_);

  absl::Mutex queue_mu_;
  std::deque<WriteTask*> queue_ ABSL_GUARDED_BY(queue_mu_);
  bool stopping_ ABSL_GUARDED_BY(queue_mu_) = false;
  std::thread writer_;
};

// "running" for JOB_STATUS_RUNNING, etc.: the text stored in the database.
std::string JobStatusText(v1::JobStatus status);

}  // namespace expertd::server::jobs

#endif  // EXPERTD_SERVER_JOBS_JOB_STORE_H_
