// JobManager through JobSystem with the fake executor, on a real --data_dir.
#include "server/jobs/job_manager.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "base/env.h"
#include "base/fault_injection_env.h"
#include "gtest/gtest.h"
#include "server/jobs/fake_job_executor.h"
#include "server/jobs/job_state.h"
#include "server/jobs/job_system.h"
#include "server/jobs/sqlite_fault_vfs.h"

namespace expertd::server::jobs {
namespace {

constexpr absl::Duration kDeadline = absl::Seconds(60);

// Counts wake-ups, so a test can wait for "something changed" with a deadline.
class CountingWatcher final : public JobWatcher {
 public:
  void Wake() override {
    absl::MutexLock lock(&mu_);
    ++wakes_;
  }
  int64_t wakes() {
    absl::MutexLock lock(&mu_);
    return wakes_;
  }
  bool WaitBeyond(int64_t seen, absl::Duration timeout) {
    absl::MutexLock lock(&mu_);
    auto changed = [this, seen]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return wakes_ > seen; };
    return mu_.AwaitWithTimeout(absl::Condition(&changed), timeout);
  }

 private:
  absl::Mutex mu_;
  int64_t wakes_ ABSL_GUARDED_BY(mu_) = 0;
};

// Waits until the job reaches `status`; fails the test at the deadline.
::testing::AssertionResult WaitForStatus(JobManager* m, const std::string& id,
                                         v1::JobStatus status) {
  auto shared = std::make_shared<CountingWatcher>();
  CountingWatcher& watcher = *shared;
  m->AddWatcher(id, shared);
  const absl::Time deadline = absl::Now() + kDeadline;
  v1::JobStatus last = v1::JOB_STATUS_UNSPECIFIED;
  bool ok = false;
  while (absl::Now() < deadline) {
    const int64_t seen = watcher.wakes();
    auto job = m->Get(id);
    if (job.ok()) last = job->status();
    if (last == status) {
      ok = true;
      break;
    }
    watcher.WaitBeyond(seen, deadline - absl::Now());
  }
  m->RemoveWatcher(id, &watcher);
  if (ok) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << "job " << id << " is " << JobStatusText(last) << ", wanted " << JobStatusText(status);
}

class JobManagerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    data_dir_ = absl::StrCat(std::getenv("TEST_TMPDIR"), "/", name, "/data");
    ASSERT_EQ(std::system(absl::StrCat("rm -rf '", data_dir_, "'").c_str()), 0);
  }

  // Opens the job system with a fake executor running `script` (kept in
  // executor_ for the test to drive).
  void Open(FakeJobExecutor::Script script, Env* env = Env::Default()) {
    auto executor = std::make_unique<FakeJobExecutor>(script, env);
    executor_ = executor.get();
    JobSystemOptions o;
    o.data_dir = data_dir_;
    o.env = env;
    o.max_upload_bytes = 1 << 20;
    auto system = JobSystem::Open(o, std::move(executor));
    ASSERT_TRUE(system.ok()) << system.status();
    system_ = *std::move(system);
  }

  JobManager* manager() { return system_->manager(); }

  std::string Upload(const std::string& text) {
    v1::UploadFileRequest::Metadata meta;
    meta.set_filename("train.jsonl");
    auto upload = system_->files()->BeginUpload(meta);
    EXPECT_TRUE(upload.ok());
    EXPECT_TRUE((*upload)->Append(text).ok());
    auto info = (*upload)->Finish();
    EXPECT_TRUE(info.ok()) << info.status();
    return info.ok() ? info->id() : "";
  }

  v1::SubmitFineTuneRequest Request(const std::string& file, const std::string& request_id = "") {
    v1::SubmitFineTuneRequest r;
    r.set_request_id(request_id);
    r.mutable_spec()->set_training_file(file);
    r.mutable_spec()->mutable_hyperparameters()->set_learning_rate(1e-4);
    return r;
  }

  std::string Submit(const v1::SubmitFineTuneRequest& r) {
    auto job = manager()->Submit(r);
    EXPECT_TRUE(job.ok()) << job.status();
    return job.ok() ? job->id() : "";
  }

  std::vector<v1::FineTuneJobEvent> AllEvents(const std::string& id) {
    auto events = manager()->Events(id, 0, 1000);
    EXPECT_TRUE(events.ok());
    return events.ok() ? *events : std::vector<v1::FineTuneJobEvent>();
  }

  std::string data_dir_;
  FakeJobExecutor* executor_ = nullptr;
  std::unique_ptr<JobSystem> system_;
};

