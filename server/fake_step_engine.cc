#include "server/fake_step_engine.h"

#include <set>

#include "absl/strings/str_cat.h"

namespace expertd::server {

void FakeStepEngine::FailStep(int64_t n, absl::Status status) {
  absl::MutexLock lock(&mu_);
  fail_step_ = n;
  fail_status_ = std::move(status);
}

int64_t FakeStepEngine::steps() const {
  absl::MutexLock lock(&mu_);
  return steps_;
}

int64_t FakeStepEngine::sequences() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int64_t>(lengths_.size());
}

absl::Status FakeStepEngine::AddSequence(engine::SequenceId id) {
  absl::MutexLock lock(&mu_);
  if (!lengths_.emplace(id, 0).second)
    return absl::AlreadyExistsError(absl::StrCat("sequence ", id, " exists"));
  return absl::OkStatus();
}

absl::Status FakeStepEngine::RemoveSequence(engine::SequenceId id) {
  absl::MutexLock lock(&mu_);
  if (lengths_.erase(id) == 0) return absl::NotFoundError(absl::StrCat("no sequence ", id));
  return absl::OkStatus();
}

absl::StatusOr<int64_t> FakeStepEngine::BlocksNeeded(engine::SequenceId id,
                                                     int64_t new_tokens) const {
  absl::MutexLock lock(&mu_);
  auto it = lengths_.find(id);
  if (it == lengths_.end()) return absl::NotFoundError(absl::StrCat("no sequence ", id));
  return Blocks(it->second + new_tokens) - Blocks(it->second);
}

int64_t FakeStepEngine::UsedBlocksLocked() const {
  int64_t used = 0;
  for (const auto& [id, length] : lengths_) used += Blocks(length);
  return used;
}

engine::KvCacheStats FakeStepEngine::kv_cache_stats() const {
  absl::MutexLock lock(&mu_);
  engine::KvCacheStats s;
  s.blocks_total = options_.blocks_total;
  s.blocks_free = options_.blocks_total - UsedBlocksLocked();
  s.block_size = options_.block_size;
  s.bytes_per_block = 1;
  s.sequences = static_cast<int64_t>(lengths_.size());
  return s;
}

absl::Status FakeStepEngine::CheckLocked(const engine::StepRequest& request) const {
  std::set<engine::SequenceId> seen;
  int64_t needed = 0;
  for (const engine::SequenceChunk& c : request.chunks) {
    auto it = lengths_.find(c.id);
    if (c.all_logits)
      return absl::UnimplementedError("the fake engine returns last-position logits only");
    if (it == lengths_.end() || !seen.insert(c.id).second || c.tokens.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("bad chunk for sequence ", c.id));
    }
    for (int32_t t : c.tokens) {
      if (t < 0 || t >= options_.vocab_size)
        return absl::InvalidArgumentError(absl::StrCat("token ", t));
    }
    needed += Blocks(it->second + static_cast<int64_t>(c.tokens.size())) - Blocks(it->second);
  }
  if (UsedBlocksLocked() + needed > options_.blocks_total)
    return absl::ResourceExhaustedError("KV cache full");
  return absl::OkStatus();
}

absl::StatusOr<engine::StepResult> FakeStepEngine::Step(const engine::StepRequest& request) {
  absl::MutexLock lock(&mu_);
  if (++steps_ == fail_step_) return fail_status_;
  absl::Status valid = CheckLocked(request);
  if (!valid.ok()) return valid;
  engine::StepResult result;
  for (const engine::SequenceChunk& c : request.chunks) {
    int64_t& length = lengths_[c.id];
    length += static_cast<int64_t>(c.tokens.size());
    engine::SequenceResult r;
    r.id = c.id;
    r.logit_rows = 1;
    r.logits.assign(options_.vocab_size, 0.0f);
    r.logits[NextToken(length - 1)] = 10.0f;
    result.sequences.push_back(std::move(r));
  }
  return result;
}

}  // namespace expertd::server
