// InProcessCollectives: Collectives between threads of one process, each
// thread standing for one CPU "virtual device". It makes every multi-device
// algorithm (MoEShard, expert parallelism, later the training schedules)
// runnable and testable without GPUs.
//
//   auto group = InProcessGroup::Create(4);
//   // on thread r:  std::unique_ptr<Collectives> c = group->Join(r);
//   //               RETURN_IF_ERROR(c->AllReduceSum(buf, n));
//
// Buffers are host memory. Every collective is a rendezvous of all ranks (a
// generation-counted barrier under one mutex); data moves by memcpy between
// the ranks' buffers, each rank doing its own share. AllReduceSum is
// reduce-scatter then all-gather: rank r sums slice r of the vector, adding
// the ranks' values in rank order, and writes it into every rank's buffer, so
// the result is bitwise identical on every rank and from run to run.
//
// A rank that does not arrive within `timeout` breaks the group
// (DeadlineExceeded for everyone waiting, Aborted afterwards), so a test or a
// server whose rank died fails instead of hanging. The timeout is measured on
// `clock` (base/clock.h): a test with a FakeClock advances it instead of
// waiting, and a waiting rank notices within kClockPollInterval of real time.
#ifndef EXPERTD_ENGINE_PARALLEL_IN_PROCESS_COLLECTIVES_H_
#define EXPERTD_ENGINE_PARALLEL_IN_PROCESS_COLLECTIVES_H_

#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "base/clock.h"
#include "engine/parallel/collectives.h"

namespace expertd::engine::parallel {

struct InProcessOptions {
  // How long a rank waits for its peers at one rendezvous, on `clock`.
  absl::Duration timeout = absl::Seconds(120);
  // Not owned; must outlive the group.
  const Clock* clock = RealClock::Get();
};

// How often (real time) a waiting rank re-reads the clock for its deadline.
inline constexpr absl::Duration kClockPollInterval = absl::Milliseconds(20);

class InProcessGroup : public std::enable_shared_from_this<InProcessGroup> {
 public:
  // REQUIRES: world_size >= 1.
  static std::shared_ptr<InProcessGroup> Create(int world_size, InProcessOptions options = {});

  int world_size() const { return world_size_; }

  // The endpoint of `rank` (REQUIRES: 0 <= rank < world_size; one endpoint
  // per rank, used by one thread at a time). The endpoint keeps the group
  // alive.
  std::unique_ptr<Collectives> Join(int rank);
  // The same for a rank of a multi-node layout (the rendezvous's view).
  // REQUIRES: topology.world_size() == world_size().
  std::unique_ptr<Collectives> Join(const ParallelTopology& topology);

  // Breaks the group: every waiting and later collective fails with `why`
  // (Aborted when `why` is OK). Thread-safe, idempotent (first reason wins).
  void Abort(const absl::Status& why);

  // OK while the group works.
  absl::Status status() const;

  // What a rank announces at the start of a collective; peers read it
  // between the first and last barrier of that collective.
  struct Post {
    int op = 0;
    const void* send = nullptr;
    void* recv = nullptr;
    int64_t count = 0;  // elements or bytes, depending on the op
    int aux = 0;        // reduce type or root
    const int64_t* send_bytes = nullptr;
    const int64_t* recv_bytes = nullptr;
  };

  // Rank `rank` publishes its post and waits for every rank's (barrier).
  absl::Status Arrive(int rank, const Post& post);
  // A plain barrier (the post is left as is).
  absl::Status Arrive();
  // Valid between Arrive and the collective's last barrier.
  const Post& post(int rank) const { return posts_[rank]; }

 private:
  InProcessGroup(int world_size, InProcessOptions options);

  const int world_size_;
  const InProcessOptions options_;

  mutable absl::Mutex mu_;
  int arrived_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t generation_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status broken_ ABSL_GUARDED_BY(mu_);
  absl::CondVar cv_;
  // Written by its rank under mu_ before a barrier, read by peers after it
  // (the barrier's mutex orders the accesses).
  std::vector<Post> posts_;
};

}  // namespace expertd::engine::parallel

#endif  // EXPERTD_ENGINE_PARALLEL_IN_PROCESS_COLLECTIVES_H_
