#include "server/jobs/job_store.h"

#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "base/status_macros.h"
#include "server/jobs/job_store_schema.h"

namespace expertd::server::jobs {
namespace {

constexpr int kNumMigrations = sizeof(kJobStoreMigrations) / sizeof(kJobStoreMigrations[0]);
static_assert(kNumMigrations == kJobStoreSchemaVersion, "one migration per schema version");

int64_t ToMicros(const google::protobuf::Timestamp& t) {
  return t.seconds() * 1000000 + t.nanos() / 1000;
}

void FromMicros(int64_t micros, google::protobuf::Timestamp* t) {
  t->set_seconds(micros / 1000000);
  t->set_nanos(static_cast<int32_t>(micros % 1000000) * 1000);
}

std::string LevelText(v1::FineTuneJobEvent::Level level) {
  switch (level) {
    case v1::FineTuneJobEvent::LEVEL_WARNING:
      return "warning";
    case v1::FineTuneJobEvent::LEVEL_ERROR:
      return "error";
    default:
      return "info";
  }
}

v1::FineTuneJobEvent::Level LevelFromText(const std::string& text) {
  if (text == "warning") return v1::FineTuneJobEvent::LEVEL_WARNING;
  if (text == "error") return v1::FineTuneJobEvent::LEVEL_ERROR;
  return v1::FineTuneJobEvent::LEVEL_INFO;
}

v1::JobStatus StatusFromText(const std::string& text) {
  v1::JobStatus status;
  if (v1::JobStatus_Parse("JOB_STATUS_" + absl::AsciiStrToUpper(text), &status)) return status;
  return v1::JOB_STATUS_UNSPECIFIED;
}

// Applies the migrations the database lacks, each in its own transaction.
absl::Status Migrate(SqliteDb* db) {
  RETURN_IF_ERROR(db->Exec("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)"));
  int64_t version = 0;
  {
    ASSIGN_OR_RETURN(SqliteStatement q,
                     SqliteStatement::Prepare(db, "SELECT MAX(version) FROM schema_version"));
    ASSIGN_OR_RETURN(bool row, q.Step());
    if (row && !q.IsNull(0)) version = q.Int(0);
  }
  if (version > kJobStoreSchemaVersion) {
    return absl::FailedPreconditionError(
        absl::StrCat(db->path(), ": schema version ", version, " is newer than this build's (",
                     kJobStoreSchemaVersion, "); run a newer expertd"));
  }
  for (int64_t v = version + 1; v <= kJobStoreSchemaVersion; ++v) {
    RETURN_IF_ERROR(db->Exec("BEGIN IMMEDIATE"));
    absl::Status s = db->Exec(kJobStoreMigrations[v - 1]);
    if (s.ok()) s = db->Exec(absl::StrCat("INSERT INTO schema_version VALUES (", v, ")"));
    if (s.ok()) s = db->Exec("COMMIT");
    if (!s.ok()) {
      (void)db->Exec("ROLLBACK");
      return s;
    }
  }
  return absl::OkStatus();
}

constexpr char kJobColumns[] =
    "id, request_id, spec, status, error_code, error_message, step, total_steps, epoch, "
    "train_loss, validation_loss, tokens_per_second, trained_tokens, fine_tuned_model, "
    "create_time, start_time, finish_time, row";

// A row selected with kJobColumns -> the job (without checkpoints).
v1::FineTuneJob JobFromRow(const SqliteStatement& q) {
  v1::FineTuneJob job;
  job.set_id(q.Text(0));
  (void)job.mutable_spec()->ParseFromString(q.Text(2));
  job.set_status(StatusFromText(q.Text(3)));
  if (!q.Text(4).empty()) {
    job.mutable_error()->set_code(q.Text(4));
    job.mutable_error()->set_message(q.Text(5));
  }
  v1::JobProgress* p = job.mutable_progress();
  p->set_step(q.Int(6));
  p->set_total_steps(q.Int(7));
  p->set_epoch(q.Double(8));
  p->set_train_loss(q.Double(9));
  p->set_validation_loss(q.Double(10));
  p->set_tokens_per_second(q.Double(11));
  p->set_trained_tokens(q.Int(12));
  job.set_fine_tuned_model(q.Text(13));
  FromMicros(q.Int(14), job.mutable_create_time());
  if (q.Int(15) != 0) FromMicros(q.Int(15), job.mutable_start_time());
  if (q.Int(16) != 0) FromMicros(q.Int(16), job.mutable_finish_time());
  return job;
}

absl::Status AppendEventTx(SqliteDb* db, const std::string& job_id, v1::JobStatus status,
                           const EventDraft& e, absl::Time now, uint64_t* sequence) {
  ASSIGN_OR_RETURN(SqliteStatement q,
                   SqliteStatement::Prepare(
                       db, "SELECT COALESCE(MAX(sequence), 0) + 1 FROM events WHERE job_id = ?"));
  q.Bind(1, job_id);
  ASSIGN_OR_RETURN(bool row, q.Step());
  *sequence = row ? static_cast<uint64_t>(q.Int(0)) : 1;
  ASSIGN_OR_RETURN(SqliteStatement ins,
                   SqliteStatement::Prepare(
                       db,
                       "INSERT INTO events (job_id, sequence, time, level, message, status, "
                       "has_progress, step, total_steps, epoch, train_loss, validation_loss, "
                       "tokens_per_second, trained_tokens) "
                       "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"));
  const v1::JobProgress p = e.progress.value_or(v1::JobProgress());
  ins.Bind(1, job_id)
      .Bind(2, static_cast<int64_t>(*sequence))
      .Bind(3, absl::ToUnixMicros(now))
      .Bind(4, LevelText(e.level))
      .Bind(5, e.message)
      .Bind(6, JobStatusText(status))
      .Bind(7, static_cast<int64_t>(e.progress.has_value()))
      .Bind(8, static_cast<int64_t>(p.step()))
      .Bind(9, static_cast<int64_t>(p.total_steps()))
      .Bind(10, p.epoch())
      .Bind(11, p.train_loss())
      .Bind(12, p.validation_loss())
      .Bind(13, p.tokens_per_second())
      .Bind(14, static_cast<int64_t>(p.trained_tokens()));
  return ins.Run();
}

CheckpointRecord CheckpointFromRow(const SqliteStatement& q) {
  CheckpointRecord c;
  c.id = q.Text(0);
  c.job_id = q.Text(1);
  c.path = q.Text(2);
  c.step = static_cast<uint64_t>(q.Int(3));
  c.model_name = q.Text(4);
  return c;
}

}  // namespace

std::string JobStatusText(v1::JobStatus status) {
  absl::string_view name = v1::JobStatus_Name(status);
  absl::ConsumePrefix(&name, "JOB_STATUS_");
  return absl::AsciiStrToLower(name);
}

absl::StatusOr<std::unique_ptr<JobStore>> JobStore::Open(const std::string& db_path) {
  ASSIGN_OR_RETURN(std::unique_ptr<SqliteDb> writer, SqliteDb::Open(db_path));
  // WAL: readers run beside the writer; FULL: a commit is fsynced before it
  // returns, so what a client was told survives a crash.
  RETURN_IF_ERROR(writer->Exec("PRAGMA journal_mode=WAL"));
  RETURN_IF_ERROR(writer->Exec("PRAGMA synchronous=FULL"));
  RETURN_IF_ERROR(writer->Exec("PRAGMA foreign_keys=ON"));
  RETURN_IF_ERROR(Migrate(writer.get()));
  ASSIGN_OR_RETURN(std::unique_ptr<SqliteDb> reader, SqliteDb::Open(db_path));
  return std::unique_ptr<JobStore>(new JobStore(std::move(writer), std::move(reader)));
}

JobStore::JobStore(std::unique_ptr<SqliteDb> writer, std::unique_ptr<SqliteDb> reader)
    : writer_db_(std::move(writer)), reader_db_(std::move(reader)) {
  writer_ = std::thread([this] { WriterLoop(); });
}

JobStore::~JobStore() {
  {
    absl::MutexLock lock(&queue_mu_);
    stopping_ = true;
  }
  writer_.join();
}

absl::Status JobStore::Write(WriteFn fn) {
  WriteTask task;
  task.fn = std::move(fn);
  absl::MutexLock lock(&queue_mu_);
  if (stopping_) return absl::UnavailableError("job store is closing");
  queue_.push_back(&task);
  queue_mu_.Await(absl::Condition(&task.done));
  return task.result;
}

void JobStore::WriterLoop() {
  while (true) {
    WriteTask* task;
    {
      absl::MutexLock lock(&queue_mu_);
      auto ready = [this]() ABSL_SHARED_LOCKS_REQUIRED(queue_mu_) {
        return stopping_ || !queue_.empty();
      };
      queue_mu_.Await(absl::Condition(&ready));
      if (queue_.empty()) return;  // stopping, and every write is done
      task = queue_.front();
      queue_.pop_front();
    }
    SqliteDb* db = writer_db_.get();
    absl::Status s = db->Exec("BEGIN IMMEDIATE");
    if (s.ok()) s = task->fn(db);
    if (s.ok()) s = db->Exec("COMMIT");
    if (!s.ok()) (void)db->Exec("ROLLBACK");
    absl::MutexLock lock(&queue_mu_);
    task->result = s;
    task->done = true;
  }
}

absl::Status JobStore::InsertFile(const StoredFile& f) {
  return Write([&f](SqliteDb* db) -> absl::Status {
    ASSIGN_OR_RETURN(SqliteStatement q,
                     SqliteStatement::Prepare(db,
                                              "INSERT INTO files (id, filename, purpose, bytes, "
                                              "sha256, path, create_time) "
                                              "VALUES (?, ?, ?, ?, ?, ?, ?)"));
    q.Bind(1, f.info.id())
        .Bind(2, f.info.filename())
        .Bind(3, f.info.purpose())
        .Bind(4, static_cast<int64_t>(f.info.bytes()))
        .Bind(5, f.info.sha256())
        .Bind(6, f.path)
        .Bind(7, ToMicros(f.info.create_time()));
    return q.Run();
  });
}

absl::Status JobStore::DeleteFile(const std::string& file_id) {
  return Write([&file_id](SqliteDb* db) -> absl::Status {
    ASSIGN_OR_RETURN(SqliteStatement q,
                     SqliteStatement::Prepare(db, "DELETE FROM files WHERE id = ?"));
    q.Bind(1, file_id);
    return q.Run();
  });
}

absl::Status JobStore::InsertJob(const v1::FineTuneJob& job, const std::string& request_id,
                                 const EventDraft& first_event, absl::Time now) {
  return Write([&](SqliteDb* db) -> absl::Status {
    ASSIGN_OR_RETURN(SqliteStatement q,
                     SqliteStatement::Prepare(db,
                                              "INSERT INTO jobs (id, request_id, spec, "
                                              "training_file, validation_file, status, "
                                              "create_time) VALUES (?, ?, ?, ?, ?, ?, ?)"));
    q.Bind(1, job.id())
        .Bind(2, request_id)
        .BindBlob(3, job.spec().SerializeAsString())
        .Bind(4, job.spec().training_file())
        .Bind(5, job.spec().validation_file())
        .Bind(6, JobStatusText(job.status()))
        .Bind(7, ToMicros(job.create_time()));
    RETURN_IF_ERROR(q.Run());
    uint64_t sequence = 0;
    return AppendEventTx(db, job.id(), job.status(), first_event, now, &sequence);
  });
}

absl::StatusOr<uint64_t> JobStore::UpdateJob(const v1::FineTuneJob& job, const EventDraft* event,
                                             absl::Time now) {
  uint64_t sequence = 0;
  RETURN_IF_ERROR(Write([&](SqliteDb* db) -> absl::Status {
    ASSIGN_OR_RETURN(
        SqliteStatement q,
        SqliteStatement::Prepare(
            db,
            "UPDATE jobs SET status = ?, error_code = ?, error_message = ?, step = ?, "
            "total_steps = ?, epoch = ?, train_loss = ?, validation_loss = ?, "
            "tokens_per_second = ?, trained_tokens = ?, fine_tuned_model = ?, start_time = ?, "
            "finish_time = ? WHERE id = ?"));
    const v1::JobProgress& p = job.progress();
    q.Bind(1, JobStatusText(job.status()))
        .Bind(2, job.error().code())
        .Bind(3, job.error().message())
        .Bind(4, static_cast<int64_t>(p.step()))
        .Bind(5, static_cast<int64_t>(p.total_steps()))
        .Bind(6, p.epoch())
        .Bind(7, p.train_loss())
        .Bind(8, p.validation_loss())
        .Bind(9, p.tokens_per_second())
        .Bind(10, static_cast<int64_t>(p.trained_tokens()))
        .Bind(11, job.fine_tuned_model())
        .Bind(12, job.has_start_time() ? ToMicros(job.start_time()) : int64_t{0})
        .Bind(13, job.has_finish_time() ? ToMicros(job.finish_time()) : int64_t{0})
        .Bind(14, job.id());
    RETURN_IF_ERROR(q.Run());
    if (db->Changes() != 1) {
      return absl::NotFoundError(absl::StrCat("job '", job.id(), "' is not in the database"));
    }
    if (event == nullptr) return absl::OkStatus();
    return AppendEventTx(db, job.id(), job.status(), *event, now, &sequence);
  }));
  return sequence;
}

absl::Status JobStore::InsertCheckpoint(const CheckpointRecord& c, absl::Time now) {
  return Write([&](SqliteDb* db) -> absl::Status {
    ASSIGN_OR_RETURN(SqliteStatement q, SqliteStatement::Prepare(
                                            db,
                                            "INSERT INTO checkpoints (id, job_id, path, step, "
                                            "model_name, create_time) VALUES (?, ?, ?, ?, ?, ?)"));
    q.Bind(1, c.id)
        .Bind(2, c.job_id)
        .Bind(3, c.path)
        .Bind(4, static_cast<int64_t>(c.step))
        .Bind(5, c.model_name)
        .Bind(6, absl::ToUnixMicros(now));
    return q.Run();
  });
}

absl::Status JobStore::DeleteCheckpoint(const v1::FineTuneJob& job,
                                        const std::string& checkpoint_id, const EventDraft& event,
                                        absl::Time now) {
  return Write([&](SqliteDb* db) -> absl::Status {
    ASSIGN_OR_RETURN(SqliteStatement q,
                     SqliteStatement::Prepare(
                         db, "DELETE FROM checkpoints WHERE id = ? AND job_id = ?"));
    q.Bind(1, checkpoint_id).Bind(2, job.id());
    RETURN_IF_ERROR(q.Run());
    if (db->Changes() != 1) {
      return absl::NotFoundError(absl::StrCat("no checkpoint '", checkpoint_id, "' of job ",
                                              job.id()));
    }
    uint64_t sequence = 0;
    return AppendEventTx(db, job.id(), job.status(), event, now, &sequence);
  });
}

absl::StatusOr<std::vector<v1::FileInfo>> JobStore::ListFiles() {
  absl::MutexLock lock(&read_mu_);
  ASSIGN_OR_RETURN(SqliteStatement q,
                   SqliteStatement::Prepare(reader_db_.get(),
                                            "SELECT id, filename, purpose, bytes, sha256, "
                                            "create_time FROM files ORDER BY row DESC"));
  std::vector<v1::FileInfo> files;
  while (true) {
    ASSIGN_OR_RETURN(bool row, q.Step());
    if (!row) break;
    v1::FileInfo& f = files.emplace_back();
    f.set_id(q.Text(0));
    f.set_filename(q.Text(1));
    f.set_purpose(q.Text(2));
    f.set_bytes(static_cast<uint64_t>(q.Int(3)));
    f.set_sha256(q.Text(4));
    FromMicros(q.Int(5), f.mutable_create_time());
  }
  return files;
}

absl::StatusOr<std::optional<StoredFile>> JobStore::GetFile(const std::string& file_id) {
  absl::MutexLock lock(&read_mu_);
  ASSIGN_OR_RETURN(SqliteStatement q,
                   SqliteStatement::Prepare(reader_db_.get(),
                                            "SELECT id, filename, purpose, bytes, sha256, "
                                            "create_time, path FROM files WHERE id = ?"));
  q.Bind(1, file_id);
  ASSIGN_OR_RETURN(bool row, q.Step());
  if (!row) return std::nullopt;
  StoredFile f;
  f.info.set_id(q.Text(0));
  f.info.set_filename(q.Text(1));
  f.info.set_purpose(q.Text(2));
  f.info.set_bytes(static_cast<uint64_t>(q.Int(3)));
  f.info.set_sha256(q.Text(4));
  FromMicros(q.Int(5), f.info.mutable_create_time());
  f.path = q.Text(6);
  return f;
}

absl::StatusOr<std::vector<CheckpointRecord>> JobStore::CheckpointsLocked(
    const std::string& job_id) {
  ASSIGN_OR_RETURN(SqliteStatement q,
                   SqliteStatement::Prepare(reader_db_.get(),
                                            "SELECT id, job_id, path, step, model_name FROM "
                                            "checkpoints WHERE job_id = ? ORDER BY row"));
  q.Bind(1, job_id);
  std::vector<CheckpointRecord> out;
  while (true) {
    ASSIGN_OR_RETURN(bool row, q.Step());
    if (!row) break;
    out.push_back(CheckpointFromRow(q));
  }
  return out;
}

absl::StatusOr<std::optional<StoredJob>> JobStore::ReadJobWhere(const char* where,
                                                                const std::string& key) {
  absl::MutexLock lock(&read_mu_);
  ASSIGN_OR_RETURN(
      SqliteStatement q,
      SqliteStatement::Prepare(reader_db_.get(), absl::StrCat("SELECT ", kJobColumns,
                                                              " FROM jobs WHERE ", where, " = ?")));
  q.Bind(1, key);
  ASSIGN_OR_RETURN(bool row, q.Step());
  if (!row) return std::nullopt;
  StoredJob stored;
  stored.job = JobFromRow(q);
  stored.request_id = q.Text(1);
  ASSIGN_OR_RETURN(std::vector<CheckpointRecord> checkpoints, CheckpointsLocked(stored.job.id()));
  for (const CheckpointRecord& c : checkpoints) stored.job.add_checkpoints(c.id);
  return stored;
}

absl::StatusOr<std::optional<StoredJob>> JobStore::GetJob(const std::string& job_id) {
  return ReadJobWhere("id", job_id);
}

absl::StatusOr<std::optional<StoredJob>> JobStore::FindJobByRequestId(
    const std::string& request_id) {
  return ReadJobWhere("request_id", request_id);
}

absl::StatusOr<std::vector<v1::FineTuneJob>> JobStore::ListJobs(int64_t before_row, int limit,
                                                                std::vector<int64_t>* rows) {
  absl::MutexLock lock(&read_mu_);
  ASSIGN_OR_RETURN(
      SqliteStatement q,
      SqliteStatement::Prepare(reader_db_.get(), absl::StrCat("SELECT ", kJobColumns,
                                                              " FROM jobs WHERE row < ? "
                                                              "ORDER BY row DESC LIMIT ?")));
  q.Bind(1, before_row > 0 ? before_row : INT64_MAX).Bind(2, static_cast<int64_t>(limit));
  std::vector<v1::FineTuneJob> jobs;
  while (true) {
    ASSIGN_OR_RETURN(bool row, q.Step());
    if (!row) break;
    jobs.push_back(JobFromRow(q));
    rows->push_back(q.Int(17));
  }
  for (v1::FineTuneJob& job : jobs) {
    ASSIGN_OR_RETURN(std::vector<CheckpointRecord> checkpoints, CheckpointsLocked(job.id()));
    for (const CheckpointRecord& c : checkpoints) job.add_checkpoints(c.id);
  }
  return jobs;
}

absl::StatusOr<std::vector<v1::FineTuneJobEvent>> JobStore::EventsAfter(const std::string& job_id,
                                                                        uint64_t after_sequence,
                                                                        int limit) {
  absl::MutexLock lock(&read_mu_);
  ASSIGN_OR_RETURN(
      SqliteStatement q,
      SqliteStatement::Prepare(
          reader_db_.get(),
          "SELECT sequence, time, level, message, status, has_progress, step, total_steps, "
          "epoch, train_loss, validation_loss, tokens_per_second, trained_tokens FROM events "
          "WHERE job_id = ? AND sequence > ? ORDER BY sequence LIMIT ?"));
  q.Bind(1, job_id)
      .Bind(2, static_cast<int64_t>(after_sequence))
      .Bind(3, static_cast<int64_t>(limit));
  std::vector<v1::FineTuneJobEvent> events;
  while (true) {
    ASSIGN_OR_RETURN(bool row, q.Step());
    if (!row) break;
    v1::FineTuneJobEvent& e = events.emplace_back();
    e.set_sequence(static_cast<uint64_t>(q.Int(0)));
    e.set_job_id(job_id);
    FromMicros(q.Int(1), e.mutable_time());
    e.set_level(LevelFromText(q.Text(2)));
    e.set_message(q.Text(3));
    e.set_status(StatusFromText(q.Text(4)));
    if (q.Int(5) != 0) {
      v1::JobProgress* p = e.mutable_progress();
      p->set_step(q.Int(6));
      p->set_total_steps(q.Int(7));
      p->set_epoch(q.Double(8));
      p->set_train_loss(q.Double(9));
      p->set_validation_loss(q.Double(10));
      p->set_tokens_per_second(q.Double(11));
      p->set_trained_tokens(q.Int(12));
    }
  }
  return events;
}

absl::StatusOr<std::vector<CheckpointRecord>> JobStore::Checkpoints(const std::string& job_id) {
  absl::MutexLock lock(&read_mu_);
  return CheckpointsLocked(job_id);
}

absl::StatusOr<std::optional<CheckpointRecord>> JobStore::GetCheckpoint(
    const std::string& checkpoint_id) {
  absl::MutexLock lock(&read_mu_);
  ASSIGN_OR_RETURN(SqliteStatement q,
                   SqliteStatement::Prepare(reader_db_.get(),
                                            "SELECT id, job_id, path, step, model_name FROM "
                                            "checkpoints WHERE id = ?"));
  q.Bind(1, checkpoint_id);
  ASSIGN_OR_RETURN(bool row, q.Step());
  if (!row) return std::nullopt;
  return CheckpointFromRow(q);
}

absl::StatusOr<std::vector<std::string>> JobStore::JobIdsWithStatus(
    const std::vector<v1::JobStatus>& statuses) {
  std::vector<std::string> quoted;
  for (v1::JobStatus s : statuses) quoted.push_back(absl::StrCat("'", JobStatusText(s), "'"));
  absl::MutexLock lock(&read_mu_);
  ASSIGN_OR_RETURN(
      SqliteStatement q,
      SqliteStatement::Prepare(reader_db_.get(),
                               absl::StrCat("SELECT id FROM jobs WHERE status IN (",
                                            absl::StrJoin(quoted, ", "), ") ORDER BY row")));
  std::vector<std::string> ids;
  while (true) {
    ASSIGN_OR_RETURN(bool row, q.Step());
    if (!row) break;
    ids.push_back(q.Text(0));
  }
  return ids;
}

absl::StatusOr<std::vector<std::string>> JobStore::ActiveJobsUsingFile(const std::string& file_id) {
  absl::MutexLock lock(&read_mu_);
  ASSIGN_OR_RETURN(SqliteStatement q,
                   SqliteStatement::Prepare(reader_db_.get(),
                                            "SELECT id FROM jobs WHERE status IN ('validating', "
                                            "'queued', 'running') AND (training_file = ?1 OR "
                                            "validation_file = ?1) ORDER BY row"));
  q.Bind(1, file_id);
  std::vector<std::string> ids;
  while (true) {
    ASSIGN_OR_RETURN(bool row, q.Step());
    if (!row) break;
    ids.push_back(q.Text(0));
  }
  return ids;
}

}  // namespace expertd::server::jobs
