// Runs one function per rank of an in-process group on its own thread and
// collects each rank's status. Test-only.
#ifndef EXPERTD_ENGINE_PARALLEL_TEST_UTIL_H_
#define EXPERTD_ENGINE_PARALLEL_TEST_UTIL_H_

#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "engine/parallel/in_process_collectives.h"

namespace expertd::engine::parallel {

// Every rank's thread is joined before returning. The group's timeout bounds
// every wait, so a broken test fails (DeadlineExceeded) instead of hanging.
inline std::vector<absl::Status> RunRanks(int world,
                                          const std::function<absl::Status(int, Collectives*)>& fn,
                                          InProcessOptions options = {absl::Seconds(30)}) {
  std::shared_ptr<InProcessGroup> group = InProcessGroup::Create(world, options);
  std::vector<absl::Status> status(world);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      std::unique_ptr<Collectives> c = group->Join(r);
      status[r] = fn(r, c.get());
    });
  }
  for (std::thread& t : threads) t.join();
  return status;
}

}  // namespace expertd::engine::parallel

#endif  // EXPERTD_ENGINE_PARALLEL_TEST_UTIL_H_
