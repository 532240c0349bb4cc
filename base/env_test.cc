// The Env contract, checked on both the POSIX file system (in a test temp
// directory) and MemoryEnv, plus the atomic-write helper.
#include "base/env.h"

#include <errno.h>
#include <stdlib.h>

#include <cstring>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "base/memory_env.h"
#include "gtest/gtest.h"

namespace expertd {
namespace {

class EnvContractTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    if (GetParam()) {
      env_ = Env::Default();
      std::string tmpl = absl::StrCat(::testing::TempDir(), "/envXXXXXX");
      ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
      root_ = tmpl;
    } else {
      memory_ = std::make_unique<MemoryEnv>();
      env_ = memory_.get();
      root_ = "/root";
      ASSERT_TRUE(env_->CreateDir(root_).ok());
    }
  }
  std::string Path(const std::string& name) const { return root_ + "/" + name; }

  std::unique_ptr<MemoryEnv> memory_;
  Env* env_ = nullptr;
  std::string root_;
};

TEST_P(EnvContractTest, WriteReadAppendAndPositionalWrites) {
  auto f = env_->NewWritableFile(Path("a"));
  ASSERT_TRUE(f.ok()) << f.status();
  ASSERT_TRUE((*f)->Append("hello ").ok());
  ASSERT_TRUE((*f)->Append("world").ok());
  ASSERT_TRUE((*f)->WriteAt(0, "J").ok());
  ASSERT_TRUE((*f)->WriteAt(13, "!").ok());  // a hole of zeros before it
  ASSERT_TRUE((*f)->Sync().ok());
  ASSERT_TRUE((*f)->Close().ok());
  EXPECT_EQ((*f)->Append("x").code(), absl::StatusCode::kFailedPrecondition);
  auto text = ReadFileToString(env_, Path("a"));
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text, std::string("Jello world\0\0!", 14));

  auto r = env_->NewRandomAccessFile(Path("a"));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*(*r)->Size(), 14u);
  char buf[5] = {};
  ASSERT_TRUE((*r)->ReadAt(6, 5, buf).ok());
  EXPECT_EQ(std::string(buf, 5), "world");
  EXPECT_EQ((*r)->ReadAt(10, 5, buf).code(), absl::StatusCode::kDataLoss);  // past the end

  auto w = env_->OpenWritableFile(Path("a"));  // in place, no truncation
  ASSERT_TRUE(w.ok());
  ASSERT_TRUE((*w)->WriteAt(1, "E").ok());
  ASSERT_TRUE((*w)->Truncate(5).ok());
  ASSERT_TRUE((*w)->Close().ok());
  EXPECT_EQ(*ReadFileToString(env_, Path("a")), "JEllo");
  auto m = env_->MapReadOnly(Path("a"));
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(std::string(reinterpret_cast<const char*>((*m)->data()), (*m)->size()), "JEllo");

  auto again = env_->NewWritableFile(Path("a"));  // truncates
  ASSERT_TRUE(again.ok());
  ASSERT_TRUE((*again)->Close().ok());
  auto empty = env_->MapReadOnly(Path("a"));
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ((*empty)->size(), 0u);
}

TEST_P(EnvContractTest, DirectoriesListRenameRemove) {
  ASSERT_TRUE(CreateDirs(env_, Path("x/y/z")).ok());
  ASSERT_TRUE(CreateDirs(env_, Path("x/y")).ok());  // exists: fine
  EXPECT_EQ(env_->CreateDir(Path("x")).code(), absl::StatusCode::kAlreadyExists);
  ASSERT_TRUE(WriteFileAtomically(env_, Path("x/f1"), "one").ok());
  ASSERT_TRUE(WriteFileAtomically(env_, Path("x/f2"), "two").ok());
  EXPECT_EQ(*env_->GetFileType(Path("x")), FileType::kDirectory);
  EXPECT_EQ(*env_->GetFileType(Path("x/f1")), FileType::kRegular);
  EXPECT_EQ(env_->GetFileType(Path("x/nope")).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(*env_->ListDir(Path("x")), (std::vector<std::string>{"f1", "f2", "y"}));
  EXPECT_EQ(CreateDirs(env_, Path("x/f1/sub")).code(), absl::StatusCode::kFailedPrecondition);

  ASSERT_TRUE(env_->RenameFile(Path("x/f1"), Path("x/f2")).ok());  // replaces
  EXPECT_EQ(*ReadFileToString(env_, Path("x/f2")), "one");
  EXPECT_FALSE(FileExists(env_, Path("x/f1")));
  EXPECT_EQ(env_->RenameFile(Path("x/f1"), Path("x/f3")).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(env_->RemoveDir(Path("x/y")).code(),
            absl::StatusCode::kFailedPrecondition);  // not empty
  ASSERT_TRUE(env_->RemoveDir(Path("x/y/z")).ok());
  ASSERT_TRUE(env_->RemoveFile(Path("x/f2")).ok());
  EXPECT_EQ(env_->RemoveFile(Path("x/f2")).code(), absl::StatusCode::kNotFound);
  ASSERT_TRUE(env_->SyncDir(Path("x")).ok());
  EXPECT_EQ(*env_->ListDir(Path("x")), (std::vector<std::string>{"y"}));
  EXPECT_EQ(env_->ListDir(Path("none")).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(env_->NewWritableFile(Path("none/f")).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(env_->NewRandomAccessFile(Path("none")).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(env_->OpenWritableFile(Path("none")).status().code(), absl::StatusCode::kNotFound);
  auto free_bytes = env_->FreeSpace(root_);
  ASSERT_TRUE(free_bytes.ok()) << free_bytes.status();
  EXPECT_GT(*free_bytes, 0u);
}

TEST_P(EnvContractTest, AtomicWriterLeavesNothingWhenNotCommitted) {
  ASSERT_TRUE(WriteFileAtomically(env_, Path("f"), "old").ok());
  {
    auto w = AtomicFileWriter::Create(env_, Path("f"));
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE((*w)->file()->Append("half of the new").ok());
    EXPECT_TRUE(FileExists(env_, (*w)->temp_path()));
  }  // abandoned
  EXPECT_EQ(*ReadFileToString(env_, Path("f")), "old");
  EXPECT_EQ(*env_->ListDir(root_), (std::vector<std::string>{"f"}));
  ASSERT_TRUE(WriteFileAtomically(env_, Path("f"), "new").ok());
  EXPECT_EQ(*ReadFileToString(env_, Path("f")), "new");
  EXPECT_EQ(*env_->ListDir(root_), (std::vector<std::string>{"f"}));
}

INSTANTIATE_TEST_SUITE_P(PosixAndMemory, EnvContractTest, ::testing::Values(true, false),
                         [](const ::testing::TestParamInfo<bool>& p) {
                           return p.param ? "Posix" : "Memory";
                         });

TEST(PosixEnvTest, ErrnoMapping) {
  EXPECT_EQ(ErrnoToStatus(ENOSPC, "p").code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(ErrnoToStatus(EIO, "p").code(), absl::StatusCode::kInternal);
  EXPECT_EQ(ErrnoToStatus(EACCES, "p").code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(ErrnoToStatus(ENOENT, "p").code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(ErrnoToStatus(ENOSPC, "a/b: write failed").message(),
            "a/b: write failed: No space left on device");
}

}  // namespace
}  // namespace expertd
