// ExpertTier: the host tier of expert offload with an SSD tier behind it
// (ES-MoE's DRAM + SSD). Each routed expert's training state - the fp32
// weights the forward uses, the gradient, the AdamW moments and (bf16/fp16)
// the fp32 master - lives in the model's Parameters and the optimizer's
// state while the expert is "resident", and otherwise in one aligned record
// of a RecordFile under the tier directory (read and written with O_DIRECT;
// buffered, with a warning, where the file system refuses it).
// At most capacity() experts are resident (the host budget divided by the
// record size).
//
// The order of use in a step is given ahead (BeginStep's AccessSequence,
// revised by ReviseSequence as routing becomes known), so an I/O thread
// evicts by Belady (the unpinned resident expert used furthest ahead in the
// sequence) and prefetches the next expert the sequence needs whenever that
// eviction is a better deal, so the compute rarely waits. A clean expert
// (only read since its record was written) is dropped without a write.
//
// Protocol: Pin(id, need) before touching an expert's Parameters (kWeights:
// values and gradients, all forward and backward need) or also its optimizer
// state (kAll), Unpin(id, dirty) after (dirty: something changed). A record
// has three aligned sections (values, gradients, AdamW state), and a load
// reads only what the use needs: a gradient cleared since it was written is
// skipped, the state only for kAll (an expert on the host without it
// reads it in when a kAll pin comes). Unpinned, non-resident experts' vectors are empty and belong
// to the I/O thread; a Parameter's has_grad, shape and dtype stay valid always (the record holds a
// gradient only while has_grad). Outside BeginStep/EndStep the I/O thread
// only serves pins (no prefetch, no trimming), so the caller may change
// has_grad (ClearGrad) of every parameter there.
//
// Thread safety: Pin/Unpin from any thread; Begin/EndStep and HoldAll from
// the trainer's thread with no pin outstanding.
#ifndef EXPERTD_ENGINE_TRAIN_EXPERT_TIER_H_
#define EXPERTD_ENGINE_TRAIN_EXPERT_TIER_H_

#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/train/adamw.h"
#include "engine/train/belady.h"
#include "engine/train/moe_block.h"
#include "engine/train/record_file.h"

namespace expertd::train {

class ExpertTier {
 public:
  // One expert: its three weights and their indices in the optimizer state.
  struct Expert {
    MlpParams weights;
    size_t state_index[3];  // gate, up, down
  };
  struct Stats {
    int64_t pins = 0, waits = 0;  // waits: pins that found the expert on the SSD
    int64_t prefetches = 0, evictions = 0, clean_drops = 0;
    double wait_seconds = 0;
    // How far the step's pins were from its sequence: positions passed over
    // (uses the sequence had that never came), and pins on the sequence
    // (advance) whose expert the rest of it did not have. Both 0: the
    // sequence was exactly the step's uses.
    int64_t skipped_uses = 0, unplanned_pins = 0;
    // The most experts on the host (loading and evicting ones included)
    // since the last BeginStep's trim.
    int64_t host_peak = 0;
  };

  // The record bytes of `e` (weights, gradients, moments, masters; aligned).
  static int64_t RecordBytes(const MlpParams& e);
  // Creates DIR/expert_training_state.bin, one record per expert.
  // REQUIRES: `states` (the optimizer's, sized to every parameter) and the
  // experts' Parameters outlive the tier and are not resized. Every expert
  // starts resident; the first BeginStep trims to `capacity` (>= 2).
  static absl::StatusOr<std::unique_ptr<ExpertTier>> Create(const std::string& dir,
                                                            std::vector<Expert> experts,
                                                            size_t capacity,
                                                            std::vector<AdamWParamState>* states);
  ~ExpertTier();

  // The expert owning Parameter `w`, or -1.
  int IdOf(const Parameter* w) const;
  size_t size() const { return experts_.size(); }
  const Expert& expert(int id) const { return experts_[id]; }