TEST(JobStateTest, TransitionTable) {
  using v1::JobStatus;
  EXPECT_TRUE(IsAllowedTransition(v1::JOB_STATUS_VALIDATING, v1::JOB_STATUS_QUEUED));
  EXPECT_TRUE(IsAllowedTransition(v1::JOB_STATUS_QUEUED, v1::JOB_STATUS_RUNNING));
  EXPECT_TRUE(IsAllowedTransition(v1::JOB_STATUS_RUNNING, v1::JOB_STATUS_SUCCEEDED));
  EXPECT_TRUE(IsAllowedTransition(v1::JOB_STATUS_RUNNING, v1::JOB_STATUS_QUEUED));
  EXPECT_FALSE(IsAllowedTransition(v1::JOB_STATUS_VALIDATING, v1::JOB_STATUS_RUNNING));
  EXPECT_FALSE(IsAllowedTransition(v1::JOB_STATUS_QUEUED, v1::JOB_STATUS_SUCCEEDED));
  for (JobStatus end :
       {v1::JOB_STATUS_SUCCEEDED, v1::JOB_STATUS_FAILED, v1::JOB_STATUS_CANCELLED}) {
    EXPECT_TRUE(IsTerminal(end));
    for (int to = 0; to <= 6; ++to) {
      EXPECT_FALSE(IsAllowedTransition(end, static_cast<JobStatus>(to)));
    }
  }
  absl::Status s = CheckTransition(v1::JOB_STATUS_SUCCEEDED, v1::JOB_STATUS_RUNNING);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.message(), "job is succeeded; cannot become running");
}

