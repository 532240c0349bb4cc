#include "engine/parallel/in_process_collectives.h"

#include <algorithm>

#include <cstring>
#include <utility>

#include "absl/base/internal/raw_logging.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace expertd::engine::parallel {
namespace {

enum Op : int { kAllReduce = 1, kAllGather, kAllToAll, kAllToAllV, kBroadcast };

const char* OpName(int op) {
  switch (op) {
    case kAllReduce:
      return "AllReduceSum";
    case kAllGather:
      return "AllGather";
    case kAllToAll:
      return "AllToAll";
    case kAllToAllV:
      return "AllToAllV";
    case kBroadcast:
      return "Broadcast";
  }
  return "?";
}

int64_t ElementSize(ReduceType type) {
  switch (type) {
    case ReduceType::kFloat32:
      return 4;
    case ReduceType::kInt64:
      return 8;
  }
  return 0;
}

template <typename T>
void SumSlice(const InProcessGroup& g, int64_t begin, int64_t end, T* out) {
  const T* first = static_cast<const T*>(g.post(0).recv);
  for (int64_t i = begin; i < end; ++i) out[i - begin] = first[i];
  for (int r = 1; r < g.world_size(); ++r) {
    const T* src = static_cast<const T*>(g.post(r).recv);
    for (int64_t i = begin; i < end; ++i) out[i - begin] += src[i];
  }
}

class Endpoint final : public Collectives {
 public:
  Endpoint(std::shared_ptr<InProcessGroup> group, ParallelTopology topology)
      : group_(std::move(group)), topology_(topology), rank_(topology.rank()) {}

  const ParallelTopology& topology() const override { return topology_; }

  absl::Status AllReduceSum(void* buf, int64_t count, ReduceType type) override {
    InProcessGroup::Post p;
    p.op = kAllReduce;
    p.recv = buf;
    p.count = count;
    p.aux = static_cast<int>(type);
    RETURN_IF_ERROR(Begin(p));
    const ShardRange slice = EvenShard(count, group_->world_size(), rank_);
    const int64_t esize = ElementSize(type);
    std::vector<char> sum(slice.size() * esize);
    switch (type) {
      case ReduceType::kFloat32:
        SumSlice(*group_, slice.begin, slice.end, reinterpret_cast<float*>(sum.data()));
        break;
      case ReduceType::kInt64:
        SumSlice(*group_, slice.begin, slice.end, reinterpret_cast<int64_t*>(sum.data()));
        break;
    }
    RETURN_IF_ERROR(group_->Arrive());  // every rank has read every input
    for (int r = 0; r < group_->world_size(); ++r) {
      if (!sum.empty())
        std::memcpy(static_cast<char*>(group_->post(r).recv) + slice.begin * esize, sum.data(),
                    sum.size());
    }
    return group_->Arrive();  // every slice is in every buffer
  }

  absl::Status AllGather(const void* send, void* recv, int64_t bytes) override {
    InProcessGroup::Post p;
    p.op = kAllGather;
    p.send = send;
    p.recv = recv;
    p.count = bytes;
    RETURN_IF_ERROR(Begin(p));
    for (int r = 0; r < group_->world_size(); ++r) {
      char* dst = static_cast<char*>(recv) + r * bytes;
      const void* src = group_->post(r).send;
      if (dst != src && bytes > 0) std::memcpy(dst, src, bytes);
    }
    return group_->Arrive();
  }

  absl::Status AllToAll(const void* send, void* recv, int64_t bytes_per_rank) override {
    InProcessGroup::Post p;
    p.op = kAllToAll;
    p.send = send;
    p.recv = recv;
    p.count = bytes_per_rank;
    RETURN_IF_ERROR(Begin(p));
    for (int s = 0; s < group_->world_size(); ++s) {
      const char* src = static_cast<const char*>(group_->post(s).send) + rank_ * bytes_per_rank;
      if (bytes_per_rank > 0)
        std::memcpy(static_cast<char*>(recv) + s * bytes_per_rank, src, bytes_per_rank);
    }
    return group_->Arrive();
  }

  absl::Status AllToAllV(const void* send, const int64_t* send_bytes, void* recv,
                         const int64_t* recv_bytes) override {
    InProcessGroup::Post p;
    p.op = kAllToAllV;
    p.send = send;
    p.recv = recv;
    p.send_bytes = send_bytes;
    p.recv_bytes = recv_bytes;
    RETURN_IF_ERROR(Begin(p));
    // Every rank checks every pair, so all reach the same verdict; on a
    // disagreement they meet once more before returning: a rank must not
    // leave (its size arrays and buffer may be on its stack) while another
    // still reads them.
    const int world = group_->world_size();
    for (int s = 0; s < world; ++s) {
      for (int d = 0; d < world; ++d) {
        const int64_t sent = group_->post(s).send_bytes[d];
        const int64_t expected = group_->post(d).recv_bytes[s];
        if (sent == expected) continue;
        absl::Status bad = absl::InvalidArgumentError(absl::StrCat("AllToAllV: rank ", s, " sends ",
                                                                   sent, " bytes to rank ", d,
                                                                   " but it expects ", expected));
        group_->Arrive().IgnoreError();  // the others' verdict is the same
        group_->Abort(bad);
        return bad;
      }
    }
    int64_t recv_offset = 0;
    for (int s = 0; s < world; ++s) {
      const InProcessGroup::Post& peer = group_->post(s);
      int64_t send_offset = 0;
      for (int d = 0; d < rank_; ++d) send_offset += peer.send_bytes[d];
      if (recv_bytes[s] > 0) {
        std::memcpy(static_cast<char*>(recv) + recv_offset,
                    static_cast<const char*>(peer.send) + send_offset, recv_bytes[s]);
      }
      recv_offset += recv_bytes[s];
    }
    return group_->Arrive();
  }