  // A step starts using experts in `sequence` order, the uses from position
  // `state_from` on needing the AdamW state too (the optimizer): returns once
  // the host holds at most capacity() experts (Belady picks which go to the
  // SSD); prefetch runs until EndStep (which waits for the I/O thread to go
  // idle).
  absl::Status BeginStep(AccessSequence sequence, size_t state_from = 0);
  // Replaces the step's sequence by a revision that keeps its first
  // `unchanged` positions (a layer's routing became known:
  // step_access_plan.h). REQUIRES: inside BeginStep/EndStep, and no use at or
  // after position `unchanged` of the old sequence has been pinned yet.
  void ReviseSequence(AccessSequence sequence, size_t unchanged, size_t state_from);
  void EndStep();
  // Blocks until the I/O thread has nothing left to do (for tests).
  void WaitForIo();
  enum class Need { kWeights, kAll };
  // Blocks until expert `id` is resident with what `need` names and pins it
  // there. The pin is the sequence's next use of `id` (re-pinning the expert
  // just used is the same use) unless `advance` is false: a use off the
  // sequence.
  absl::Status Pin(int id, Need need = Need::kWeights, bool advance = true);
  void Unpin(int id, bool dirty);
  // Brings every expert to the host and keeps it there (past capacity) until
  // the next BeginStep: for whoever reads the whole model (gradient dumps,
  // weight files, checkpoints).
  absl::Status HoldAll();

  size_t capacity() const { return capacity_; }
  bool direct_io() const { return file_->direct_io(); }
  const std::string& path() const { return file_->path(); }
  int64_t file_bytes() const { return file_->file_bytes(); }
  int64_t bytes_read() const { return file_->bytes_read(); }
  int64_t bytes_written() const { return file_->bytes_written(); }
  Stats stats() const;

 private:
  enum class Where { kHost, kSsd, kLoading, kEvicting };
  struct Slot {
    Where where = Where::kHost;
    int pins = 0;
    bool dirty = true;  // the record is older than the host copy
    bool state = true;  // the AdamW state is on the host too (else only in the record)
  };
  // What the I/O thread does next (under mu_): load `id` (with its state
  // when `state`; only its state when it is on the host already) after
  // evicting `victim` (-1: a free slot), or nothing (id -1).
  struct Plan {
    int id = -1, victim = -1;
    bool prefetch = false, state = false;
  };

  ExpertTier(std::vector<Expert> experts, size_t capacity, std::unique_ptr<RecordFile> file,
             std::vector<AdamWParamState>* states);
  void Run();
  Plan NextPlan();                            // REQUIRES: mu_ held
  int VictimFor(size_t next_use, bool must);  // REQUIRES: mu_ held
  size_t NextUse(int id) const;               // REQUIRES: mu_ held
  bool Ready(int id, Need need) const;        // REQUIRES: mu_ held
  // Whether `id` must be read (all or its state) for `need`; sets *plan.
  bool PlanLoad(int id, Need need, bool prefetch, size_t next_use, Plan* plan);  // mu_ held
  // I/O thread, mu_ not held; `state`: the expert's state is on the host.
  absl::Status Evict(int id, bool write, bool state);
  absl::Status Load(int id, bool weights, bool state);

  // Constant after construction.
  const std::vector<Expert> experts_;
  const size_t capacity_;
  const std::unique_ptr<RecordFile> file_;
  std::vector<AdamWParamState>* const states_;
  std::map<const Parameter*, int> ids_;
  // The I/O thread's: its buffer, and which parts of each record hold data.
  struct Saved {
    bool grad[3] = {false, false, false}, moments[3] = {false, false, false};
    bool master[3] = {false, false, false};
  };
  AlignedBuffer io_buffer_;
  std::vector<Saved> saved_;

  mutable std::mutex mu_;
  std::condition_variable changed_;
  // State below is protected by mu_.
  std::vector<Slot> slots_;
  size_t in_memory_ = 0;        // kHost, kLoading and kEvicting slots
  std::map<int, Need> demand_;  // pinners waiting
  AccessSequence sequence_;
  size_t cursor_ = 0;      // next position of sequence_
  size_t state_from_ = 0;  // the first position of sequence_ needing the state
  bool active_ = false, hold_all_ = false, busy_ = false, stop_ = false;
  absl::Status error_;
  Stats stats_;
  std::thread thread_;
};

}  // namespace expertd::train

#endif  // EXPERTD_ENGINE_TRAIN_EXPERT_TIER_H_