TEST_F(JobManagerTest, JobRunsToSuccessWithEventsProgressAndCheckpoints) {
  Open({.total_steps = 4, .checkpoint_every = 2});
  const std::string id = Submit(Request(Upload("{\"text\": \"hi\"}\n")));
  ASSERT_TRUE(WaitForStatus(manager(), id, v1::JOB_STATUS_SUCCEEDED));
  auto job = manager()->Get(id);
  ASSERT_TRUE(job.ok());
  EXPECT_EQ(job->progress().step(), 4u);
  EXPECT_EQ(job->progress().total_steps(), 4u);
  EXPECT_EQ(job->fine_tuned_model(), "fake-model:" + id);
  ASSERT_EQ(job->checkpoints_size(), 2);
  EXPECT_EQ(job->checkpoints(1), absl::StrCat("ckpt-", id, "-4"));
  EXPECT_TRUE(job->has_start_time());
  EXPECT_TRUE(job->has_finish_time());
  const std::vector<v1::FineTuneJobEvent> events = AllEvents(id);
  ASSERT_GE(events.size(), 8u);
  std::vector<v1::JobStatus> statuses;
  int with_progress = 0;
  for (size_t i = 0; i < events.size(); ++i) {
    EXPECT_EQ(events[i].sequence(), i + 1);
    if (statuses.empty() || statuses.back() != events[i].status()) {
      statuses.push_back(events[i].status());
    }
    with_progress += events[i].has_progress();
  }
  EXPECT_EQ(statuses,
            (std::vector<v1::JobStatus>{v1::JOB_STATUS_VALIDATING, v1::JOB_STATUS_QUEUED,
                                        v1::JOB_STATUS_RUNNING, v1::JOB_STATUS_SUCCEEDED}));
  EXPECT_EQ(with_progress, 4);
  EXPECT_NE(events[3].message().find("expert_load [[3,5],[4,4]]"), std::string::npos);
  // Replay from after_sequence: exactly the later events.
  auto later = manager()->Events(id, 3, 1000);
  ASSERT_TRUE(later.ok());
  ASSERT_EQ(later->size(), events.size() - 3);
  EXPECT_EQ((*later)[0].sequence(), 4u);
  // The catalog finds the latest checkpoint by job and any by id.
  auto latest = manager()->Resolve(id, "");
  ASSERT_TRUE(latest.ok());
  EXPECT_EQ(latest->step, 4u);
  auto first = manager()->Resolve("", absl::StrCat("ckpt-", id, "-2"));
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(first->path, absl::StrCat(manager()->data_dir(), "/jobs/", id, "/checkpoint-2"));
  EXPECT_EQ(manager()->Resolve("", "ckpt-none").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(manager()->Resolve("a", "b").status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(JobManagerTest, BadSpecsNameTheField) {
  Open({});
  const std::string file = Upload("{}\n");
  struct Case {
    std::function<void(v1::FineTuneJobSpec*)> change;
    std::string field;
  };
  const std::vector<Case> cases = {
      {[](v1::FineTuneJobSpec* s) { s->clear_training_file(); }, "spec.training_file"},
      {[](v1::FineTuneJobSpec* s) { s->set_training_file("../../etc/passwd"); },
       "spec.training_file"},
      {[](v1::FineTuneJobSpec* s) { s->set_validation_file("/etc/passwd"); },
       "spec.validation_file"},
      {[](v1::FineTuneJobSpec* s) { s->mutable_hyperparameters()->set_learning_rate(-1); },
       "spec.hyperparameters.learning_rate"},
      {[](v1::FineTuneJobSpec* s) { s->mutable_hyperparameters()->set_lr_scheduler("step"); },
       "spec.hyperparameters.lr_scheduler"},
      {[](v1::FineTuneJobSpec* s) { s->mutable_hyperparameters()->set_batch_size(0); },
       "spec.hyperparameters.batch_size"},
      {[](v1::FineTuneJobSpec* s) { s->mutable_lora()->set_rank(8); }, "spec.lora"},
      {[](v1::FineTuneJobSpec* s) {
         s->set_scope(v1::TRAIN_SCOPE_LORA);
         s->mutable_lora()->add_target_modules("mlp");
       },
       "spec.lora.target_modules[0]"},
      {[](v1::FineTuneJobSpec* s) { s->mutable_schedule()->set_moe_chunks(3); },
       "spec.schedule.moe_chunks"},
      {[](v1::FineTuneJobSpec* s) { s->mutable_schedule()->set_host_memory_bytes(1 << 20); },
       "spec.schedule.host_memory_bytes"},
      {[](v1::FineTuneJobSpec* s) { s->set_suffix("a b"); }, "spec.suffix"},
  };
  for (const Case& c : cases) {
    v1::SubmitFineTuneRequest r = Request(file);
    c.change(r.mutable_spec());
    auto job = manager()->Submit(r);
    ASSERT_FALSE(job.ok()) << c.field;
    EXPECT_EQ(job.status().code(), absl::StatusCode::kInvalidArgument) << c.field;
    EXPECT_EQ(job.status().message().rfind(c.field + ":", 0), 0u) << job.status();
  }
  EXPECT_TRUE(manager()->List({})->jobs().empty());
}

TEST_F(JobManagerTest, SubmitIsIdempotentPerRequestId) {
  Open({.gated = true});
  const std::string file = Upload("{}\n");
  const std::string first = Submit(Request(file, "req-7"));
  const std::string again = Submit(Request(file, "req-7"));
  EXPECT_EQ(first, again);
  v1::SubmitFineTuneRequest other = Request(file, "req-7");
  other.mutable_spec()->set_suffix("other");
  EXPECT_EQ(manager()->Submit(other).status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_NE(Submit(Request(file, "req-8")), first);
  EXPECT_EQ(manager()->List({})->jobs_size(), 2);
}

TEST_F(JobManagerTest, ListPagesNewestFirst) {
  Open({.gated = true});
  const std::string file = Upload("{}\n");
  std::vector<std::string> ids;
  for (int i = 0; i < 5; ++i) ids.push_back(Submit(Request(file)));
  v1::ListFineTuneJobsRequest request;
  request.set_page_size(2);
  std::vector<std::string> seen;
  int pages = 0;
  while (true) {
    auto page = manager()->List(request);
    ASSERT_TRUE(page.ok()) << page.status();
    ++pages;
    for (const auto& job : page->jobs()) seen.push_back(job.id());
    if (page->next_page_token().empty()) break;
    request.set_page_token(page->next_page_token());
    ASSERT_LT(pages, 10);
  }
  EXPECT_EQ(pages, 3);
  EXPECT_EQ(seen, (std::vector<std::string>{ids[4], ids[3], ids[2], ids[1], ids[0]}));
  request.set_page_token("garbage");
  EXPECT_EQ(manager()->List(request).status().code(), absl::StatusCode::kInvalidArgument);
  v1::ListFineTuneJobsRequest big;
  big.set_page_size(1000);
  EXPECT_EQ(manager()->List(big)->jobs_size(), 5);
}

TEST_F(JobManagerTest, CancelRunningAndWaitingJobs) {
  Open({.total_steps = 100, .gated = true});
  const std::string file = Upload("{}\n");
  const std::string running = Submit(Request(file));
  ASSERT_TRUE(WaitForStatus(manager(), running, v1::JOB_STATUS_RUNNING));
  executor_->AllowSteps(1);
  ASSERT_TRUE(executor_->WaitForStep(1, kDeadline));
  ASSERT_TRUE(executor_->WaitUntilBlocked(kDeadline));
  const std::string waiting = Submit(Request(file));  // validated and queued behind it
  auto cancelled = manager()->Cancel(waiting);
  ASSERT_TRUE(cancelled.ok()) << cancelled.status();
  EXPECT_EQ(cancelled->status(), v1::JOB_STATUS_CANCELLED);

  ASSERT_TRUE(manager()->Cancel(running).ok());
  ASSERT_TRUE(WaitForStatus(manager(), running, v1::JOB_STATUS_CANCELLED));
  EXPECT_EQ(manager()->Get(running)->progress().step(), 1u);
  EXPECT_EQ(manager()->Cancel(running).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(manager()->Cancel("ftjob-nope").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(executor_->run_calls(), 1);  // the cancelled waiting job never ran
}

// Validation does not wait for the running job: a job submitted meanwhile
// is QUEUED (or FAILED for a bad dataset) while the first still trains.
TEST_F(JobManagerTest, JobsSubmittedWhileAnotherTrainsAreValidatedAtOnce) {
  Open({.total_steps = 100, .invalid_marker = "BAD", .gated = true});
  const std::string file = Upload("{}\n");
  const std::string running = Submit(Request(file));
  ASSERT_TRUE(WaitForStatus(manager(), running, v1::JOB_STATUS_RUNNING));
  executor_->AllowSteps(1);
  ASSERT_TRUE(executor_->WaitForStep(1, kDeadline));
  ASSERT_TRUE(executor_->WaitUntilBlocked(kDeadline));

  const std::string good = Submit(Request(file));
  const std::string bad = Submit(Request(Upload("{\"text\": \"BAD\"}\n")));
  ASSERT_TRUE(WaitForStatus(manager(), good, v1::JOB_STATUS_QUEUED));
  ASSERT_TRUE(WaitForStatus(manager(), bad, v1::JOB_STATUS_FAILED));
  EXPECT_EQ(manager()->Get(bad)->error().code(), "invalid_training_file");
  // The first job is still in its second step, untouched.
  EXPECT_EQ(manager()->Get(running)->status(), v1::JOB_STATUS_RUNNING);
  EXPECT_EQ(manager()->Get(running)->progress().step(), 1u);
  EXPECT_EQ(executor_->validate_calls(), 3);
  EXPECT_EQ(executor_->run_calls(), 1);

  // Once the first ends, the queued one runs without validating again.
  ASSERT_TRUE(manager()->Cancel(running).ok());
  ASSERT_TRUE(WaitForStatus(manager(), running, v1::JOB_STATUS_CANCELLED));
  ASSERT_TRUE(WaitForStatus(manager(), good, v1::JOB_STATUS_RUNNING));
  EXPECT_EQ(executor_->validate_calls(), 3);
  ASSERT_TRUE(manager()->Cancel(good).ok());
  ASSERT_TRUE(WaitForStatus(manager(), good, v1::JOB_STATUS_CANCELLED));
}

// Cancel of a job in the middle of a long step returns at once with the
// request recorded; the job becomes CANCELLED when the step ends.
TEST_F(JobManagerTest, CancelOfARunningJobDoesNotWaitForTheStep) {
  Open({.total_steps = 100, .gated = true, .gate_ignores_stop = true});
  const std::string id = Submit(Request(Upload("{}\n")));
  ASSERT_TRUE(WaitForStatus(manager(), id, v1::JOB_STATUS_RUNNING));
  executor_->AllowSteps(1);
  ASSERT_TRUE(executor_->WaitForStep(1, kDeadline));
  ASSERT_TRUE(executor_->WaitUntilBlocked(kDeadline));  // step 2 cannot end by itself

  const absl::Time before = absl::Now();
  auto job = manager()->Cancel(id);
  // The step is still blocked, so a Cancel that waited for the job to stop
  // could only return after a timeout; it must not wait at all. The bound
  // is loose (a loaded machine) yet far below any wait for the step.
  EXPECT_LT(absl::Now() - before, absl::Seconds(5));
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->status(), v1::JOB_STATUS_RUNNING);
  EXPECT_NE(AllEvents(id).back().message().find("cancel requested at step 1"), std::string::npos)
      << AllEvents(id).back().message();
  // A repeated request is accepted and changes nothing.
  auto again = manager()->Cancel(id);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->status(), v1::JOB_STATUS_RUNNING);
  EXPECT_EQ(manager()->Get(id)->status(), v1::JOB_STATUS_RUNNING);

  executor_->AllowSteps(1);  // the step ends; the job stops at the boundary
  ASSERT_TRUE(WaitForStatus(manager(), id, v1::JOB_STATUS_CANCELLED));
  EXPECT_EQ(manager()->Get(id)->progress().step(), 2u);
  EXPECT_EQ(executor_->run_calls(), 1);
}

bool Exists(const std::string& path) { return Env::Default()->GetFileType(path).ok(); }

// Retention: a job keeps its newest keep_last_checkpoints checkpoints; older
// ones lose their record (with an event) and their directory.
TEST_F(JobManagerTest, RetentionDeletesAllButTheNewestCheckpoints) {
  Open({.total_steps = 10, .checkpoint_every = 2});  // checkpoints at 2, 4, 6, 8, 10
  const std::string file = Upload("{}\n");
  v1::SubmitFineTuneRequest keep2 = Request(file);
  keep2.mutable_spec()->mutable_hyperparameters()->set_keep_last_checkpoints(2);
  v1::SubmitFineTuneRequest keep_all = Request(file);
  keep_all.mutable_spec()->mutable_hyperparameters()->set_keep_last_checkpoints(0);
  const std::string id = Submit(keep2);
  const std::string all = Submit(keep_all);
  const std::string by_default = Submit(Request(file));  // the daemon's default: 3
  for (const std::string& job : {id, all, by_default}) {
    ASSERT_TRUE(WaitForStatus(manager(), job, v1::JOB_STATUS_SUCCEEDED));
  }
  const std::string dir = absl::StrCat(manager()->data_dir(), "/jobs/", id, "/checkpoint-");
  auto job = manager()->Get(id);
  ASSERT_TRUE(job.ok());
  EXPECT_EQ(std::vector<std::string>(job->checkpoints().begin(), job->checkpoints().end()),
            (std::vector<std::string>{absl::StrCat("ckpt-", id, "-8"),
                                      absl::StrCat("ckpt-", id, "-10")}));
  for (int step : {2, 4, 6}) {
    EXPECT_FALSE(Exists(absl::StrCat(dir, step))) << step;
    EXPECT_FALSE(Exists(absl::StrCat(dir, step, ".deleted"))) << step;
    EXPECT_EQ(manager()->Resolve("", absl::StrCat("ckpt-", id, "-", step)).status().code(),
              absl::StatusCode::kNotFound);
  }
  EXPECT_TRUE(Exists(absl::StrCat(dir, 8, "/state.txt")));
  EXPECT_TRUE(Exists(absl::StrCat(dir, 10, "/state.txt")));
  int deletion_events = 0;
  for (const auto& e : AllEvents(id)) {
    if (e.message().find("deleted (keep_last_checkpoints 2)") != std::string::npos) {
      ++deletion_events;
    }
  }
  EXPECT_EQ(deletion_events, 3);
  EXPECT_NE(
      AllEvents(id)[0].message().find("created"), std::string::npos);  // the history is kept
  EXPECT_EQ(manager()->Get(all)->checkpoints_size(), 5);
  EXPECT_EQ(manager()->Get(by_default)->checkpoints_size(), 3);
  EXPECT_EQ(manager()->Resolve(id, "")->step, 10u);
}

// A pinned checkpoint (ActivateCheckpoint loading or serving it) survives
// retention; once unpinned, the next checkpoint's retention takes it.
TEST_F(JobManagerTest, RetentionKeepsPinnedCheckpoints) {
  Open({.total_steps = 8, .checkpoint_every = 2, .gated = true});
  v1::SubmitFineTuneRequest r = Request(Upload("{}\n"));
  r.mutable_spec()->mutable_hyperparameters()->set_keep_last_checkpoints(1);
  const std::string id = Submit(r);
  executor_->AllowSteps(2);
  ASSERT_TRUE(executor_->WaitForStep(2, kDeadline));
  auto pinned = manager()->ResolveAndPin(id, "");
  ASSERT_TRUE(pinned.ok()) << pinned.status();
  EXPECT_EQ(pinned->step, 2u);
  executor_->AllowSteps(4);
  ASSERT_TRUE(executor_->WaitForStep(6, kDeadline));
  const std::string dir = absl::StrCat(manager()->data_dir(), "/jobs/", id, "/checkpoint-");
  EXPECT_TRUE(Exists(dir + "2/state.txt"));
  EXPECT_FALSE(Exists(dir + "4"));
  EXPECT_TRUE(Exists(dir + "6/state.txt"));
  manager()->Unpin(pinned->id);
  executor_->AllowSteps(2);
  ASSERT_TRUE(WaitForStatus(manager(), id, v1::JOB_STATUS_SUCCEEDED));
  auto job = manager()->Get(id);
  ASSERT_EQ(job->checkpoints_size(), 1);
  EXPECT_EQ(job->checkpoints(0), absl::StrCat("ckpt-", id, "-8"));
  EXPECT_FALSE(Exists(dir + "2"));
  EXPECT_FALSE(Exists(dir + "6"));
}

// A crash in the middle of removing an old checkpoint leaves its renamed
// "<dir>.deleted" tree; the job's next retention pass removes it.
TEST_F(JobManagerTest, RetentionRemovesHalfDeletedLeftovers) {
  Open({.total_steps = 4, .checkpoint_every = 2, .gated = true});
  v1::SubmitFineTuneRequest r = Request(Upload("{}\n"));
  r.mutable_spec()->mutable_hyperparameters()->set_keep_last_checkpoints(0);  // keep all
  const std::string id = Submit(r);
  executor_->AllowSteps(2);
  ASSERT_TRUE(executor_->WaitForStep(2, kDeadline));
  const std::string job_dir = absl::StrCat(manager()->data_dir(), "/jobs/", id, "/");
  Env* env = Env::Default();
  ASSERT_TRUE(CreateDirs(env, job_dir + "checkpoint-0.deleted/model").ok());
  ASSERT_TRUE(WriteFileAtomically(env, job_dir + "checkpoint-0.deleted/model/w.bin", "x").ok());
  executor_->AllowSteps(2);  // the checkpoint at step 4 runs retention
  ASSERT_TRUE(WaitForStatus(manager(), id, v1::JOB_STATUS_SUCCEEDED));
  EXPECT_FALSE(Exists(job_dir + "checkpoint-0.deleted"));
  EXPECT_TRUE(Exists(job_dir + "checkpoint-2/state.txt"));
  EXPECT_TRUE(Exists(job_dir + "checkpoint-4/state.txt"));
}

TEST_F(JobManagerTest, DeleteFileRefusedWhileAJobUsesIt) {
  Open({.total_steps = 10, .gated = true});
  const std::string file = Upload("{}\n");
  const std::string id = Submit(Request(file));
  auto refused = manager()->DeleteFile(file);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(refused.status().message().find(id), std::string::npos);
  ASSERT_TRUE(manager()->Cancel(id).ok());
  ASSERT_TRUE(WaitForStatus(manager(), id, v1::JOB_STATUS_CANCELLED));
  auto deleted = manager()->DeleteFile(file);
  ASSERT_TRUE(deleted.ok()) << deleted.status();
  EXPECT_TRUE(deleted->deleted());
  EXPECT_EQ(manager()->DeleteFile(file).status().code(), absl::StatusCode::kNotFound);
}

TEST_F(JobManagerTest, ExecutorErrorsFailTheJobWithTheirCode) {
  FakeJobExecutor::Script script;
  script.validate_error = WithJobErrorCode(
      absl::InvalidArgumentError("line 3: not JSON; line 9: no text"), "invalid_training_file");
  Open(script);
  const std::string id = Submit(Request(Upload("x\n")));
  ASSERT_TRUE(WaitForStatus(manager(), id, v1::JOB_STATUS_FAILED));
  auto job = manager()->Get(id);
  EXPECT_EQ(job->error().code(), "invalid_training_file");
  EXPECT_EQ(job->error().message(), "line 3: not JSON; line 9: no text");
  EXPECT_EQ(AllEvents(id).back().level(), v1::FineTuneJobEvent::LEVEL_ERROR);
}

TEST_F(JobManagerTest, RunErrorFailsOnlyThatJob) {
  Open({.total_steps = 4,
        .fail_at_step = 3,
        .run_error = WithJobErrorCode(absl::ResourceExhaustedError("no memory"), "out_of_memory")});
  const std::string file = Upload("{}\n");
  const std::string id = Submit(Request(file));
  ASSERT_TRUE(WaitForStatus(manager(), id, v1::JOB_STATUS_FAILED));
  EXPECT_EQ(manager()->Get(id)->error().code(), "out_of_memory");
  EXPECT_EQ(manager()->Get(id)->checkpoints_size(), 1);
}

TEST_F(JobManagerTest, FullDiskFailsTheJobNotTheManager) {
  FaultInjectionEnv env(Env::Default());
  Open({.total_steps = 4, .checkpoint_every = 2}, &env);
  const std::string file = Upload("{}\n");
  env.FailNth(FaultOp::kWrite, 1, ENOSPC, /*sticky=*/true);
  const std::string id = Submit(Request(file));
  ASSERT_TRUE(WaitForStatus(manager(), id, v1::JOB_STATUS_FAILED));
  auto job = manager()->Get(id);
  EXPECT_EQ(job->error().code(), "disk_full");
  EXPECT_NE(job->error().message().find("No space left on device"), std::string::npos);
  env.ClearFaults();
  const std::string next = Submit(Request(file));
  EXPECT_TRUE(WaitForStatus(manager(), next, v1::JOB_STATUS_SUCCEEDED));
}

// Sequences 1..n with no gap, and every recorded checkpoint has its files.
void ExpectConsistentRecords(JobManager* m, const std::string& id) {
  auto events = m->Events(id, 0, 1000);
  ASSERT_TRUE(events.ok()) << events.status();
  for (size_t i = 0; i < events->size(); ++i) EXPECT_EQ((*events)[i].sequence(), i + 1) << id;
  auto job = m->Get(id);
  ASSERT_TRUE(job.ok()) << job.status();
  for (const std::string& checkpoint : job->checkpoints()) {
    auto record = m->Resolve("", checkpoint);
    ASSERT_TRUE(record.ok()) << record.status();
    EXPECT_TRUE(Exists(record->path + "/state.txt")) << record->path;
  }
}

// The job database itself refuses a write mid-job, as SQLite does on a full
// disk (SQLITE_FULL): the job stops at its next step boundary and fails with
// disk_full; the manager goes on with the next job; after a restart the
// records are as they were told.
TEST_F(JobManagerTest, ADatabaseWriteRefusedForAFullDiskFailsTheJob) {
  SqliteFaultVfs* vfs = SqliteFaultVfs::Install();  // before the store opens
  Open({.total_steps = 6, .checkpoint_every = 2, .gated = true});
  const std::string file = Upload("{}\n");
  const std::string id = Submit(Request(file));
  executor_->AllowSteps(2);
  ASSERT_TRUE(executor_->WaitForStep(2, kDeadline));
  ASSERT_TRUE(executor_->WaitUntilBlocked(kDeadline));  // nothing else writes now
  const int64_t failed_before = vfs->failed_writes();
  vfs->FailWrites(1);  // step 3's progress event
  executor_->AllowSteps(1);
  ASSERT_TRUE(WaitForStatus(manager(), id, v1::JOB_STATUS_FAILED));
  EXPECT_EQ(vfs->failed_writes(), failed_before + 1);
  auto job = manager()->Get(id);
  ASSERT_TRUE(job.ok());
  EXPECT_EQ(job->error().code(), "disk_full");
  EXPECT_NE(job->error().message().find("database or disk is full"), std::string::npos)
      << job->error().message();
  EXPECT_NE(job->error().message().find("expertd.db"), std::string::npos) << job->error().message();
  EXPECT_EQ(job->checkpoints_size(), 1);  // step 2's
  EXPECT_EQ(executor_->run_calls(), 1);
  const std::vector<v1::FineTuneJobEvent> events = AllEvents(id);
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back().level(), v1::FineTuneJobEvent::LEVEL_ERROR);
  EXPECT_EQ(events.back().message().rfind("failed: disk_full: ", 0), 0u) << events.back().message();
  ExpectConsistentRecords(manager(), id);

  // The manager keeps serving: the next job runs to the end.
  const std::string next = Submit(Request(file));
  executor_->AllowSteps(6);
  ASSERT_TRUE(WaitForStatus(manager(), next, v1::JOB_STATUS_SUCCEEDED));

  system_.reset();
  Open({.total_steps = 6, .checkpoint_every = 2});
  EXPECT_EQ(manager()->Get(id)->status(), v1::JOB_STATUS_FAILED);
  EXPECT_EQ(manager()->Get(id)->error().code(), "disk_full");
  EXPECT_EQ(manager()->Get(next)->status(), v1::JOB_STATUS_SUCCEEDED);
  ExpectConsistentRecords(manager(), id);
  ExpectConsistentRecords(manager(), next);
  EXPECT_EQ(executor_->run_calls(), 0);  // nothing left to resume
}

// The disk stays full: not even the job's failure can be recorded. The job
// stops, its records stay as last committed (RUNNING at step 2), reads go
// on, a submission is refused ResourceExhausted, and once there is room
// again the restarted system resumes the job from its last checkpoint.
TEST_F(JobManagerTest, WhileTheDatabaseStaysFullTheJobStopsAndResumesAfterRestart) {
  SqliteFaultVfs* vfs = SqliteFaultVfs::Install();
  Open({.total_steps = 6, .checkpoint_every = 2, .gated = true});
  const std::string file = Upload("{}\n");
  const std::string id = Submit(Request(file));
  executor_->AllowSteps(2);
  ASSERT_TRUE(executor_->WaitForStep(2, kDeadline));
  ASSERT_TRUE(executor_->WaitUntilBlocked(kDeadline));
  vfs->FailWrites(SqliteFaultVfs::kEveryWrite);
  executor_->AllowSteps(1);
  ASSERT_TRUE(executor_->WaitForStep(3, kDeadline));  // its progress write was refused

  auto job = manager()->Get(id);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->progress().step(), 2u);
  ASSERT_TRUE(manager()->List({}).ok());
  auto refused = manager()->Submit(Request(file));
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted) << refused.status();
  EXPECT_NE(refused.status().message().find("database or disk is full"), std::string::npos)
      << refused.status();

  system_.reset();  // with the disk still full: closing must not fail either
  vfs->ClearFaults();
  Open({.total_steps = 6, .checkpoint_every = 2});
  ASSERT_TRUE(WaitForStatus(manager(), id, v1::JOB_STATUS_SUCCEEDED));
  ASSERT_EQ(executor_->resumes().size(), 1u);
  ASSERT_TRUE(executor_->resumes()[0].has_value());
  EXPECT_EQ(executor_->resumes()[0]->step, 2u);
  bool restart_event = false;
  for (const auto& e : AllEvents(id)) {
    restart_event |=
        e.message().find("daemon restarted while the job ran; resumes from") != std::string::npos;
  }
  EXPECT_TRUE(restart_event);
  ExpectConsistentRecords(manager(), id);
  EXPECT_EQ(manager()->List({})->jobs_size(), 1);  // the refused submission left no job
}

TEST_F(JobManagerTest, UnwritableJobDirectoryFailsTheJob) {
  Open({});
  const std::string file = Upload("{}\n");
  // A file where the jobs directory should be: nothing can be created there.
  ASSERT_TRUE(WriteFileAtomically(Env::Default(), manager()->data_dir() + "/jobs", "x").ok());
  const std::string id = Submit(Request(file));
  ASSERT_TRUE(WaitForStatus(manager(), id, v1::JOB_STATUS_FAILED));
  auto job = manager()->Get(id);
  EXPECT_EQ(job->error().code(), "data_dir_unwritable");
  EXPECT_NE(job->error().message().find("cannot create the job directory"), std::string::npos)
      << job->error().message();
}

TEST_F(JobManagerTest, ShutdownStopsAtAStepBoundaryAndTheJobResumes) {
  Open({.total_steps = 6, .checkpoint_every = 2, .gated = true});
  const std::string id = Submit(Request(Upload("{}\n")));
  executor_->AllowSteps(3);
  ASSERT_TRUE(executor_->WaitForStep(3, kDeadline));
  ASSERT_TRUE(executor_->WaitUntilBlocked(kDeadline));
  system_.reset();  // SIGTERM drain
  {
    auto store = JobStore::Open(data_dir_ + "/expertd.db");
    ASSERT_TRUE(store.ok());
    auto job = (*store)->GetJob(id);
    ASSERT_TRUE(job.ok() && job->has_value());
    EXPECT_EQ((*job)->job.status(), v1::JOB_STATUS_QUEUED);
    EXPECT_FALSE((*job)->job.has_error());
  }
  Open({.total_steps = 6, .checkpoint_every = 2});
  ASSERT_TRUE(WaitForStatus(manager(), id, v1::JOB_STATUS_SUCCEEDED));
  ASSERT_EQ(executor_->resumes().size(), 1u);
  ASSERT_TRUE(executor_->resumes()[0].has_value());
  EXPECT_EQ(executor_->resumes()[0]->step, 2u);
  EXPECT_EQ(executor_->validate_calls(), 1);  // validated again by the new process
}

TEST_F(JobManagerTest, NoExecutorMeansTrainingNotAvailable) {
  JobSystemOptions o;
  o.data_dir = data_dir_;
  auto system = JobSystem::Open(o, nullptr);
  ASSERT_TRUE(system.ok());
  ASSERT_TRUE(WriteFileAtomically(Env::Default(), data_dir_ + "/x.jsonl", "{}\n").ok());
  v1::SubmitFineTuneRequest r;
  r.mutable_spec()->set_training_file("x.jsonl");
  auto job = (*system)->manager()->Submit(r);
  EXPECT_EQ(job.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(job.status().message().find("training not available"), std::string::npos);
}

// kill -9 in the middle of a job: a child process runs the job system and is
// killed after step 3 (checkpoint at step 2); the restarted system re-queues
// the job and resumes it from that checkpoint.
TEST_F(JobManagerTest, KillNineThenRestartResumesFromTheLastCheckpoint) {
  int pipe_fds[2];
  ASSERT_EQ(::pipe(pipe_fds), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::close(pipe_fds[0]);
    Open({.total_steps = 6, .checkpoint_every = 2, .gated = true});
    const std::string id = Submit(Request(Upload("{}\n")));
    executor_->AllowSteps(3);
    if (!executor_->WaitForStep(3, kDeadline)) ::_exit(2);
    const std::string line = id + "\n";
    if (::write(pipe_fds[1], line.data(), line.size()) != static_cast<ssize_t>(line.size())) {
      ::_exit(3);
    }
    while (true) ::pause();  // until SIGKILL
  }
  ::close(pipe_fds[1]);
  std::string id;
  char c;
  pollfd pfd{pipe_fds[0], POLLIN, 0};
  while (true) {
    ASSERT_EQ(::poll(&pfd, 1, 60000), 1) << "child did not report its job";
    ASSERT_EQ(::read(pipe_fds[0], &c, 1), 1) << "child exited early";
    if (c == '\n') break;
    id += c;
  }
  ::close(pipe_fds[0]);
  ASSERT_EQ(::kill(child, SIGKILL), 0);
  int wstatus = 0;
  ASSERT_EQ(::waitpid(child, &wstatus, 0), child);

  Open({.total_steps = 6, .checkpoint_every = 2});
  ASSERT_TRUE(WaitForStatus(manager(), id, v1::JOB_STATUS_SUCCEEDED));
  ASSERT_EQ(executor_->resumes().size(), 1u);
  ASSERT_TRUE(executor_->resumes()[0].has_value());
  EXPECT_EQ(executor_->resumes()[0]->step, 2u);
  bool restart_event = false;
  for (const auto& e : AllEvents(id)) {
    restart_event |= e.message().find("daemon restarted") != std::string::npos;
  }
  EXPECT_TRUE(restart_event);
  EXPECT_EQ(manager()->Get(id)->checkpoints_size(), 3);
}

}  // namespace
}  // namespace expertd::server::jobs
