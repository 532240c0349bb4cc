#include "base/fault_injection_env.h"

#include <errno.h>

#include "base/memory_env.h"
#include "gtest/gtest.h"

namespace expertd {
namespace {

TEST(FaultInjectionEnvTest, FailsTheNthWriteOnceAndCounts) {
  MemoryEnv mem;
  FaultInjectionEnv env(&mem);
  env.FailNth(FaultOp::kWrite, 3, ENOSPC);
  auto f = env.NewWritableFile("/f");
  ASSERT_TRUE(f.ok());
  EXPECT_TRUE((*f)->Append("a").ok());
  EXPECT_TRUE((*f)->WriteAt(1, "b").ok());
  absl::Status third = (*f)->Append("c");
  EXPECT_EQ(third.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(third.message(), "/f: write failed: No space left on device");
  EXPECT_TRUE((*f)->Append("d").ok());  // not sticky
  EXPECT_EQ(env.count(FaultOp::kWrite), 4);
  EXPECT_EQ(env.injected(), 1);
  EXPECT_EQ(*ReadFileToString(&mem, "/f"), "ad");  // the failed write changed nothing
}

TEST(FaultInjectionEnvTest, StickyFaultsKeepFiringUntilCleared) {
  MemoryEnv mem;
  FaultInjectionEnv env(&mem);
  env.FailNth(FaultOp::kSync, 1, EIO, /*sticky=*/true);
  auto f = env.NewWritableFile("/f");
  ASSERT_TRUE(f.ok());
  EXPECT_EQ((*f)->Sync().code(), absl::StatusCode::kInternal);
  EXPECT_EQ(env.SyncDir("/").code(), absl::StatusCode::kInternal);
  EXPECT_EQ((*f)->Sync().code(), absl::StatusCode::kInternal);
  env.ClearFaults();
  EXPECT_TRUE((*f)->Sync().ok());
  EXPECT_EQ(env.injected(), 3);
}

TEST(FaultInjectionEnvTest, FailedCommitLeavesTheOldFileAndNoTemp) {
  MemoryEnv mem;
  FaultInjectionEnv env(&mem);
  ASSERT_TRUE(mem.CreateDir("/d").ok());
  ASSERT_TRUE(WriteFileAtomically(&env, "/d/f", "old").ok());
  for (FaultOp op : {FaultOp::kCreate, FaultOp::kWrite, FaultOp::kSync, FaultOp::kRename}) {
    env.FailNth(op, 1, EIO);
    absl::Status s = WriteFileAtomically(&env, "/d/f", "new");
    EXPECT_EQ(s.code(), absl::StatusCode::kInternal) << static_cast<int>(op);
    EXPECT_EQ(*ReadFileToString(&mem, "/d/f"), "old");
    EXPECT_EQ(*mem.ListDir("/d"), (std::vector<std::string>{"f"}));
    env.ClearFaults();
  }
}

TEST(FaultInjectionEnvTest, WrapsThePosixFileSystemToo) {
  FaultInjectionEnv env(Env::Default());
  env.FailNth(FaultOp::kRead, 1, EIO);
  auto r = env.NewRandomAccessFile("/proc/self/status", false);
  ASSERT_TRUE(r.ok()) << r.status();
  char c;
  EXPECT_EQ((*r)->ReadAt(0, 1, &c).code(), absl::StatusCode::kInternal);
  EXPECT_TRUE((*r)->ReadAt(0, 1, &c).ok());
}

}  // namespace
}  // namespace expertd
