#include "engine/parallel/in_process_collectives.h"

#include <atomic>
#include <cstring>
#include <random>
#include <vector>

#include "absl/time/clock.h"
#include "base/clock.h"
#include "base/status_macros.h"
#include "engine/parallel/test_util.h"
#include "gtest/gtest.h"

namespace expertd::engine::parallel {
namespace {

void ExpectAllOk(const std::vector<absl::Status>& status) {
  for (size_t r = 0; r < status.size(); ++r)
    EXPECT_TRUE(status[r].ok()) << "rank " << r << ": " << status[r];
}

// Rank r's input for an all-reduce: values whose float sum depends on order.
std::vector<float> Values(int rank, int64_t n) {
  std::mt19937 rng(1234 + rank);
  std::uniform_real_distribution<float> dist(-1e3f, 1e3f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng) * (rank % 2 == 0 ? 1e-4f : 1.0f);
  return v;
}

class AllReduceTest : public ::testing::TestWithParam<std::tuple<int, int64_t>> {};

TEST_P(AllReduceTest, SumsInRankOrderBitwiseOnEveryRank) {
  const auto [world, n] = GetParam();
  std::vector<float> expected = Values(0, n);
  for (int r = 1; r < world; ++r) {
    std::vector<float> v = Values(r, n);
    for (int64_t i = 0; i < n; ++i) expected[i] += v[i];
  }
  std::vector<std::vector<float>> bufs(world);
  for (int r = 0; r < world; ++r) bufs[r] = Values(r, n);
  ExpectAllOk(
      RunRanks(world, [&](int r, Collectives* c) { return c->AllReduceSum(bufs[r].data(), n); }));
  for (int r = 0; r < world; ++r) {
    // n == 0: data() may be null, which memcmp must not see.
    ASSERT_EQ(0, n == 0 ? 0 : std::memcmp(bufs[r].data(), expected.data(), n * sizeof(float)))
        << "rank " << r;
  }
}

INSTANTIATE_TEST_SUITE_P(Worlds, AllReduceTest,
                         ::testing::Combine(::testing::Values(1, 2, 3, 4, 5),
                                            ::testing::Values(0, 1, 3, 7, 1000)));

TEST(InProcessCollectives, AllReduceInt64) {
  std::vector<std::vector<int64_t>> bufs(3, std::vector<int64_t>(5));
  for (int r = 0; r < 3; ++r)
    for (int i = 0; i < 5; ++i) bufs[r][i] = (int64_t{1} << 40) * r + i;
  ExpectAllOk(RunRanks(3, [&](int r, Collectives* c) {
    return c->AllReduceSum(bufs[r].data(), 5, ReduceType::kInt64);
  }));
  for (int r = 0; r < 3; ++r)
    for (int i = 0; i < 5; ++i) EXPECT_EQ(bufs[r][i], (int64_t{1} << 40) * 3 + 3 * i);
}

TEST(InProcessCollectives, AllGatherInPlaceAndSeparate) {
  const int world = 4, n = 3;
  std::vector<std::vector<int32_t>> in_place(world, std::vector<int32_t>(world * n, -1));
  std::vector<std::vector<int32_t>> gathered(world, std::vector<int32_t>(world * n, -1));
  ExpectAllOk(RunRanks(world, [&](int r, Collectives* c) {
    int32_t mine[n] = {10 * r, 10 * r + 1, 10 * r + 2};
    std::memcpy(in_place[r].data() + r * n, mine, sizeof(mine));
    RETURN_IF_ERROR(c->AllGather(in_place[r].data() + r * n, in_place[r].data(), sizeof(mine)));
    return c->AllGather(mine, gathered[r].data(), sizeof(mine));
  }));
  for (int r = 0; r < world; ++r) {
    for (int s = 0; s < world; ++s) {
      for (int i = 0; i < n; ++i) {
        EXPECT_EQ(in_place[r][s * n + i], 10 * s + i);
        EXPECT_EQ(gathered[r][s * n + i], 10 * s + i);
      }
    }
  }
}

TEST(InProcessCollectives, AllToAllTransposesBlocks) {
  const int world = 3;
  std::vector<std::vector<int32_t>> recv(world, std::vector<int32_t>(world));
  ExpectAllOk(RunRanks(world, [&](int r, Collectives* c) {
    std::vector<int32_t> send(world);
    for (int d = 0; d < world; ++d) send[d] = 100 * r + d;  // what r sends to d
    return c->AllToAll(send.data(), recv[r].data(), sizeof(int32_t));
  }));
  for (int r = 0; r < world; ++r)
    for (int s = 0; s < world; ++s) EXPECT_EQ(recv[r][s], 100 * s + r);
}

TEST(InProcessCollectives, AllToAllVMovesVariableBlocksIncludingEmpty) {
  const int world = 4;
  // Rank s sends (s + d) % 3 ints to rank d, each valued 1000 * s + d.
  auto count = [](int s, int d) { return static_cast<int64_t>((s + d) % 3); };
  std::vector<std::vector<int32_t>> recv(world);
  ExpectAllOk(RunRanks(world, [&](int r, Collectives* c) {
    std::vector<int32_t> send;
    std::vector<int64_t> send_bytes(world), recv_bytes(world);
    int64_t total = 0;
    for (int d = 0; d < world; ++d) {
      for (int i = 0; i < count(r, d); ++i) send.push_back(1000 * r + d);
      send_bytes[d] = count(r, d) * 4;
      recv_bytes[d] = count(d, r) * 4;
      total += count(d, r);
    }
    recv[r].assign(total, -1);
    return c->AllToAllV(send.data(), send_bytes.data(), recv[r].data(), recv_bytes.data());
  }));
  for (int r = 0; r < world; ++r) {
    std::vector<int32_t> expected;
    for (int s = 0; s < world; ++s)
      for (int i = 0; i < count(s, r); ++i) expected.push_back(1000 * s + r);
    EXPECT_EQ(recv[r], expected) << "rank " << r;
  }
}

TEST(InProcessCollectives, AllToAllVSizeDisagreementIsAnErrorOnEveryRank) {
  std::vector<absl::Status> status = RunRanks(2, [&](int r, Collectives* c) {
    int32_t send[2] = {1, 2}, recv[4] = {};
    int64_t send_bytes[2] = {4, 4};
    int64_t recv_bytes[2] = {4, r == 1 ? 8 : 4};  // rank 1 expects too much from itself
    return c->AllToAllV(send, send_bytes, recv, recv_bytes);
  });
  // Every rank names the same pair (and none returns while another still
  // reads its stack-held sizes: ASan caught that).
  for (const absl::Status& s : status) {
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_NE(std::string(s.message()).find("rank 1 sends 4 bytes to rank 1 but it expects 8"),
              std::string::npos)
        << s;
  }
}

TEST(InProcessCollectives, BroadcastFromAnyRoot) {
  const int world = 4;
  std::vector<std::vector<int32_t>> bufs(world);
  ExpectAllOk(RunRanks(world, [&](int r, Collectives* c) {
    bufs[r] = {r, r, r};
    return c->Broadcast(bufs[r].data(), 3 * sizeof(int32_t), /*root=*/2);
  }));
  for (int r = 0; r < world; ++r) EXPECT_EQ(bufs[r], std::vector<int32_t>({2, 2, 2}));
}

TEST(InProcessCollectives, BarrierSeparatesPhases) {
  const int world = 4, rounds = 50;
  std::atomic<int> arrived{0};
  std::atomic<bool> early{false};
  ExpectAllOk(RunRanks(world, [&](int r, Collectives* c) {
    (void)r;
    for (int round = 1; round <= rounds; ++round) {
      arrived.fetch_add(1);
      RETURN_IF_ERROR(c->Barrier());
      if (arrived.load() < round * world) early = true;
      RETURN_IF_ERROR(c->Barrier());  // nobody starts the next round before all checked
    }
    return absl::OkStatus();
  }));
  EXPECT_FALSE(early.load());
}

TEST(InProcessCollectives, ManyMixedCollectivesBackToBack) {
  const int world = 3, rounds = 200;
  std::vector<float> last(world);
  ExpectAllOk(RunRanks(world, [&](int r, Collectives* c) {
    float acc = 0;
    for (int i = 0; i < rounds; ++i) {
      float v[2] = {static_cast<float>(r + i), 1.0f};
      RETURN_IF_ERROR(c->AllReduceSum(v, 2));
      if (v[1] != world) return absl::InternalError("bad count");
      int32_t root_value = (r == i % world) ? i : -1;
      RETURN_IF_ERROR(c->Broadcast(&root_value, sizeof(root_value), i % world));
      if (root_value != i) return absl::InternalError("bad broadcast");
      acc += v[0];
    }
    last[r] = acc;
    return absl::OkStatus();
  }));
  EXPECT_EQ(last[0], last[1]);
  EXPECT_EQ(last[1], last[2]);
}

TEST(InProcessCollectives, MismatchedCollectivesFailOnEveryRank) {
  std::vector<absl::Status> status = RunRanks(2, [&](int r, Collectives* c) {
    float v[5] = {};
    return c->AllReduceSum(v, r == 0 ? 4 : 5);
  });
  for (const absl::Status& s : status) {
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_NE(s.message().find("mismatch"), absl::string_view::npos) << s;
  }
}

TEST(InProcessCollectives, MissingRankTimesOutThenFailsFast) {
  std::vector<absl::Status> later(2);
  std::vector<absl::Status> status = RunRanks(
      2,
      [&](int r, Collectives* c) {
        if (r == 1) return absl::OkStatus();  // never joins the collective
        absl::Status s = c->Barrier();
        later[r] = c->Barrier();
        return s;
      },
      InProcessOptions{absl::Milliseconds(50)});
  EXPECT_EQ(status[0].code(), absl::StatusCode::kDeadlineExceeded) << status[0];
  EXPECT_FALSE(later[0].ok());
}

TEST(InProcessCollectives, TimeoutIsMeasuredOnTheGroupsClock) {
  // An hour on the fake clock passes in a few real milliseconds: the missing
  // rank's peer fails as soon as the clock is advanced past the deadline.
  FakeClock clock;
  std::atomic<bool> waiting_done{false};
  std::vector<absl::Status> status = RunRanks(
      2,
      [&](int r, Collectives* c) {
        if (r == 0) {
          absl::Status s = c->Barrier();
          waiting_done = true;
          return s;
        }
        // Rank 1 never joins; it moves time until rank 0 gives up, failing
        // the test after 30 s of real time instead of hanging.
        const absl::Time real_deadline = absl::Now() + absl::Seconds(30);
        while (!waiting_done && absl::Now() < real_deadline) {
          clock.Advance(absl::Minutes(10));
          absl::SleepFor(kClockPollInterval);
        }
        return absl::OkStatus();
      },
      InProcessOptions{absl::Hours(1), &clock});
  ASSERT_TRUE(waiting_done);
  EXPECT_EQ(status[0].code(), absl::StatusCode::kDeadlineExceeded) << status[0];
  EXPECT_NE(status[0].message().find("1h"), absl::string_view::npos) << status[0];
  EXPECT_GE(clock.Now(), absl::FromUnixSeconds(3600));
}

TEST(InProcessCollectives, AbortReleasesWaitingPeers) {
  std::vector<absl::Status> status = RunRanks(3, [&](int r, Collectives* c) {
    if (r == 2) {
      c->Abort(absl::InternalError("rank 2's step failed"));
      return absl::OkStatus();
    }
    float v = 1;
    return c->AllReduceSum(&v, 1);
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(status[r].code(), absl::StatusCode::kInternal) << status[r];
    EXPECT_NE(status[r].message().find("rank 2"), absl::string_view::npos);
  }
}

TEST(InProcessCollectives, EndpointsCarryTheirTopology) {
  std::shared_ptr<InProcessGroup> group = InProcessGroup::Create(4);
  std::unique_ptr<Collectives> c = group->Join(3);
  EXPECT_EQ(c->topology().world_size(), 4);
  EXPECT_EQ(c->topology().rank(), 3);
  EXPECT_TRUE(group->status().ok());
}

}  // namespace
}  // namespace expertd::engine::parallel
