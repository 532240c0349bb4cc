// MemoryEnv's crash model (base/env.h): only synced bytes and synced
// directory entries survive SimulateCrash.
#include "base/memory_env.h"

#include <cstdlib>

#include "gtest/gtest.h"

namespace expertd {
namespace {

absl::Status Write(Env* env, const std::string& path, const std::string& text, bool sync) {
  auto f = env->NewWritableFile(path);
  if (!f.ok()) return f.status();
  absl::Status s = (*f)->Append(text);
  if (s.ok() && sync) s = (*f)->Sync();
  if (s.ok()) s = (*f)->Close();
  return s;
}

class MemoryEnvCrashTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(env_.CreateDir("/d").ok()); }
  std::string Read(const std::string& path) {
    auto s = ReadFileToString(&env_, path);
    return s.ok() ? *s : "<" + std::string(absl::StatusCodeToString(s.status().code())) + ">";
  }
  MemoryEnv env_;
};

TEST_F(MemoryEnvCrashTest, UnsyncedDataIsGone) {
  ASSERT_TRUE(Write(&env_, "/d/f", "durable", true).ok());
  ASSERT_TRUE(env_.SyncDir("/d").ok());
  auto f = env_.OpenWritableFile("/d/f");
  ASSERT_TRUE(f.ok());
  ASSERT_TRUE((*f)->WriteAt(7, " and more").ok());  // never synced
  EXPECT_EQ(Read("/d/f"), "durable and more");
  env_.SimulateCrash();
  EXPECT_EQ(Read("/d/f"), "durable");
}

TEST_F(MemoryEnvCrashTest, SyncedFileWhoseDirectoryWasNotSyncedIsGone) {
  ASSERT_TRUE(Write(&env_, "/d/f", "data", true).ok());
  env_.SimulateCrash();
  EXPECT_EQ(Read("/d/f"), "<NOT_FOUND>");
  ASSERT_TRUE(Write(&env_, "/d/f", "data", false).ok());
  ASSERT_TRUE(env_.SyncDir("/d").ok());  // the name is durable, the bytes are not
  env_.SimulateCrash();
  EXPECT_EQ(Read("/d/f"), "");
}

TEST_F(MemoryEnvCrashTest, RenameIsDurableOnlyAfterTheDirectoryIsSynced) {
  ASSERT_TRUE(Write(&env_, "/d/f", "old", true).ok());
  ASSERT_TRUE(env_.SyncDir("/d").ok());
  ASSERT_TRUE(Write(&env_, "/d/f.tmp", "new", true).ok());
  ASSERT_TRUE(env_.RenameFile("/d/f.tmp", "/d/f").ok());
  EXPECT_EQ(Read("/d/f"), "new");  // visible at once
  env_.SimulateCrash();            // but not durable
  EXPECT_EQ(Read("/d/f"), "old");
  EXPECT_EQ(Read("/d/f.tmp"), "<NOT_FOUND>");  // created after the last SyncDir too

  ASSERT_TRUE(Write(&env_, "/d/f.tmp", "new", true).ok());
  ASSERT_TRUE(env_.SyncDir("/d").ok());
  ASSERT_TRUE(env_.RenameFile("/d/f.tmp", "/d/f").ok());
  env_.SimulateCrash();  // the rename is undone: both names as synced
  EXPECT_EQ(Read("/d/f"), "old");
  EXPECT_EQ(Read("/d/f.tmp"), "new");

  ASSERT_TRUE(env_.RenameFile("/d/f.tmp", "/d/f").ok());
  ASSERT_TRUE(env_.SyncDir("/d").ok());
  env_.SimulateCrash();
  EXPECT_EQ(Read("/d/f"), "new");
  EXPECT_EQ(Read("/d/f.tmp"), "<NOT_FOUND>");
}

TEST_F(MemoryEnvCrashTest, RemovalIsDurableOnlyAfterTheDirectoryIsSynced) {
  ASSERT_TRUE(Write(&env_, "/d/f", "kept", true).ok());
  ASSERT_TRUE(env_.SyncDir("/d").ok());
  ASSERT_TRUE(env_.RemoveFile("/d/f").ok());
  env_.SimulateCrash();
  EXPECT_EQ(Read("/d/f"), "kept");
  ASSERT_TRUE(env_.RemoveFile("/d/f").ok());
  ASSERT_TRUE(env_.SyncDir("/d").ok());
  env_.SimulateCrash();
  EXPECT_EQ(Read("/d/f"), "<NOT_FOUND>");
}

TEST_F(MemoryEnvCrashTest, WriteFileAtomicallyIsDurableAndAllOrNothing) {
  ASSERT_TRUE(WriteFileAtomically(&env_, "/d/cfg", "v1").ok());
  env_.SimulateCrash();
  EXPECT_EQ(Read("/d/cfg"), "v1");
  // A crash in the middle of a replacement (temp written, not committed).
  auto w = AtomicFileWriter::Create(&env_, "/d/cfg");
  ASSERT_TRUE(w.ok());
  ASSERT_TRUE((*w)->file()->Append("v2 partial").ok());
  env_.SimulateCrash();
  EXPECT_EQ(Read("/d/cfg"), "v1");
  EXPECT_EQ(*env_.ListDir("/d"), (std::vector<std::string>{"cfg"}));
}

TEST(MemoryEnvTest, CapacityGivesEnospcAndFreeSpace) {
  MemoryEnv env(100);
  EXPECT_EQ(*env.FreeSpace("/"), 100u);
  auto f = env.NewWritableFile("/f");
  ASSERT_TRUE(f.ok());
  ASSERT_TRUE((*f)->Append(std::string(60, 'a')).ok());
  EXPECT_EQ(*env.FreeSpace("/"), 40u);
  absl::Status full = (*f)->Append(std::string(41, 'b'));
  EXPECT_EQ(full.code(), absl::StatusCode::kResourceExhausted) << full;
  EXPECT_NE(full.message().find("/f"), absl::string_view::npos);
  EXPECT_EQ(*ReadFileToString(&env, "/f"), std::string(60, 'a'));  // nothing of it landed
  ASSERT_TRUE((*f)->Append(std::string(40, 'b')).ok());
  EXPECT_EQ(*env.FreeSpace("/"), 0u);
}

TEST(MemoryEnvTest, DirectReadsMustBeAligned) {
  MemoryEnv env;
  ASSERT_TRUE(WriteFileAtomically(&env, "/f", std::string(8192, 'x')).ok());
  auto r = env.NewRandomAccessFile("/f", /*direct_io=*/true);
  ASSERT_TRUE(r.ok());
  void* buf = std::aligned_alloc(4096, 8192);
  EXPECT_TRUE((*r)->ReadAt(4096, 4096, buf).ok());
  EXPECT_EQ((*r)->ReadAt(100, 4096, buf).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*r)->ReadAt(0, 100, buf).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*r)->ReadAt(0, 4096, static_cast<char*>(buf) + 1).code(),
            absl::StatusCode::kInvalidArgument);
  std::free(buf);
}

}  // namespace
}  // namespace expertd
