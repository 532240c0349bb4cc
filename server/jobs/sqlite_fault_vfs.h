// SqliteFaultVfs: a SQLite VFS for tests that passes everything through to
// the default VFS and, when told, refuses writes the way a full disk does:
// xWrite returns SQLITE_FULL, which is what SQLite's own unix VFS returns when
// write() fails with ENOSPC. It is the database's counterpart of
// FaultInjectionEnv (base/fault_injection_env.h), which the job store cannot
// use: SQLite does its own file I/O.
//
//   SqliteFaultVfs* vfs = SqliteFaultVfs::Install();  // before opening the database
//   vfs->FailWrites(1);            // the next write fails
//   vfs->FailWrites(kEveryWrite);  // every write until ClearFaults
//
// Install registers the VFS as SQLite's default once per process (it is never
// unregistered, so no connection outlives it); connections opened before
// Install keep the VFS they were opened with. Disarmed, it changes nothing.
// A refused write writes no byte.
//
// Thread-safe (SQLite calls it from whichever thread runs a connection).
#ifndef EXPERTD_SERVER_JOBS_SQLITE_FAULT_VFS_H_
#define EXPERTD_SERVER_JOBS_SQLITE_FAULT_VFS_H_

#include <atomic>
#include <cstdint>

namespace expertd::server::jobs {

class SqliteFaultVfs {
 public:
  static constexpr int64_t kEveryWrite = -1;

  // Registers the VFS as the default (the first call) and returns it.
  static SqliteFaultVfs* Install();

  // The next `count` writes fail with SQLITE_FULL (kEveryWrite: every write
  // until ClearFaults). Replaces an earlier rule.
  void FailWrites(int64_t count) { remaining_failures_.store(count); }
  void ClearFaults() { remaining_failures_.store(0); }
  // Writes refused since Install.
  int64_t failed_writes() const { return failed_writes_.load(); }

  // Called by the VFS's xWrite: whether this write fails.
  bool TakeWriteFault();

 private:
  SqliteFaultVfs() = default;
  std::atomic<int64_t> remaining_failures_{0};
  std::atomic<int64_t> failed_writes_{0};
};

}  // namespace expertd::server::jobs

#endif  // EXPERTD_SERVER_JOBS_SQLITE_FAULT_VFS_H_
