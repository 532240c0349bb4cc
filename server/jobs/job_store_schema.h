// The job database's schema, as versioned migrations. Migration i (1-based)
// takes the database from version i-1 to i; a released migration is never
// edited, only followed by a new one.
#ifndef EXPERTD_SERVER_JOBS_JOB_STORE_SCHEMA_H_
#define EXPERTD_SERVER_JOBS_JOB_STORE_SCHEMA_H_

namespace expertd::server::jobs {

// Times are Unix microseconds (0: not yet); statuses and levels are lower-case
// words ("running", "info"), so the sqlite3 shell shows them as they read.
inline constexpr const char* kJobStoreMigrations[] = {
    // 1: files, jobs, events, checkpoints.
    R"sql(
CREATE TABLE files (
  row INTEGER PRIMARY KEY AUTOINCREMENT,
  id TEXT NOT NULL UNIQUE,
  filename TEXT NOT NULL,
  purpose TEXT NOT NULL,
  bytes INTEGER NOT NULL,
  sha256 TEXT NOT NULL,
  path TEXT NOT NULL,
  create_time INTEGER NOT NULL
);
CREATE TABLE jobs (
  row INTEGER PRIMARY KEY AUTOINCREMENT,
  id TEXT NOT NULL UNIQUE,
  request_id TEXT NOT NULL DEFAULT '',
  spec BLOB NOT NULL,
  training_file TEXT NOT NULL,
  validation_file TEXT NOT NULL,
  status TEXT NOT NULL,
  error_code TEXT NOT NULL DEFAULT '',
  error_message TEXT NOT NULL DEFAULT '',
  step INTEGER NOT NULL DEFAULT 0,
  total_steps INTEGER NOT NULL DEFAULT 0,
  epoch REAL NOT NULL DEFAULT 0,
  train_loss REAL NOT NULL DEFAULT 0,
  validation_loss REAL NOT NULL DEFAULT 0,
  tokens_per_second REAL NOT NULL DEFAULT 0,
  trained_tokens INTEGER NOT NULL DEFAULT 0,
  fine_tuned_model TEXT NOT NULL DEFAULT '',
  create_time INTEGER NOT NULL,
  start_time INTEGER NOT NULL DEFAULT 0,
  finish_time INTEGER NOT NULL DEFAULT 0
);
CREATE UNIQUE INDEX jobs_request_id ON jobs(request_id) WHERE request_id != '';
CREATE INDEX jobs_status ON jobs(status);
CREATE TABLE events (
  job_id TEXT NOT NULL REFERENCES jobs(id),
  sequence INTEGER NOT NULL,
  time INTEGER NOT NULL,
  level TEXT NOT NULL,
  message TEXT NOT NULL,
  status TEXT NOT NULL,
  has_progress INTEGER NOT NULL DEFAULT 0,
  step INTEGER NOT NULL DEFAULT 0,
  total_steps INTEGER NOT NULL DEFAULT 0,
  epoch REAL NOT NULL DEFAULT 0,
  train_loss REAL NOT NULL DEFAULT 0,
  validation_loss REAL NOT NULL DEFAULT 0,
  tokens_per_second REAL NOT NULL DEFAULT 0,
  trained_tokens INTEGER NOT NULL DEFAULT 0,
  PRIMARY KEY (job_id, sequence)
);
CREATE TABLE checkpoints (
  row INTEGER PRIMARY KEY AUTOINCREMENT,
  id TEXT NOT NULL UNIQUE,
  job_id TEXT NOT NULL REFERENCES jobs(id),
  path TEXT NOT NULL,
  step INTEGER NOT NULL,
  model_name TEXT NOT NULL,
  create_time INTEGER NOT NULL
);
CREATE INDEX checkpoints_job ON checkpoints(job_id);
)sql",
};

}  // namespace expertd::server::jobs

#endif  // EXPERTD_SERVER_JOBS_JOB_STORE_SCHEMA_H_
