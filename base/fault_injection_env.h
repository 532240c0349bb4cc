// FaultInjectionEnv: an EnvWrapper that counts file operations and fails
// chosen ones with a chosen errno, for tests of error paths (a full disk
// while writing a pack, an EIO on fsync, a rename refused). Wrap a MemoryEnv
// to also test crashes (MemoryEnv::SimulateCrash); wrap Env::Default() to
// test against the real file system.
//
//   MemoryEnv mem;
//   FaultInjectionEnv env(&mem);
//   env.FailNth(FaultOp::kWrite, 3, ENOSPC);            // the 3rd write from now
//   env.FailNth(FaultOp::kSync, 1, EIO, /*sticky=*/true);  // every sync from now
//
// Writes are WritableFile::Append, WriteAt and Truncate (growing); syncs are
// WritableFile::Sync and Env::SyncDir. An injected error reads like the real
// one ("<path>: write failed: No space left on device", mapped as in env.h)
// and changes nothing: no byte of a failed write lands.
//
// Thread-safe.
#ifndef EXPERTD_BASE_FAULT_INJECTION_ENV_H_
#define EXPERTD_BASE_FAULT_INJECTION_ENV_H_

#include <array>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/synchronization/mutex.h"
#include "base/env.h"

namespace expertd {

enum class FaultOp { kCreate, kWrite, kSync, kRename, kRemove, kRead };
inline constexpr int kNumFaultOps = 6;

class FaultInjectionEnv final : public EnvWrapper {
 public:
  explicit FaultInjectionEnv(Env* target) : EnvWrapper(target) {}

  // The n-th (1-based) `op` from now fails with errno `err`; sticky: that
  // one and every later one. Replaces an earlier rule for `op`.
  void FailNth(FaultOp op, int64_t n, int err, bool sticky = false);
  // Removes every rule.
  void ClearFaults();
  // Operations of kind `op` seen so far (failed ones included).
  int64_t count(FaultOp op) const;
  // Injected failures so far.
  int64_t injected() const;

  // Called by the wrapped files: counts `op` and returns the injected error
  // for it, if any ("<path>: <what>: <strerror>").
  absl::Status Check(FaultOp op, const std::string& path, absl::string_view what);

  absl::StatusOr<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& path) override;
  absl::StatusOr<std::unique_ptr<WritableFile>> OpenWritableFile(const std::string& path) override;
  absl::StatusOr<std::unique_ptr<RandomAccessFile>> NewRandomAccessFile(const std::string& path,
                                                                        bool direct_io) override;
  absl::Status RemoveFile(const std::string& path) override;
  absl::Status RenameFile(const std::string& from, const std::string& to) override;
  absl::Status SyncDir(const std::string& dir) override;

 private:
  struct Rule {
    int64_t countdown = 0;  // 0: no rule; fails when it reaches 1
    int err = 0;
    bool sticky = false;
    bool firing = false;  // a sticky rule that has fired
  };

  mutable absl::Mutex mu_;
  std::array<Rule, kNumFaultOps> rules_ ABSL_GUARDED_BY(mu_);
  std::array<int64_t, kNumFaultOps> counts_ ABSL_GUARDED_BY(mu_) = {};
  int64_t injected_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace expertd

#endif  // EXPERTD_BASE_FAULT_INJECTION_ENV_H_
