#include "server/jobs/sqlite_fault_vfs.h"

#include <sqlite3.h>

#include <cstdlib>
#include <mutex>

namespace expertd::server::jobs {
namespace {

SqliteFaultVfs* g_faults = nullptr;
sqlite3_vfs* g_base = nullptr;  // the default VFS before Install (unix)
sqlite3_vfs g_vfs;

// Our file: the base VFS's file lives right after it, in the same allocation
// (szOsFile covers both), as SQLite's own shim VFSes do.
struct FaultFile {
  sqlite3_file base;
  sqlite3_file* real;
};

sqlite3_file* Real(sqlite3_file* f) { return reinterpret_cast<FaultFile*>(f)->real; }

int Close(sqlite3_file* f) { return Real(f)->pMethods->xClose(Real(f)); }
int Read(sqlite3_file* f, void* buf, int n, sqlite3_int64 off) {
  return Real(f)->pMethods->xRead(Real(f), buf, n, off);
}
int Write(sqlite3_file* f, const void* buf, int n, sqlite3_int64 off) {
  if (g_faults->TakeWriteFault()) return SQLITE_FULL;
  return Real(f)->pMethods->xWrite(Real(f), buf, n, off);
}
int Truncate(sqlite3_file* f, sqlite3_int64 size) {
  return Real(f)->pMethods->xTruncate(Real(f), size);
}
int Sync(sqlite3_file* f, int flags) { return Real(f)->pMethods->xSync(Real(f), flags); }
int FileSize(sqlite3_file* f, sqlite3_int64* size) {
  return Real(f)->pMethods->xFileSize(Real(f), size);
}
int Lock(sqlite3_file* f, int level) { return Real(f)->pMethods->xLock(Real(f), level); }
int Unlock(sqlite3_file* f, int level) { return Real(f)->pMethods->xUnlock(Real(f), level); }
int CheckReservedLock(sqlite3_file* f, int* out) {
  return Real(f)->pMethods->xCheckReservedLock(Real(f), out);
}
int FileControl(sqlite3_file* f, int op, void* arg) {
  return Real(f)->pMethods->xFileControl(Real(f), op, arg);
}
int SectorSize(sqlite3_file* f) { return Real(f)->pMethods->xSectorSize(Real(f)); }
int DeviceCharacteristics(sqlite3_file* f) {
  return Real(f)->pMethods->xDeviceCharacteristics(Real(f));
}
int ShmMap(sqlite3_file* f, int region, int size, int extend, void volatile** out) {
  return Real(f)->pMethods->xShmMap(Real(f), region, size, extend, out);
}
int ShmLock(sqlite3_file* f, int offset, int n, int flags) {
  return Real(f)->pMethods->xShmLock(Real(f), offset, n, flags);
}
void ShmBarrier(sqlite3_file* f) { Real(f)->pMethods->xShmBarrier(Real(f)); }
int ShmUnmap(sqlite3_file* f, int delete_flag) {
  return Real(f)->pMethods->xShmUnmap(Real(f), delete_flag);
}
int Fetch(sqlite3_file* f, sqlite3_int64 off, int n, void** out) {
  return Real(f)->pMethods->xFetch(Real(f), off, n, out);
}
int Unfetch(sqlite3_file* f, sqlite3_int64 off, void* p) {
  return Real(f)->pMethods->xUnfetch(Real(f), off, p);
}

// Version 3, as the unix VFS's files are (WAL needs the shm methods).
const sqlite3_io_methods kMethods = {3,
                                     Close,
                                     Read,
                                     Write,
                                     Truncate,
                                     Sync,
                                     FileSize,
                                     Lock,
                                     Unlock,
                                     CheckReservedLock,
                                     FileControl,
                                     SectorSize,
                                     DeviceCharacteristics,
                                     ShmMap,
                                     ShmLock,
                                     ShmBarrier,
                                     ShmUnmap,
                                     Fetch,
                                     Unfetch};

int Open(sqlite3_vfs*, sqlite3_filename name, sqlite3_file* f, int flags, int* out_flags) {
  FaultFile* file = reinterpret_cast<FaultFile*>(f);
  file->real = reinterpret_cast<sqlite3_file*>(file + 1);
  const int rc = g_base->xOpen(g_base, name, file->real, flags, out_flags);
  // SQLite calls xClose only on a file whose pMethods is set.
  file->base.pMethods = file->real->pMethods != nullptr ? &kMethods : nullptr;
  return rc;
}

}  // namespace

bool SqliteFaultVfs::TakeWriteFault() {
  int64_t left = remaining_failures_.load();
  while (true) {
    if (left == 0) return false;
    if (left == kEveryWrite) break;
    if (remaining_failures_.compare_exchange_weak(left, left - 1)) break;
  }
  failed_writes_.fetch_add(1);
  return true;
}

SqliteFaultVfs* SqliteFaultVfs::Install() {
  static std::once_flag once;
  std::call_once(once, [] {
    g_faults = new SqliteFaultVfs();
    g_base = sqlite3_vfs_find(nullptr);
    if (g_base == nullptr) std::abort();  // SQLite always has a default VFS
    // Every method but xOpen is the base's: they take the VFS only for its
    // settings (mxPathname, pAppData), copied here.
    g_vfs = *g_base;
    g_vfs.pNext = nullptr;
    g_vfs.zName = "expertd-fault";
    g_vfs.szOsFile = static_cast<int>(sizeof(FaultFile)) + g_base->szOsFile;
    g_vfs.xOpen = Open;
    if (sqlite3_vfs_register(&g_vfs, /*makeDflt=*/1) != SQLITE_OK) std::abort();
  });
  return g_faults;
}

}  // namespace expertd::server::jobs
