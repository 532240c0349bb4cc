// Env: the file system seam. Every file operation the project performs (open,
// read, pread, write, pwrite, fsync, rename, mmap, list, remove, free space)
// goes through this interface, so tests can swap in an in-memory file system
// (base/memory_env.h) or inject faults (base/fault_injection_env.h), the way
// leveldb's Env does.
//
//   Env::Default()   the POSIX file system; lives forever, thread-safe.
//   EnvWrapper       forwards everything to another Env; override one call.
//
// Errors name the path and map errno by who should act:
//   ENOENT -> NotFound, EEXIST -> AlreadyExists,
//   EACCES / EPERM / EROFS -> PermissionDenied,
//   ENOSPC / EDQUOT -> ResourceExhausted (free space, then retry),
//   EINVAL -> InvalidArgument (e.g. O_DIRECT refused by the file system),
//   ENOTDIR / EISDIR / ENOTEMPTY -> FailedPrecondition,
//   EIO and everything else -> Internal.
//
// Durability model (what survives a crash; MemoryEnv::SimulateCrash
// implements exactly this): a file's bytes are durable once WritableFile::Sync
// returned OK; a directory entry (a created, renamed or removed name) is
// durable once SyncDir on its parent directory returned OK. So a rename is
// atomic at once for readers but durable only after the directory is synced:
// WriteFileAtomically / AtomicFileWriter below do temp name, write, fsync,
// rename, fsync the directory.
//
// Thread safety: Env methods are thread-safe. A RandomAccessFile may be read
// concurrently; a WritableFile is used by one thread at a time.
#ifndef EXPERTD_BASE_ENV_H_
#define EXPERTD_BASE_ENV_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace expertd {

// The Status for errno `err`, with message "<context>: <strerror>".
absl::Status ErrnoToStatus(int err, absl::string_view context);

// A file open for writing. Close() (or the destructor, which ignores errors)
// releases it; any call after Close() is FailedPrecondition.
class WritableFile {
 public:
  virtual ~WritableFile() = default;
  // Writes at the current position (which starts at 0) and moves it.
  virtual absl::Status Append(absl::string_view data) = 0;
  // Writes at `offset` (pwrite); the position does not move.
  virtual absl::Status WriteAt(uint64_t offset, absl::string_view data) = 0;
  // Sets the file size (extends with zeros or cuts).
  virtual absl::Status Truncate(uint64_t size) = 0;
  // Makes the file's bytes and size durable (fsync).
  virtual absl::Status Sync() = 0;
  virtual absl::Status Close() = 0;
  virtual const std::string& path() const = 0;
};

// A file open for positional reads. Thread-safe.
class RandomAccessFile {
 public:
  virtual ~RandomAccessFile() = default;
  // Reads exactly `n` bytes at `offset` into `dst`. DataLoss when the file
  // ends first; InvalidArgument when a direct-I/O read is refused (unaligned
  // buffer, offset or size, or a file system without O_DIRECT).
  virtual absl::Status ReadAt(uint64_t offset, uint64_t n, void* dst) const = 0;
  virtual absl::StatusOr<uint64_t> Size() const = 0;
  virtual const std::string& path() const = 0;
};

// A whole file mapped read-only. The bytes stay valid while the region lives;
// an empty file is size 0 with a null data pointer. Immutable; thread-safe.
class ReadOnlyRegion {
 public:
  virtual ~ReadOnlyRegion() = default;
  virtual const uint8_t* data() const = 0;
  virtual size_t size() const = 0;
};

enum class FileType { kRegular, kDirectory, kOther };

class Env {
 public:
  virtual ~Env() = default;
  // The POSIX file system.
  static Env* Default();

  // Creates `path` or truncates it to 0 bytes; the parent must exist.
  virtual absl::StatusOr<std::unique_ptr<WritableFile>> NewWritableFile(
      const std::string& path) = 0;
  // Opens an existing file for in-place writes (no truncation). NotFound if
  // it does not exist.
  virtual absl::StatusOr<std::unique_ptr<WritableFile>> OpenWritableFile(
      const std::string& path) = 0;
  // direct_io: bypass the page cache (O_DIRECT). Then every read's buffer,
  // offset and size must be aligned to 4 KiB; a file system that cannot do it
  // fails the open or the read with InvalidArgument (callers fall back).
  virtual absl::StatusOr<std::unique_ptr<RandomAccessFile>> NewRandomAccessFile(
      const std::string& path, bool direct_io = false) = 0;
  // Maps a regular file read-only (InvalidArgument for anything else).
  virtual absl::StatusOr<std::unique_ptr<ReadOnlyRegion>> MapReadOnly(const std::string& path) = 0;

