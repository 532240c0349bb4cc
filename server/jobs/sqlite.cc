#include "server/jobs/sqlite.h"

#include <sqlite3.h>

#include "absl/strings/str_cat.h"

namespace expertd::server::jobs {
namespace {

absl::StatusCode CodeFor(int rc) {
  switch (rc & 0xff) {
    case SQLITE_FULL:
      return absl::StatusCode::kResourceExhausted;
    case SQLITE_READONLY:
    case SQLITE_PERM:
    case SQLITE_CANTOPEN:
    case SQLITE_AUTH:
      return absl::StatusCode::kPermissionDenied;
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
      return absl::StatusCode::kUnavailable;
    default:
      return absl::StatusCode::kInternal;
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<SqliteDb>> SqliteDb::Open(const std::string& path) {
  sqlite3* db = nullptr;
  const int rc = sqlite3_open_v2(
      path.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, nullptr);
  if (rc != SQLITE_OK) {
    absl::Status s(CodeFor(rc),
                   absl::StrCat(path, ": cannot open database: ",
                                db != nullptr ? sqlite3_errmsg(db) : sqlite3_errstr(rc)));
    sqlite3_close(db);
    return s;
  }
  sqlite3_extended_result_codes(db, 1);
  sqlite3_busy_timeout(db, 10000);
  return std::unique_ptr<SqliteDb>(new SqliteDb(db, path));
}

SqliteDb::~SqliteDb() { sqlite3_close_v2(db_); }

absl::Status SqliteDb::Error(int rc, absl::string_view what) const {
  const char* msg = sqlite3_errmsg(db_);
  if (msg == nullptr || sqlite3_errcode(db_) != rc) msg = sqlite3_errstr(rc);
  return absl::Status(CodeFor(rc), absl::StrCat(path_, ": ", what, ": ", msg));
}

int64_t SqliteDb::Changes() const { return sqlite3_changes64(db_); }

absl::Status SqliteDb::Exec(absl::string_view sql) {
  std::string text(sql);
  const int rc = sqlite3_exec(db_, text.c_str(), nullptr, nullptr, nullptr);
  if (rc != SQLITE_OK) return Error(rc, absl::StrCat("'", sql.substr(0, 60), "'"));
  return absl::OkStatus();
}

absl::StatusOr<SqliteStatement> SqliteStatement::Prepare(SqliteDb* db, absl::string_view sql) {
  sqlite3_stmt* stmt = nullptr;
  const int rc =
      sqlite3_prepare_v2(db->handle(), sql.data(), static_cast<int>(sql.size()), &stmt, nullptr);
  if (rc != SQLITE_OK) return db->Error(rc, absl::StrCat("prepare '", sql.substr(0, 60), "'"));
  return SqliteStatement(db, stmt);
}

SqliteStatement::SqliteStatement(SqliteStatement&& other) noexcept
    : db_(other.db_), stmt_(other.stmt_), bind_rc_(other.bind_rc_) {
  other.stmt_ = nullptr;
}

SqliteStatement::~SqliteStatement() { sqlite3_finalize(stmt_); }

SqliteStatement& SqliteStatement::Bind(int index, int64_t value) {
  const int rc = sqlite3_bind_int64(stmt_, index, value);
  if (rc != SQLITE_OK && bind_rc_ == 0) bind_rc_ = rc;
  return *this;
}

SqliteStatement& SqliteStatement::Bind(int index, double value) {
  const int rc = sqlite3_bind_double(stmt_, index, value);
  if (rc != SQLITE_OK && bind_rc_ == 0) bind_rc_ = rc;
  return *this;
}

SqliteStatement& SqliteStatement::Bind(int index, absl::string_view value) {
  const int rc =
      sqlite3_bind_text64(stmt_, index, value.data(), value.size(), SQLITE_TRANSIENT, SQLITE_UTF8);
  if (rc != SQLITE_OK && bind_rc_ == 0) bind_rc_ = rc;
  return *this;
}

SqliteStatement& SqliteStatement::BindBlob(int index, absl::string_view bytes) {
  const int rc = sqlite3_bind_blob64(stmt_, index, bytes.data(), bytes.size(), SQLITE_TRANSIENT);
  if (rc != SQLITE_OK && bind_rc_ == 0) bind_rc_ = rc;
  return *this;
}

SqliteStatement& SqliteStatement::BindNull(int index) {
  const int rc = sqlite3_bind_null(stmt_, index);
  if (rc != SQLITE_OK && bind_rc_ == 0) bind_rc_ = rc;
  return *this;
}

absl::StatusOr<bool> SqliteStatement::Step() {
  if (bind_rc_ != 0) return db_->Error(bind_rc_, "bind");
  const int rc = sqlite3_step(stmt_);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  return db_->Error(rc,
                    absl::StrCat("'", absl::string_view(sqlite3_sql(stmt_)).substr(0, 60), "'"));
}

absl::Status SqliteStatement::Run() {
  while (true) {
    absl::StatusOr<bool> row = Step();
    if (!row.ok()) return row.status();
    if (!*row) return absl::OkStatus();
  }
}

int64_t SqliteStatement::Int(int column) const { return sqlite3_column_int64(stmt_, column); }

double SqliteStatement::Double(int column) const { return sqlite3_column_double(stmt_, column); }

std::string SqliteStatement::Text(int column) const {
  const void* data = sqlite3_column_blob(stmt_, column);
  const int n = sqlite3_column_bytes(stmt_, column);
  if (data == nullptr || n <= 0) return "";
  return std::string(static_cast<const char*>(data), static_cast<size_t>(n));
}

bool SqliteStatement::IsNull(int column) const {
  return sqlite3_column_type(stmt_, column) == SQLITE_NULL;
}

}  // namespace expertd::server::jobs
