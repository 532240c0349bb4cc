// A thin RAII layer over SQLite's C API: a connection and prepared
// statements, with errors as absl::Status. The job store is its only user.
//
// Error mapping (who should act): SQLITE_FULL -> ResourceExhausted (disk
// full), SQLITE_READONLY / SQLITE_PERM / SQLITE_CANTOPEN -> PermissionDenied
// (the directory is not writable), SQLITE_BUSY / SQLITE_LOCKED -> Unavailable
// (another process holds the database), everything else -> Internal. Messages
// name the database path and SQLite's own message.
//
// Thread safety: a connection and its statements are used by one thread at a
// time (the caller serializes).
#ifndef EXPERTD_SERVER_JOBS_SQLITE_H_
#define EXPERTD_SERVER_JOBS_SQLITE_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

struct sqlite3;
struct sqlite3_stmt;

namespace expertd::server::jobs {

class SqliteDb {
 public:
  // Opens (creating when absent) the database at `path`, with a busy timeout
  // so a reader and the writer never fail on each other's short locks.
  static absl::StatusOr<std::unique_ptr<SqliteDb>> Open(const std::string& path);
  ~SqliteDb();
  SqliteDb(const SqliteDb&) = delete;
  SqliteDb& operator=(const SqliteDb&) = delete;

  // Runs one or more statements that return no rows we need.
  absl::Status Exec(absl::string_view sql);
  // The status for SQLite result `rc` on this connection, saying `what` failed.
  absl::Status Error(int rc, absl::string_view what) const;

  // Rows changed by the last INSERT, UPDATE or DELETE.
  int64_t Changes() const;

  sqlite3* handle() const { return db_; }
  const std::string& path() const { return path_; }

 private:
  SqliteDb(sqlite3* db, std::string path) : db_(db), path_(std::move(path)) {}
  sqlite3* db_;
  const std::string path_;
};

// A prepared statement. Bind indexes are 1-based, column indexes 0-based
// (SQLite's convention).
class SqliteStatement {
 public:
  static absl::StatusOr<SqliteStatement> Prepare(SqliteDb* db, absl::string_view sql);
  SqliteStatement(SqliteStatement&& other) noexcept;
  SqliteStatement& operator=(SqliteStatement&&) = delete;
  ~SqliteStatement();

  SqliteStatement& Bind(int index, int64_t value);
  SqliteStatement& Bind(int index, double value);
  // Text (copied by SQLite).
  SqliteStatement& Bind(int index, absl::string_view value);
  SqliteStatement& BindBlob(int index, absl::string_view bytes);
  SqliteStatement& BindNull(int index);

  // True when a row is ready, false when the statement is done.
  absl::StatusOr<bool> Step();
  // Steps to the end (for INSERT/UPDATE/DELETE).
  absl::Status Run();

  int64_t Int(int column) const;
  double Double(int column) const;
  std::string Text(int column) const;  // text or blob bytes
  bool IsNull(int column) const;

 private:
  SqliteStatement(SqliteDb* db, sqlite3_stmt* stmt) : db_(db), stmt_(stmt) {}
  SqliteDb* db_;
  sqlite3_stmt* stmt_;
  int bind_rc_ = 0;  // first failed bind, reported by Step
};

}  // namespace expertd::server::jobs

#endif  // EXPERTD_SERVER_JOBS_SQLITE_H_