  // NotFound if `path` does not exist.
  virtual absl::StatusOr<FileType> GetFileType(const std::string& path) = 0;
  // The entries of `dir` (no "." or ".."), sorted.
  virtual absl::StatusOr<std::vector<std::string>> ListDir(const std::string& dir) = 0;
  // One level; AlreadyExists if it exists.
  virtual absl::Status CreateDir(const std::string& dir) = 0;
  // Removes an empty directory.
  virtual absl::Status RemoveDir(const std::string& dir) = 0;
  virtual absl::Status RemoveFile(const std::string& path) = 0;
  // Atomically replaces `to` (if it exists) with `from`.
  virtual absl::Status RenameFile(const std::string& from, const std::string& to) = 0;
  // Makes the entries of `dir` (creations, renames, removals) durable.
  virtual absl::Status SyncDir(const std::string& dir) = 0;
  // Bytes an unprivileged writer can still add on the file system of `path`.
  virtual absl::StatusOr<uint64_t> FreeSpace(const std::string& path) = 0;
};

// Forwards every call to `target` (not owned; must outlive the wrapper).
class EnvWrapper : public Env {
 public:
  explicit EnvWrapper(Env* target) : target_(target) {}
  Env* target() const { return target_; }

  absl::StatusOr<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& path) override {
    return target_->NewWritableFile(path);
  }
  absl::StatusOr<std::unique_ptr<WritableFile>> OpenWritableFile(const std::string& path) override {
    return target_->OpenWritableFile(path);
  }
  absl::StatusOr<std::unique_ptr<RandomAccessFile>> NewRandomAccessFile(const std::string& path,
                                                                        bool direct_io) override {
    return target_->NewRandomAccessFile(path, direct_io);
  }
  absl::StatusOr<std::unique_ptr<ReadOnlyRegion>> MapReadOnly(const std::string& path) override {
    return target_->MapReadOnly(path);
  }
  absl::StatusOr<FileType> GetFileType(const std::string& path) override {
    return target_->GetFileType(path);
  }
  absl::StatusOr<std::vector<std::string>> ListDir(const std::string& dir) override {
    return target_->ListDir(dir);
  }
  absl::Status CreateDir(const std::string& dir) override { return target_->CreateDir(dir); }
  absl::Status RemoveDir(const std::string& dir) override { return target_->RemoveDir(dir); }
  absl::Status RemoveFile(const std::string& path) override { return target_->RemoveFile(path); }
  absl::Status RenameFile(const std::string& from, const std::string& to) override {
    return target_->RenameFile(from, to);
  }
  absl::Status SyncDir(const std::string& dir) override { return target_->SyncDir(dir); }
  absl::StatusOr<uint64_t> FreeSpace(const std::string& path) override {
    return target_->FreeSpace(path);
  }

 private:
  Env* const target_;
};

// ---- Helpers built on any Env ----

// The directory part of `path` ("." when it has none).
std::string DirName(const std::string& path);
// True if `path` exists (any type).
bool FileExists(Env* env, const std::string& path);
absl::StatusOr<std::string> ReadFileToString(Env* env, const std::string& path);
// mkdir -p. OK if it exists as a directory; FailedPrecondition if a part of
// it is a file.
absl::Status CreateDirs(Env* env, const std::string& dir);

// Writes a file atomically and durably: the bytes go to a temporary name in
// the destination directory, Commit() syncs them, renames over `path` and
// syncs the directory. Readers see the old file or the whole new one, and
// after a crash the path holds one of them (plus at most a stray temp file,
// "<path>.tmp-*"). Destroyed without a successful Commit(), it removes the
// temp file. One thread at a time.
class AtomicFileWriter {
 public:
  // The parent directory must exist.
  static absl::StatusOr<std::unique_ptr<AtomicFileWriter>> Create(Env* env,
                                                                  const std::string& path);
  ~AtomicFileWriter();

  // The temporary file to write (Append / WriteAt / Truncate); do not Sync or
  // Close it.
  WritableFile* file() { return file_.get(); }
  const std::string& temp_path() const { return temp_; }
  absl::Status Commit();

 private:
  AtomicFileWriter(Env* env, std::string path, std::string temp,
                   std::unique_ptr<WritableFile> file);

  Env* const env_;
  const std::string path_;
  const std::string temp_;
  std::unique_ptr<WritableFile> file_;
  bool committed_ = false;
};

// AtomicFileWriter for a file whose contents are in memory.
absl::Status WriteFileAtomically(Env* env, const std::string& path, absl::string_view contents);

}  // namespace expertd

#endif  // EXPERTD_BASE_ENV_H_
