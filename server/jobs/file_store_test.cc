#include "server/jobs/file_store.h"

#include <errno.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "absl/strings/str_cat.h"
#include "base/fault_injection_env.h"
#include "gtest/gtest.h"

namespace expertd::server::jobs {
namespace {

class FileStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string base = std::getenv("TEST_TMPDIR");
    const std::string name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    root_ = absl::StrCat(base, "/", name);
    data_dir_ = root_ + "/data";
    ASSERT_EQ(std::system(("rm -rf '" + root_ + "'").c_str()), 0);
    ASSERT_TRUE(CreateDirs(Env::Default(), data_dir_).ok());
    auto store = JobStore::Open(data_dir_ + "/expertd.db");
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = *std::move(store);
  }

  std::unique_ptr<FileStore> Open(uint64_t cap, Env* env) {
    FileStoreOptions o;
    o.env = env;
    o.data_dir = data_dir_;
    o.max_upload_bytes = cap;
    auto files = FileStore::Open(o, store_.get());
    EXPECT_TRUE(files.ok()) << files.status();
    return files.ok() ? *std::move(files) : nullptr;
  }

  static v1::UploadFileRequest::Metadata Meta(const std::string& name) {
    v1::UploadFileRequest::Metadata m;
    m.set_filename(name);
    return m;
  }

  size_t FilesOnDisk() {
    auto entries = Env::Default()->ListDir(data_dir_ + "/files");
    return entries.ok() ? entries->size() : 0;
  }

  std::string root_, data_dir_;
  std::unique_ptr<JobStore> store_;
};

TEST_F(FileStoreTest, UploadStoresBytesWithSha256AndLists) {
  auto files = Open(1 << 20, Env::Default());
  auto upload = files->BeginUpload(Meta("train.jsonl"));
  ASSERT_TRUE(upload.ok()) << upload.status();
  ASSERT_TRUE((*upload)->Append("a").ok());
  ASSERT_TRUE((*upload)->Append("bc").ok());
  auto info = (*upload)->Finish();
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->id().rfind("file-", 0), 0u);
  EXPECT_EQ(info->bytes(), 3u);
  EXPECT_EQ(info->sha256(), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(info->purpose(), "fine-tune");
  auto bytes = ReadFileToString(Env::Default(), data_dir_ + "/files/" + info->id());
  ASSERT_TRUE(bytes.ok());
  EXPECT_EQ(*bytes, "abc");
  auto list = files->List();
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 1u);
  EXPECT_EQ((*list)[0].filename(), "train.jsonl");
  auto resolved = files->Resolve("spec.training_file", info->id());
  ASSERT_TRUE(resolved.ok()) << resolved.status();
  EXPECT_EQ(*resolved, files->data_dir() + "/files/" + info->id());
  ASSERT_TRUE(files->Delete(info->id()).ok());
  EXPECT_EQ(FilesOnDisk(), 0u);
  EXPECT_EQ(files->Delete(info->id()).code(), absl::StatusCode::kNotFound);
}

TEST_F(FileStoreTest, SizeCapIsResourceExhaustedAndLeavesNothing) {
  auto files = Open(4, Env::Default());
  {
    auto upload = files->BeginUpload(Meta("big.jsonl"));
    ASSERT_TRUE(upload.ok());
    ASSERT_TRUE((*upload)->Append("abcd").ok());
    absl::Status s = (*upload)->Append("e");
    EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
    EXPECT_NE(s.message().find("--max_upload_bytes"), std::string::npos);
    EXPECT_EQ((*upload)->Finish().status().code(), absl::StatusCode::kResourceExhausted);
  }
  EXPECT_EQ(FilesOnDisk(), 0u);
  EXPECT_TRUE(files->List()->empty());
}

TEST_F(FileStoreTest, FullDiskFailsTheUploadWithResourceExhausted) {
  FaultInjectionEnv env(Env::Default());
  auto files = Open(1 << 20, &env);
  {
    auto upload = files->BeginUpload(Meta("x.jsonl"));
    ASSERT_TRUE(upload.ok());
    env.FailNth(FaultOp::kWrite, 1, ENOSPC);
    absl::Status s = (*upload)->Append("hello");
    EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
    EXPECT_NE(s.message().find("No space left"), std::string::npos) << s;
  }
  EXPECT_EQ(FilesOnDisk(), 0u);
  // The store keeps working once space is back.
  env.ClearFaults();
  auto upload = files->BeginUpload(Meta("x.jsonl"));
  ASSERT_TRUE(upload.ok());
  ASSERT_TRUE((*upload)->Append("hello").ok());
  EXPECT_TRUE((*upload)->Finish().ok());
}

TEST_F(FileStoreTest, FailedFsyncRecordsNothing) {
  FaultInjectionEnv env(Env::Default());
  auto files = Open(1 << 20, &env);
  auto upload = files->BeginUpload(Meta("x.jsonl"));
  ASSERT_TRUE(upload.ok());
  ASSERT_TRUE((*upload)->Append("hello").ok());
  env.FailNth(FaultOp::kSync, 1, EIO);
  EXPECT_FALSE((*upload)->Finish().ok());
  upload->reset();
  EXPECT_TRUE(files->List()->empty());
  EXPECT_EQ(FilesOnDisk(), 0u);
}

TEST_F(FileStoreTest, BadFilenamesAreRefused) {
  auto files = Open(1 << 20, Env::Default());
  for (const std::string& name :
       std::vector<std::string>{"", "../x", "a/b", std::string(300, 'a')}) {
    auto upload = files->BeginUpload(Meta(name));
    ASSERT_FALSE(upload.ok()) << name;
    EXPECT_EQ(upload.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(upload.status().message().find("metadata.filename"), std::string::npos);
  }
}

TEST_F(FileStoreTest, PathsOutsideTheDataDirAreRefused) {
  auto files = Open(1 << 20, Env::Default());
  ASSERT_TRUE(WriteFileAtomically(Env::Default(), data_dir_ + "/inside.jsonl", "{}\n").ok());
  ASSERT_TRUE(WriteFileAtomically(Env::Default(), root_ + "/outside.jsonl", "{}\n").ok());
  ASSERT_EQ(::symlink((root_ + "/outside.jsonl").c_str(), (data_dir_ + "/link.jsonl").c_str()), 0);
  ASSERT_EQ(::symlink((data_dir_ + "/inside.jsonl").c_str(), (data_dir_ + "/ok.jsonl").c_str()), 0);

  auto inside = files->Resolve("spec.training_file", "inside.jsonl");
  ASSERT_TRUE(inside.ok()) << inside.status();
  EXPECT_TRUE(files->Resolve("spec.training_file", "files/../inside.jsonl").ok());
  EXPECT_TRUE(files->Resolve("spec.training_file", "ok.jsonl").ok());
  EXPECT_TRUE(files->Resolve("spec.training_file", files->data_dir() + "/inside.jsonl").ok());

  for (const std::string bad :
       {std::string("../outside.jsonl"), std::string("link.jsonl"), root_ + "/outside.jsonl",
        std::string("/etc/passwd"), std::string("missing.jsonl"), std::string("files"),
        std::string("file-0000000000000000")}) {
    auto r = files->Resolve("spec.validation_file", bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_EQ(r.status().message().rfind("spec.validation_file: ", 0), 0u) << r.status();
  }
}

}  // namespace
}  // namespace expertd::server::jobs