  absl::Status Broadcast(void* buf, int64_t bytes, int root) override {
    if (root < 0 || root >= group_->world_size()) {
      absl::Status bad =
          absl::InvalidArgumentError(absl::StrCat("Broadcast: root ", root, " is not a rank"));
      group_->Abort(bad);
      return bad;
    }
    InProcessGroup::Post p;
    p.op = kBroadcast;
    p.recv = buf;
    p.count = bytes;
    p.aux = root;
    RETURN_IF_ERROR(Begin(p));
    if (rank_ != root && bytes > 0) std::memcpy(buf, group_->post(root).recv, bytes);
    return group_->Arrive();
  }

  absl::Status Barrier() override { return group_->Arrive(); }

  void Abort(const absl::Status& why) override { group_->Abort(why); }

 private:
  // Publishes this rank's arguments, waits for all ranks, and checks that
  // they called the same collective with the same sizes.
  absl::Status Begin(const InProcessGroup::Post& p) {
    RETURN_IF_ERROR(group_->Arrive(rank_, p));
    for (int r = 0; r < group_->world_size(); ++r) {
      const InProcessGroup::Post& peer = group_->post(r);
      if (peer.op != p.op || (p.op != kAllToAllV && (peer.count != p.count || peer.aux != p.aux))) {
        absl::Status bad = absl::InvalidArgumentError(
            absl::StrCat("collective mismatch: rank ", rank_, " called ", OpName(p.op), "(",
                         p.count, ", ", p.aux, ") but rank ", r, " called ", OpName(peer.op), "(",
                         peer.count, ", ", peer.aux, ")"));
        group_->Abort(bad);
        return bad;
      }
    }
    return absl::OkStatus();
  }

  const std::shared_ptr<InProcessGroup> group_;
  const ParallelTopology topology_;
  const int rank_;
};

}  // namespace

std::shared_ptr<InProcessGroup> InProcessGroup::Create(int world_size, InProcessOptions options) {
  ABSL_RAW_CHECK(world_size >= 1, "world size must be >= 1");
  return std::shared_ptr<InProcessGroup>(new InProcessGroup(world_size, options));
}

InProcessGroup::InProcessGroup(int world_size, InProcessOptions options)
    : world_size_(world_size), options_(options), posts_(world_size) {}

std::unique_ptr<Collectives> InProcessGroup::Join(int rank) {
  absl::StatusOr<ParallelTopology> topology = ParallelTopology::SingleNode(world_size_, rank);
  ABSL_RAW_CHECK(topology.ok(), "InProcessGroup::Join: rank outside the group");
  return Join(*topology);
}

std::unique_ptr<Collectives> InProcessGroup::Join(const ParallelTopology& topology) {
  ABSL_RAW_CHECK(topology.world_size() == world_size_, "InProcessGroup::Join: world size mismatch");
  return std::make_unique<Endpoint>(shared_from_this(), topology);
}

void InProcessGroup::Abort(const absl::Status& why) {
  absl::MutexLock lock(&mu_);
  if (!broken_.ok()) return;
  broken_ = why.ok() ? absl::AbortedError("collective group aborted") : why;
  cv_.SignalAll();
}

absl::Status InProcessGroup::status() const {
  absl::MutexLock lock(&mu_);
  return broken_;
}

absl::Status InProcessGroup::Arrive(int rank, const Post& post) {
  {
    absl::MutexLock lock(&mu_);
    posts_[rank] = post;
  }
  return Arrive();
}

absl::Status InProcessGroup::Arrive() {
  absl::MutexLock lock(&mu_);
  if (!broken_.ok()) return broken_;
  const int64_t generation = generation_;
  if (++arrived_ == world_size_) {
    arrived_ = 0;
    ++generation_;
    cv_.SignalAll();
    return absl::OkStatus();
  }
  // A fake clock cannot wake a sleeping thread: wait in slices of real time
  // and read the deadline's clock between them.
  const absl::Time deadline = options_.clock->Now() + options_.timeout;
  while (generation_ == generation && broken_.ok()) {
    const absl::Duration left = deadline - options_.clock->Now();
    if (left <= absl::ZeroDuration()) {
      broken_ = absl::DeadlineExceededError(
          absl::StrCat("collective: ", world_size_ - arrived_, " of ", world_size_,
                       " ranks did not arrive within ", absl::FormatDuration(options_.timeout)));
      cv_.SignalAll();
      break;
    }
    cv_.WaitWithTimeout(&mu_, std::min(left, kClockPollInterval));
  }
  return generation_ != generation ? absl::OkStatus() : broken_;
}

}  // namespace expertd::engine::parallel
