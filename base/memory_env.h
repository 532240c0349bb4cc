// MemoryEnv: an in-memory file system for tests, with the crash model of
// base/env.h made exact. Each file keeps its live bytes and the bytes of its
// last Sync(); each directory entry keeps its live target and the target it
// had at the parent's last SyncDir(). SimulateCrash() throws away everything
// not durable: names revert to their durable targets (an unsynced rename is
// undone, an unsynced creation vanishes, an unsynced removal comes back) and
// every file reverts to its last synced bytes.
//
// Directories are durable as soon as they are created (a simplification: the
// project syncs files and their directory, not directory trees). Paths are
// plain strings: "a/b" and "/a/b" are different files; "" "." and "/" are
// roots that always exist.
//
// Direct-I/O files behave like O_DIRECT: a read whose buffer, offset or size
// is not 4 KiB aligned fails with InvalidArgument.
//
// Capacity: writes that would grow the total size past the capacity fail
// with ResourceExhausted (ENOSPC); FreeSpace() reports what is left.
//
// Thread-safe (one mutex). Open files keep their file alive after a removal
// or rename, as POSIX descriptors do.
#ifndef EXPERTD_BASE_MEMORY_ENV_H_
#define EXPERTD_BASE_MEMORY_ENV_H_

#include <map>
#include <memory>
#include <set>
#include <string>

#include "absl/synchronization/mutex.h"
#include "base/env.h"

namespace expertd {

class MemoryEnv final : public Env {
 public:
  struct Node;  // one file's bytes (live and synced)

  explicit MemoryEnv(uint64_t capacity_bytes = uint64_t{1} << 40);
  ~MemoryEnv() override;

  // Drops everything not durable (see the file comment). Files still open
  // keep working on their (reverted) bytes; tests should reopen.
  void SimulateCrash();
  void SetCapacity(uint64_t bytes);

  absl::StatusOr<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& path) override;
  absl::StatusOr<std::unique_ptr<WritableFile>> OpenWritableFile(const std::string& path) override;
  absl::StatusOr<std::unique_ptr<RandomAccessFile>> NewRandomAccessFile(const std::string& path,
                                                                        bool direct_io) override;
  absl::StatusOr<std::unique_ptr<ReadOnlyRegion>> MapReadOnly(const std::string& path) override;
  absl::StatusOr<FileType> GetFileType(const std::string& path) override;
  absl::StatusOr<std::vector<std::string>> ListDir(const std::string& dir) override;
  absl::Status CreateDir(const std::string& dir) override;
  absl::Status RemoveDir(const std::string& dir) override;
  absl::Status RemoveFile(const std::string& path) override;
  absl::Status RenameFile(const std::string& from, const std::string& to) override;
  absl::Status SyncDir(const std::string& dir) override;
  absl::StatusOr<uint64_t> FreeSpace(const std::string& path) override;

  // Used by the file objects. REQUIRES: mu() is held.
  absl::Status ReserveLocked(uint64_t old_size, uint64_t new_size, const std::string& path)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Mutex* mu() ABSL_LOCK_RETURNED(mu_) { return &mu_; }

 private:
  bool DirExistsLocked(const std::string& dir) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status CheckParentLocked(const std::string& path) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<std::shared_ptr<Node>> FindLocked(const std::string& path) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  uint64_t UsedLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  absl::Mutex mu_;
  uint64_t capacity_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::shared_ptr<Node>> files_ ABSL_GUARDED_BY(mu_);  // live names
  std::map<std::string, std::shared_ptr<Node>> durable_files_
      ABSL_GUARDED_BY(mu_);  // as of SyncDir
  std::set<std::string> dirs_ ABSL_GUARDED_BY(mu_);
};

}  // namespace expertd

#endif  // EXPERTD_BASE_MEMORY_ENV_H_
