// FileStore: files uploaded for fine-tuning, kept under --data_dir/files/ and
// recorded in the job store, and the resolution of a job's file fields.
//
// An upload streams into a temporary file (through Env: written, fsynced,
// renamed, directory fsynced) while its SHA-256 is computed; it becomes
// visible (ListFiles, jobs) only once complete and recorded. Past the size
// cap it fails with ResourceExhausted and leaves nothing behind; so does a
// full disk (with the file system's message).
//
// Thread-safe (each FileUpload is used by one thread at a time).
#ifndef EXPERTD_SERVER_JOBS_FILE_STORE_H_
#define EXPERTD_SERVER_JOBS_FILE_STORE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "base/clock.h"
#include "base/env.h"
#include "proto/expertd.pb.h"
#include "server/jobs/job_store.h"
#include "server/jobs/sha256.h"

namespace expertd::server::jobs {

struct FileStoreOptions {
  Env* env = Env::Default();
  Clock* clock = RealClock::Get();
  std::string data_dir;  // must exist
  uint64_t max_upload_bytes = 1ull << 30;
};

class FileUpload {
 public:
  // Without a successful Finish, the temporary file is removed.
  ~FileUpload() = default;
  // ResourceExhausted once the total passes the cap (or the disk is full).
  absl::Status Append(absl::string_view bytes);
  // Makes the file durable and records it.
  absl::StatusOr<v1::FileInfo> Finish();

 private:
  friend class FileStore;
  FileUpload(JobStore* store, uint64_t max_bytes, std::string path,
             std::unique_ptr<AtomicFileWriter> writer, v1::FileInfo info)
      : store_(store),
        max_bytes_(max_bytes),
        path_(std::move(path)),
        writer_(std::move(writer)),
        info_(std::move(info)) {}

  JobStore* const store_;
  const uint64_t max_bytes_;
  const std::string path_;
  std::unique_ptr<AtomicFileWriter> writer_;
  v1::FileInfo info_;
  Sha256 sha_;
  absl::Status failed_;  // sticky: an upload that failed once stays failed
};

class FileStore {
 public:
  // Creates data_dir/files when absent. The data directory is made absolute
  // (symlinks resolved) once, here.
  static absl::StatusOr<std::unique_ptr<FileStore>> Open(FileStoreOptions options, JobStore* store);

  // InvalidArgument for a filename that is empty, too long or holds '/'.
  absl::StatusOr<std::unique_ptr<FileUpload>> BeginUpload(
      const v1::UploadFileRequest::Metadata& metadata);
  absl::StatusOr<std::vector<v1::FileInfo>> List();
  // Removes the record, then the bytes. NotFound for an unknown id.
  absl::Status Delete(const std::string& file_id);

  // A job's `field` (e.g. "spec.training_file") names an uploaded file id or
  // a path relative to --data_dir (an absolute one must lie inside it). The
  // absolute path of a regular file inside --data_dir, or InvalidArgument
  // naming the field: missing, not a file, or resolving outside (.., symlinks).
  absl::StatusOr<std::string> Resolve(absl::string_view field, const std::string& value);

  const std::string& data_dir() const { return data_dir_; }

 private:
  FileStore(FileStoreOptions options, std::string data_dir, JobStore* store)
      : options_(std::move(options)), data_dir_(std::move(data_dir)), store_(store) {}

  const FileStoreOptions options_;
  const std::string data_dir_;  // absolute, symlinks resolved
  JobStore* const store_;
};

// "<prefix><16 random hex digits>".
std::string NewRandomId(absl::string_view prefix);

}  // namespace expertd::server::jobs

#endif  // EXPERTD_SERVER_JOBS_FILE_STORE_H_
