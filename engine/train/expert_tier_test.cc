#include "engine/train/expert_tier.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <deque>
#include <thread>

#include "gtest/gtest.h"

namespace expertd::train {
namespace {

std::string TmpDir() { return getenv("TEST_TMPDIR") != nullptr ? getenv("TEST_TMPDIR") : "/tmp"; }

bool Exists(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0;
}

// `n` experts of three 4x8 weights with recognisable values, gradients and
// AdamW state.
struct Fixture {
  explicit Fixture(int n) : params(3 * n), states(3 * n) {
    for (int e = 0; e < n; ++e) {
      ExpertTier::Expert x;
      Parameter* w[3];
      for (int j = 0; j < 3; ++j) {
        const size_t i = 3 * e + j;
        Parameter& p = params[i];
        p.name = "e" + std::to_string(e) + "." + std::to_string(j);
        p.shape = {4, 8};
        p.dtype = j == 2 ? models::DType::kBF16 : models::DType::kF32;
        p.value.assign(32, 100.0f * e + j);
        if (e % 2 == 0) {
          p.grad.assign(32, -1.0f * e - j);
          p.has_grad = true;
          states[i].m.assign(32, 0.5f * e);
          states[i].v.assign(32, 0.25f * e);
          if (j == 2) states[i].master.assign(32, 7.0f * e);
        }
        w[j] = &p;
        x.state_index[j] = i;
      }
      x.weights = MlpParams{w[0], w[1], w[2]};
      experts.push_back(x);
    }
  }
  std::vector<Parameter> params;
  std::vector<AdamWParamState> states;
  std::vector<ExpertTier::Expert> experts;
};

void ExpectIntact(const Fixture& f, int e) {
  for (int j = 0; j < 3; ++j) {
    const size_t i = 3 * e + j;
    const Parameter& p = f.params[i];
    ASSERT_EQ(p.value.size(), 32u) << p.name;
    EXPECT_EQ(p.value[31], 100.0f * e + j) << p.name;
    if (e % 2 == 0) {
      ASSERT_EQ(p.grad.size(), 32u) << p.name;
      EXPECT_EQ(p.grad[5], -1.0f * e - j) << p.name;
      ASSERT_EQ(f.states[i].m.size(), 32u) << p.name;
      EXPECT_EQ(f.states[i].v[3], 0.25f * e) << p.name;
      EXPECT_EQ(f.states[i].master.size(), j == 2 ? 32u : 0u) << p.name;
    } else {
      EXPECT_TRUE(f.states[i].m.empty()) << p.name;
    }
  }
}

std::vector<int> ForwardBackwardUpdate(int n) {
  std::vector<int> seq;
  for (int e = 0; e < n; ++e) seq.push_back(e);
  for (int e = n - 1; e >= 0; --e) seq.push_back(e);
  for (int e = 0; e < n; ++e) seq.push_back(e);
  return seq;
}

// A step walks six experts through a tier with room for two: every pin finds
// its expert intact (weights, gradients, moments, masters), what is not
// resident holds no memory, the I/O thread prefetches, and the file goes
// with the tier.
TEST(ExpertTierTest, KeepsEveryExpertIntactThroughEvictionAndPrefetch) {
  Fixture f(6);
  std::string path;
  {
    auto tier = ExpertTier::Create(TmpDir(), f.experts, 2, &f.states);
    ASSERT_TRUE(tier.ok()) << tier.status();
    path = (*tier)->path();
    EXPECT_TRUE(Exists(path));
    EXPECT_EQ((*tier)->file_bytes(), 6 * ExpertTier::RecordBytes(f.experts[0].weights));
    const std::vector<int> seq = ForwardBackwardUpdate(6);
    ASSERT_TRUE((*tier)->BeginStep(AccessSequence(seq)).ok());
    // Trimmed to the room: Belady keeps 0 and 1, used first.
    for (int e = 0; e < 6; ++e) EXPECT_EQ(f.params[3 * e].value.empty(), e >= 2) << e;
    // Once 0 is used, 0 is needed again later (position 11) than 2 (position
    // 2): the I/O thread swaps them before anyone asks, and 1 and 2 need no wait.
    ASSERT_TRUE((*tier)->Pin(0, ExpertTier::Need::kAll).ok());
    (*tier)->Unpin(0, false);
    (*tier)->WaitForIo();
    EXPECT_EQ((*tier)->stats().prefetches, 1);
    EXPECT_FALSE(f.params[3 * 2].value.empty());
    for (int id : {1, 2}) {
      ASSERT_TRUE((*tier)->Pin(id, ExpertTier::Need::kAll).ok());
      (*tier)->Unpin(id, false);
    }
    EXPECT_EQ((*tier)->stats().waits, 0);
    for (size_t pos = 3; pos < seq.size(); ++pos) {
      const int id = seq[pos];
      ASSERT_TRUE((*tier)->Pin(id, ExpertTier::Need::kAll).ok());
      ExpectIntact(f, id);
      (*tier)->Unpin(id, /*dirty=*/false);
    }
    (*tier)->EndStep();
    int resident = 0;
    for (const Parameter& p : f.params) resident += p.value.empty() ? 0 : 1;
    EXPECT_LE(resident, 3 * 2);
    const ExpertTier::Stats s = (*tier)->stats();
    EXPECT_GT(s.prefetches, 0);
    EXPECT_GT(s.evictions, 0);
    EXPECT_GT((*tier)->bytes_read(), 0);
    // Read-only pins: each expert is written once at most (then dropped clean).
    EXPECT_LE((*tier)->bytes_written(), (*tier)->file_bytes());
    EXPECT_GT(s.clean_drops, 0);
    ASSERT_TRUE((*tier)->HoldAll().ok());
    for (int e = 0; e < 6; ++e) ExpectIntact(f, e);
  }
  EXPECT_FALSE(Exists(path)) << "the tier leaves its file behind";
}

// A change made while pinned (dirty) survives eviction; a gradient cleared
// while the expert was on the SSD stays cleared.
TEST(ExpertTierTest, DirtyChangesSurviveAndClearedGradientsStayCleared) {
  Fixture f(4);
  auto tier = ExpertTier::Create(TmpDir(), f.experts, 2, &f.states);
  ASSERT_TRUE(tier.ok()) << tier.status();
  ASSERT_TRUE((*tier)->BeginStep(AccessSequence({0, 1, 2, 3, 0})).ok());
  ASSERT_TRUE((*tier)->Pin(0, ExpertTier::Need::kAll).ok());
  f.params[0].value[0] = 42.0f;
  f.states[0].m[1] = 43.0f;
  (*tier)->Unpin(0, /*dirty=*/true);
  for (int id : {1, 2, 3}) {
    ASSERT_TRUE((*tier)->Pin(id, ExpertTier::Need::kAll).ok());
    (*tier)->Unpin(id, false);
  }
  (*tier)->EndStep();
  for (Parameter& p : f.params) p.ClearGrad();  // between steps: the tier is idle
  ASSERT_TRUE((*tier)->BeginStep(AccessSequence({0, 1, 2, 3})).ok());
  for (int id : {0, 1, 2, 3}) {
    ASSERT_TRUE((*tier)->Pin(id, ExpertTier::Need::kAll).ok());
    if (id == 0) {
      EXPECT_EQ(f.params[0].value[0], 42.0f);
      EXPECT_EQ(f.states[0].m[1], 43.0f);
    }
    for (int j = 0; j < 3; ++j) EXPECT_FALSE(f.params[3 * id + j].has_grad);
    (*tier)->Unpin(id, false);
  }
  (*tier)->EndStep();
}

// Two pinners at once (the uploader's thread and the compute thread) with
// room for two: no deadlock, every expert intact.
TEST(ExpertTierTest, ConcurrentPinsWithTheMinimumRoom) {
  Fixture f(8);
  auto tier = ExpertTier::Create(TmpDir(), f.experts, 2, &f.states);
  ASSERT_TRUE(tier.ok()) << tier.status();
  std::vector<int> seq;
  for (int r = 0; r < 5; ++r) {
    for (int e = 0; e < 8; ++e) seq.push_back(e);
  }
  ASSERT_TRUE((*tier)->BeginStep(AccessSequence(seq)).ok());
  // Pipelined like backward: pin k+1 before unpinning k.
  ASSERT_TRUE((*tier)->Pin(seq[0], ExpertTier::Need::kAll).ok());
  for (size_t i = 1; i < seq.size(); ++i) {
    std::thread next([&] { ASSERT_TRUE((*tier)->Pin(seq[i], ExpertTier::Need::kAll).ok()); });
    ExpectIntact(f, seq[i - 1]);
    next.join();
    (*tier)->Unpin(seq[i - 1], true);
  }
  (*tier)->Unpin(seq.back(), true);
  (*tier)->EndStep();
  ASSERT_TRUE((*tier)->HoldAll().ok());
  for (int e = 0; e < 8; ++e) ExpectIntact(f, e);
}

// A revised sequence (a layer's routing became known) is the future the I/O
// thread evicts and prefetches by from then on; pins that follow it exactly
// count no skipped use and no unplanned pin, one off it counts.
TEST(ExpertTierTest, RevisedSequenceSteersEvictionAndPrefetch) {
  Fixture f(4);
  auto tier = ExpertTier::Create(TmpDir(), f.experts, 2, &f.states);
  ASSERT_TRUE(tier.ok()) << tier.status();
  // Predicted: 0 1 2 3 0. Once 0 is used, 2 comes in for 0 (next used last).
  ASSERT_TRUE((*tier)->BeginStep(AccessSequence({0, 1, 2, 3, 0})).ok());
  ASSERT_TRUE((*tier)->Pin(0).ok());
  (*tier)->Unpin(0, false);
  (*tier)->WaitForIo();
  EXPECT_FALSE(f.params[3 * 2].value.empty());
  // Routing says 2 is not used after all and 1 is used again: 0 1 3 1. The
  // I/O thread drops 2 (never used now) for 3.
  (*tier)->ReviseSequence(AccessSequence({0, 1, 3, 1}), 1, 4);
  (*tier)->WaitForIo();
  EXPECT_TRUE(f.params[3 * 2].value.empty());
  EXPECT_FALSE(f.params[3 * 3].value.empty());
  for (int id : {1, 3, 1}) {
    ASSERT_TRUE((*tier)->Pin(id).ok());
    (*tier)->Unpin(id, false);
  }
  ExpertTier::Stats s = (*tier)->stats();
  EXPECT_EQ(s.waits, 0);
  EXPECT_EQ(s.skipped_uses, 0);
  EXPECT_EQ(s.unplanned_pins, 0);
  ASSERT_TRUE((*tier)->Pin(2).ok());  // off the sequence
  (*tier)->Unpin(2, false);
  s = (*tier)->stats();
  EXPECT_EQ(s.unplanned_pins, 1);
  (*tier)->EndStep();
  // A sequence that predicts a use that never comes counts it as skipped.
  ASSERT_TRUE((*tier)->BeginStep(AccessSequence({0, 1, 2, 3})).ok());
  for (int id : {0, 2, 3}) {
    ASSERT_TRUE((*tier)->Pin(id).ok());
    (*tier)->Unpin(id, false);
  }
  EXPECT_EQ((*tier)->stats().skipped_uses, 1);
  (*tier)->EndStep();
}

// Forward and backward pins (kWeights) read the values section alone (the
// gradients were cleared, the state is not needed); the optimizer's pin
// (kAll) then reads only the state section.
TEST(ExpertTierTest, ReadsOnlyWhatAUseNeeds) {
  Fixture f(4);
  auto tier = ExpertTier::Create(TmpDir(), f.experts, 2, &f.states);
  ASSERT_TRUE(tier.ok()) << tier.status();
  for (Parameter& p : f.params) p.ClearGrad();
  ASSERT_TRUE((*tier)->BeginStep(AccessSequence({0, 1, 2, 3}), 4).ok());  // 2, 3 to the SSD
  (*tier)->EndStep();  // no prefetch from here on: only pins read
  const int64_t before = (*tier)->bytes_read();
  ASSERT_TRUE((*tier)->Pin(2, ExpertTier::Need::kWeights, false).ok());
  EXPECT_EQ((*tier)->bytes_read() - before, kRecordAlignment);  // 3 x 32 values, aligned
  EXPECT_EQ(f.params[6].value[0], 200.0f);
  EXPECT_TRUE(f.states[6].m.empty());
  (*tier)->Unpin(2, false);
  ASSERT_TRUE((*tier)->Pin(2, ExpertTier::Need::kAll, false).ok());
  EXPECT_EQ((*tier)->bytes_read() - before, 2 * kRecordAlignment);
  ASSERT_EQ(f.states[6].m.size(), 32u);
  EXPECT_EQ(f.states[6].m[0], 1.0f);
  EXPECT_EQ(f.states[7].v[9], 0.5f);
  ASSERT_EQ(f.states[8].master.size(), 32u);
  EXPECT_EQ(f.states[8].master[0], 14.0f);
  EXPECT_TRUE(f.params[6].grad.empty());
  (*tier)->Unpin(2, false);
}

// A record that cannot be read back (here: the file cut short behind the
// tier's back) fails the pin with the path, instead of hanging or handing out
// an empty expert; what is on the host stays intact.
TEST(ExpertTierTest, AnUnreadableRecordFailsThePinClearly) {
  Fixture f(4);
  auto tier = ExpertTier::Create(TmpDir(), f.experts, 2, &f.states);
  ASSERT_TRUE(tier.ok()) << tier.status();
  ASSERT_TRUE((*tier)->BeginStep(AccessSequence({0, 1, 2, 3})).ok());  // 2 and 3 on the SSD
  ASSERT_EQ(truncate((*tier)->path().c_str(), 0), 0);
  const absl::Status st = (*tier)->Pin(3, ExpertTier::Need::kAll, /*advance=*/false);
  EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss) << st;
  EXPECT_NE(st.message().find((*tier)->path()), std::string::npos) << st;
  EXPECT_FALSE((*tier)->Pin(2).ok());  // the tier stays failed
  (*tier)->EndStep();
  ExpectIntact(f, 0);  // kept (1, used later, made room for 3)
}

TEST(ExpertTierTest, MissingDirectoryIsAClearError) {
  Fixture f(2);
  auto tier = ExpertTier::Create(TmpDir() + "/no/such/dir", f.experts, 2, &f.states);
  ASSERT_FALSE(tier.ok());
  EXPECT_NE(tier.status().message().find("--ssd_dir"), std::string::npos) << tier.status();
}

// Direct I/O where the file system takes it (the test's temp dir, tmpfs on
// kernels >= 6.6), buffered I/O as the fallback: the same records either way.
class RecordFileTest : public ::testing::TestWithParam<std::pair<std::string, bool>> {};

TEST_P(RecordFileTest, RoundTripsAlignedRecordsAndRemovesItsFile) {
  const std::string dir = GetParam().first.empty() ? TmpDir() : GetParam().first;
  if (!Exists(dir)) GTEST_SKIP() << dir << " does not exist";
  const std::string path = dir + "/expertd_record_file_test." + std::to_string(getpid());
  {
    auto file = RecordFile::Create(path, 2 * kRecordAlignment, 3, GetParam().second);
    ASSERT_TRUE(file.ok()) << file.status();
    if (!GetParam().second) EXPECT_FALSE((*file)->direct_io());
    AlignedBuffer buf(2 * kRecordAlignment);
    for (int r = 0; r < 3; ++r) {
      std::memset(buf.data(), 'a' + r, buf.size());
      ASSERT_TRUE((*file)->WriteRecord(r, &buf).ok());
    }
    ASSERT_TRUE((*file)->ReadRecord(1, &buf).ok());
    EXPECT_EQ(buf.data()[0], 'b');
    EXPECT_EQ(buf.data()[buf.size() - 1], 'b');
    EXPECT_EQ((*file)->bytes_written(), 6 * kRecordAlignment);
    EXPECT_EQ((*file)->bytes_read(), 2 * kRecordAlignment);
    EXPECT_FALSE((*file)->ReadRecord(3, &buf).ok());
  }
  EXPECT_FALSE(Exists(path));
  EXPECT_FALSE(RecordFile::Create(path, 100, 1).ok());  // not aligned
}

INSTANTIATE_TEST_SUITE_P(DirectAndBuffered, RecordFileTest,
                         ::testing::Values(std::make_pair(std::string(), true),
                                           std::make_pair(std::string(), false),
                                           std::make_pair(std::string("/dev/shm"), true)));

}  // namespace
}  // namespace expertd::train
