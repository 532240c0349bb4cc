#include "server/jobs/job_store.h"

#include <cstdlib>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "server/jobs/sqlite.h"
#include "server/jobs/sqlite_fault_vfs.h"

namespace expertd::server::jobs {
namespace {

std::string FreshDbPath(const std::string& name) {
  const std::string path = absl::StrCat(std::getenv("TEST_TMPDIR"), "/", name, ".db");
  for (const char* suffix : {"", "-wal", "-shm"}) std::remove((path + suffix).c_str());
  return path;
}

v1::FineTuneJob NewJob(const std::string& id, int64_t created_seconds) {
  v1::FineTuneJob job;
  job.set_id(id);
  job.mutable_spec()->set_training_file("file-1");
  job.mutable_spec()->mutable_hyperparameters()->set_learning_rate(1e-4);
  job.set_status(v1::JOB_STATUS_VALIDATING);
  job.mutable_create_time()->set_seconds(created_seconds);
  return job;
}

TEST(JobStoreTest, SchemaVersionAndPragmas) {
  const std::string path = FreshDbPath("schema");
  { ASSERT_TRUE(JobStore::Open(path).ok()); }
  auto db = SqliteDb::Open(path);
  ASSERT_TRUE(db.ok());
  auto q = SqliteStatement::Prepare(db->get(), "SELECT MAX(version) FROM schema_version");
  ASSERT_TRUE(q.ok());
  ASSERT_TRUE(*q->Step());
  EXPECT_EQ(q->Int(0), kJobStoreSchemaVersion);
  auto mode = SqliteStatement::Prepare(db->get(), "PRAGMA journal_mode");
  ASSERT_TRUE(mode.ok());
  ASSERT_TRUE(*mode->Step());
  EXPECT_EQ(mode->Text(0), "wal");
  // Reopening applies no migration twice.
  EXPECT_TRUE(JobStore::Open(path).ok());
}

TEST(JobStoreTest, RefusesANewerSchema) {
  const std::string path = FreshDbPath("newer");
  { ASSERT_TRUE(JobStore::Open(path).ok()); }
  {
    auto db = SqliteDb::Open(path);
    ASSERT_TRUE(db.ok());
    ASSERT_TRUE((*db)->Exec("INSERT INTO schema_version VALUES (99)").ok());
  }
  auto reopened = JobStore::Open(path);
  ASSERT_FALSE(reopened.ok());
  EXPECT_EQ(reopened.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(reopened.status().message().find("schema version 99"), std::string::npos);
}

TEST(JobStoreTest, JobsEventsAndCheckpointsSurviveReopen) {
  const std::string path = FreshDbPath("reopen");
  {
    auto store = JobStore::Open(path);
    ASSERT_TRUE(store.ok());
    v1::FineTuneJob job = NewJob("ftjob-a", 100);
    EventDraft created;
    created.message = "created";
    ASSERT_TRUE((*store)->InsertJob(job, "req-1", created, absl::FromUnixSeconds(100)).ok());
    job.set_status(v1::JOB_STATUS_RUNNING);
    job.mutable_progress()->set_step(3);
    EventDraft progress;
    progress.message = "step 3";
    progress.progress = job.progress();
    auto seq = (*store)->UpdateJob(job, &progress, absl::FromUnixSeconds(101));
    ASSERT_TRUE(seq.ok());
    EXPECT_EQ(*seq, 2u);
    CheckpointRecord c{"ckpt-a-3", "ftjob-a", "/x/ckpt", 3, "m:ft"};
    ASSERT_TRUE((*store)->InsertCheckpoint(c, absl::FromUnixSeconds(102)).ok());
  }
  auto store = JobStore::Open(path);
  ASSERT_TRUE(store.ok());
  auto job = (*store)->GetJob("ftjob-a");
  ASSERT_TRUE(job.ok() && job->has_value());
  EXPECT_EQ((*job)->job.status(), v1::JOB_STATUS_RUNNING);
  EXPECT_EQ((*job)->job.progress().step(), 3u);
  EXPECT_EQ((*job)->job.spec().hyperparameters().learning_rate(), 1e-4);
  EXPECT_EQ((*job)->request_id, "req-1");
  ASSERT_EQ((*job)->job.checkpoints_size(), 1);
  EXPECT_EQ((*job)->job.checkpoints(0), "ckpt-a-3");
  auto by_request = (*store)->FindJobByRequestId("req-1");
  ASSERT_TRUE(by_request.ok() && by_request->has_value());
  EXPECT_EQ((*by_request)->job.id(), "ftjob-a");
  auto events = (*store)->EventsAfter("ftjob-a", 1, 10);
  ASSERT_TRUE(events.ok());
  ASSERT_EQ(events->size(), 1u);
  EXPECT_EQ((*events)[0].sequence(), 2u);
  EXPECT_EQ((*events)[0].status(), v1::JOB_STATUS_RUNNING);
  EXPECT_TRUE((*events)[0].has_progress());
  auto running = (*store)->JobIdsWithStatus({v1::JOB_STATUS_RUNNING});
  ASSERT_TRUE(running.ok());
  EXPECT_EQ(*running, std::vector<std::string>{"ftjob-a"});
}

TEST(JobStoreTest, DuplicateRequestIdIsRefusedByTheIndex) {
  auto store = JobStore::Open(FreshDbPath("dup"));
  ASSERT_TRUE(store.ok());
  EventDraft e;
  ASSERT_TRUE((*store)->InsertJob(NewJob("ftjob-1", 1), "same", e, absl::UnixEpoch()).ok());
  EXPECT_FALSE((*store)->InsertJob(NewJob("ftjob-2", 2), "same", e, absl::UnixEpoch()).ok());
  // Empty request ids do not collide.
  EXPECT_TRUE((*store)->InsertJob(NewJob("ftjob-3", 3), "", e, absl::UnixEpoch()).ok());
  EXPECT_TRUE((*store)->InsertJob(NewJob("ftjob-4", 4), "", e, absl::UnixEpoch()).ok());
}

TEST(JobStoreTest, UpdateOfAnUnknownJobIsNotFound) {
  auto store = JobStore::Open(FreshDbPath("unknown"));
  ASSERT_TRUE(store.ok());
  EXPECT_EQ((*store)->UpdateJob(NewJob("ftjob-x", 1), nullptr, absl::UnixEpoch()).status().code(),
            absl::StatusCode::kNotFound);
}

// SQLite's own write refused as on a full disk (SQLITE_FULL): the write is
// ResourceExhausted naming the database, leaves nothing behind, and the
// writer connection works again once there is room.
TEST(JobStoreTest, AFullDiskRefusesAWriteAndTheStoreRecovers) {
  SqliteFaultVfs* vfs = SqliteFaultVfs::Install();
  const std::string path = FreshDbPath("full");
  {
    auto store = JobStore::Open(path);
    ASSERT_TRUE(store.ok()) << store.status();
    v1::FineTuneJob job = NewJob("ftjob-f", 1);
    EventDraft created;
    created.message = "created";
    ASSERT_TRUE((*store)->InsertJob(job, "", created, absl::FromUnixSeconds(1)).ok());

    vfs->FailWrites(SqliteFaultVfs::kEveryWrite);
    job.set_status(v1::JOB_STATUS_RUNNING);
    EventDraft running;
    running.message = "running";
    auto refused = (*store)->UpdateJob(job, &running, absl::FromUnixSeconds(2));
    ASSERT_FALSE(refused.ok());
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted) << refused.status();
    EXPECT_NE(refused.status().message().find(path), std::string::npos) << refused.status();
    EXPECT_NE(refused.status().message().find("full"), std::string::npos) << refused.status();
    EXPECT_GT(vfs->failed_writes(), 0);
    // Reads go on; the refused transaction left nothing.
    auto read = (*store)->GetJob("ftjob-f");
    ASSERT_TRUE(read.ok() && read->has_value()) << read.status();
    EXPECT_EQ((*read)->job.status(), v1::JOB_STATUS_VALIDATING);
    EXPECT_EQ((*store)->EventsAfter("ftjob-f", 0, 10)->size(), 1u);

    vfs->ClearFaults();
    auto seq = (*store)->UpdateJob(job, &running, absl::FromUnixSeconds(3));
    ASSERT_TRUE(seq.ok()) << seq.status();
    EXPECT_EQ(*seq, 2u);  // no sequence number lost to the refused write
  }
  auto reopened = JobStore::Open(path);
  ASSERT_TRUE(reopened.ok()) << reopened.status();
  auto job = (*reopened)->GetJob("ftjob-f");
  ASSERT_TRUE(job.ok() && job->has_value());
  EXPECT_EQ((*job)->job.status(), v1::JOB_STATUS_RUNNING);
  EXPECT_EQ((*reopened)->EventsAfter("ftjob-f", 0, 10)->size(), 2u);
}

TEST(JobStoreTest, UnwritableDirectoryIsPermissionDenied) {
  auto store = JobStore::Open("/proc/expertd-no-such-dir/expertd.db");
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), absl::StatusCode::kPermissionDenied);
}

}  // namespace
}  // namespace expertd::server::jobs
