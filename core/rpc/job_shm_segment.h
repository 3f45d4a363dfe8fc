// JobShmSegment: the worker's side of a job segment (docs/SERVICE.md "One copy per step"). A
// task of a job shared across trainers (worker/cross_trainer_window.h) serves every step to N
// trainers; its co-located consumers all map this one segment, each step is written into it
// once (its numeric tensors laid out as a frame buffer, each at a 64-byte aligned offset in
// header order, then its strings back to back), and a trainer's frame carries only where the
// step lies (proto JobShmPayload). Serving a 790 KB step of image strings to 4 trainers then
// costs one memcpy instead of 4 sends through the kernel's TCP path.
//
// A region is reused only when nothing can view it: the step still lives on the worker (its
// JobShmRegion handle, held by the step's SharedStepPayload while the window or a consumer's
// unacknowledged steps keep the step), or a consumer process that received it has not
// released it (CreditGrant.job_shm_released, counted per consumer process: its consumer_key).
// A consumer process that exits releases everything it held: the process that took the
// hand-over is watched through a pidfd (SO_PEERCRED of the hand-over socket), polled when a
// step finds no room. Regions are placed first fit, so a region held long (a trainer keeping
// tensors) leaves a hole rather than stopping the segment; a step that finds no room goes the
// stream's ordinary way.
//
// Frames lost in a broken call (sent, never received: the consumer cannot release them). The
// frames naming a region sent to a keyed consumer (StreamRequest.consumer_id, within its
// process's consumer_key) are logged with their number in the consumer's step count (the
// call's start_step plus the steps sent before it on the call; CreditGrant.received_steps
// counts the same). When the consumer calls again saying it received R steps (Resume), the
// logged frames numbered R and beyond never arrived: their holds go (a step sent again is held
// again when it is). Acknowledgements (received_steps) trim the log. A consumer's claim drops
// at most one of its process's holds per frame logged for that consumer, each once; a claim
// below what it acknowledged or beyond what was sent it (or negative) is INVALID_ARGUMENT and
// changes nothing. Like a release, the claim is the consumer process's word about its own
// views: one that says it received fewer steps than it did drops its process's holds of
// regions it views, never another process's or the step's own (the window's) hold.
//
// Worked example: consumer 7 of process K, start_step 10, is sent steps numbered 10, 11, 12
// in regions at 0, 1024, 2048 (K holds each once), acknowledges 11 (frame 10 leaves the log,
// its hold stays until K releases 0); its call breaks; it calls again with start_step 11:
// frames 11 and 12 were lost, K's holds of 1024 and 2048 go, and each region is free once its
// step leaves the window.
//
// Worked example, a 4 KiB segment: step 0 (1000 bytes) at offset 0, step 1 (2000 bytes) at
// 1024; trainers A and B each receive both (holds A:{0,1024}, B:{0,1024}); the window drops
// step 0 and A releases 0: offset 0 stays held by B. Step 2 (1500 bytes) fits nowhere (1024
// free at 3072) and goes inline; B releases 0, and step 3 (900 bytes) takes offset 0.
//
// Thread-safe.
#ifndef SLUICE_CORE_RPC_JOB_SHM_SEGMENT_H_
#define SLUICE_CORE_RPC_JOB_SHM_SEGMENT_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "core/rpc/shm_segment.h"
#include "core/rpc/step_frame.h"
#include "sluice/tensor.h"

namespace sluice {

// What this process's job segments did (process-wide, for metrics, tests and benchmarks).
struct JobShmCounts {
  int64_t steps_written = 0;    // steps copied into a job segment (once each)
  int64_t bytes_written = 0;
  int64_t frames_placed = 0;    // frames sent as a header naming a region
  int64_t no_room = 0;          // steps that found no room (sent the ordinary way)
  int64_t holders_reaped = 0;   // consumer processes found exited, their holds freed
  int64_t lost_frames_freed = 0;  // frames lost in broken calls, their holds freed (Resume)
  int64_t segments_alive = 0;
};
JobShmCounts ProcessJobShmCounts();

// The bytes a step's region takes: its numeric tensors at 64-byte aligned offsets, then its
// strings.
size_t JobShmStepBytes(const std::vector<Tensor>* pieces, size_t num_pieces);

class JobShmSegment;

// A step's region: not reused while this handle lives (the step's SharedStepPayload holds it).
class JobShmRegion {
 public:
  JobShmRegion(std::shared_ptr<JobShmSegment> segment, uint64_t offset, uint64_t bytes)
      : segment_(std::move(segment)), offset_(offset), bytes_(bytes) {}
  ~JobShmRegion();
  JobShmRegion(const JobShmRegion&) = delete;
  JobShmRegion& operator=(const JobShmRegion&) = delete;

  JobShmSegment* segment() const { return segment_.get(); }
  uint64_t offset() const { return offset_; }
  uint64_t bytes() const { return bytes_; }

 private:
  const std::shared_ptr<JobShmSegment> segment_;
  const uint64_t offset_;
  const uint64_t bytes_;
};

class JobShmSegment : public std::enable_shared_from_this<JobShmSegment> {
 public:
  // A segment of `bytes` (ShmSegment::Create: charged to the memory budget; its errors).
  static absl::StatusOr<std::shared_ptr<JobShmSegment>> Create(size_t bytes);
  ~JobShmSegment();

  const std::shared_ptr<ShmSegment>& segment() const { return segment_; }
  uint64_t id() const { return id_; }  // unique in this process, never 0

  // Writes the step's `num_pieces` pieces (valid host tensors) into a region of their own and
  // returns its handle; nullptr when the step is empty, larger than the segment or finds no
  // room now (after freeing the holds of consumer processes that exited).
  std::shared_ptr<JobShmRegion> Write(const std::vector<Tensor>* pieces, size_t num_pieces)
      ABSL_LOCKS_EXCLUDED(mu_);
  // A frame naming `region` goes to the consumer process `consumer_key`: the region is held
  // for it until it releases it (or exits). False (nothing held) when more than kMaxHolders
  // processes hold regions or the key is empty. `consumer` (StreamRequest.consumer_id; 0: none)
  // on a call that started at its step `call_start`, and `step`, the frame's number in that
  // consumer's step count: as Sent(consumer_key, consumer, call_start, step) (the consumer's
  // log opened at call_start if none is open), then the frame logged for Resume, under one
  // acquisition of the lock (a stream hands every step it places).
  bool Hand(const std::string& consumer_key, const JobShmRegion& region, uint64_t consumer = 0,
            int64_t call_start = 0, int64_t step = 0) ABSL_LOCKS_EXCLUDED(mu_);
  // The consumer `consumer` of process `consumer_key`, on a call that started at its step
  // `call_start`, was sent the steps numbered below `sent_end` (in frames naming a region or
  // not); opens the consumer's log at `call_start` if none is open. The stream reports each
  // frame it sends, and its sink calls this before handing a frame.
  void Sent(const std::string& consumer_key, uint64_t consumer, int64_t call_start,
            int64_t sent_end) ABSL_LOCKS_EXCLUDED(mu_);
  // The consumer acknowledged `acknowledged` steps in all (CreditGrant.received_steps): the
  // logged frames below that arrived and leave the log (their holds stay until released).
  void Acknowledge(const std::string& consumer_key, uint64_t consumer, int64_t acknowledged)
      ABSL_LOCKS_EXCLUDED(mu_);
  // The consumer calls again having received `received` steps in all (its start_step): the
  // holds of the frames logged for it numbered `received` and beyond go (they were lost), and
  // its log is forgotten (its new call logs from `received`). INVALID_ARGUMENT naming the
  // values, and nothing changed, when `received` is negative, below what it acknowledged or
  // beyond what it was sent. A consumer with nothing logged: OK, nothing changes.
  absl::Status Resume(const std::string& consumer_key, uint64_t consumer, int64_t received)
      ABSL_LOCKS_EXCLUDED(mu_);
  // The consumer process `consumer_key` released the regions at `offsets` (one entry per
  // frame it received). INVALID_ARGUMENT naming the offset when it holds no such region (the
  // entries before it are released).
  absl::Status Release(const std::string& consumer_key, absl::Span<const uint64_t> offsets)
      ABSL_LOCKS_EXCLUDED(mu_);
  // The process `pid` (as this process sees it; <= 0: unknown) took the hand-over for
  // `consumer_key`: its exit frees that key's holds.
  void WatchHolder(const std::string& consumer_key, int pid) ABSL_LOCKS_EXCLUDED(mu_);

  // Tests and metrics.
  size_t live_regions() const ABSL_LOCKS_EXCLUDED(mu_);
  size_t held_by(const std::string& consumer_key) const ABSL_LOCKS_EXCLUDED(mu_);
  int64_t steps_written() const ABSL_LOCKS_EXCLUDED(mu_);

  // Frames lost in broken calls whose holds Resume freed (tests, metrics).
  int64_t lost_frames_freed() const ABSL_LOCKS_EXCLUDED(mu_);

  static constexpr size_t kMaxHolders = 1024;
  // Bounds on the frame log: consumers per process, frames per consumer (beyond them the
  // oldest entries are forgotten: their holds stay until released or the process exits).
  static constexpr size_t kMaxLoggedConsumers = 4096;
  static constexpr size_t kMaxLoggedFrames = 65536;

 private:
  friend class JobShmRegion;
  // What was sent to one keyed consumer: its step count acknowledged and sent, and the frames
  // naming a region (step number, offset) not yet acknowledged, in order.
  struct ConsumerLog {
    int64_t acknowledged = 0;
    int64_t sent_end = 0;
    std::deque<std::pair<int64_t, uint64_t>> frames;
  };
  struct Holder {
    UniqueFd pidfd;                                 // -1: not watched
    absl::flat_hash_map<uint64_t, int64_t> held;    // offset -> frames not released
    absl::flat_hash_map<uint64_t, ConsumerLog> consumers;  // by consumer_id
  };
  // The log of `consumer` in `holder`, created when absent (acknowledged and sent up to
  // `start`: its call's first step) and there is room; null when there is none.
  ConsumerLog* LogLocked(Holder* holder, uint64_t consumer, int64_t start)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  explicit JobShmSegment(std::shared_ptr<ShmSegment> segment);
  // A region of `bytes` first fit, or false.
  bool AllocateLocked(uint64_t bytes, uint64_t* offset) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void UnrefLocked(uint64_t offset, int64_t n) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Frees the holds of watched consumer processes that exited; whether any went.
  bool ReapExitedHoldersLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Unref(uint64_t offset) ABSL_LOCKS_EXCLUDED(mu_);

  const std::shared_ptr<ShmSegment> segment_;
  const uint64_t id_;
  mutable absl::Mutex mu_;
  std::map<uint64_t, uint64_t> free_ ABSL_GUARDED_BY(mu_);  // offset -> bytes, coalesced
  struct Live {
    uint64_t bytes;
    int64_t refs;  // the step's handle + frames handed and not released
  };
  absl::flat_hash_map<uint64_t, Live> live_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, Holder> holders_ ABSL_GUARDED_BY(mu_);
  int64_t steps_written_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t lost_frames_freed_ ABSL_GUARDED_BY(mu_) = 0;
};

// The JobPayloadSink of one stream: places a step of a shared job (its SharedStepPayload
// writes it once into `segment`) and holds it for the stream's consumer process. A keyed
// consumer's (`consumer` != 0) frames are numbered from `start_step` (the call's) and logged
// for Resume: the stream calls Sent after each frame it encodes (placed or not) and
// Acknowledge with each grant's received_steps. Not thread-safe (the stream's lock).
class JobShmStreamSink : public JobPayloadSink {
 public:
  JobShmStreamSink(std::shared_ptr<JobShmSegment> segment, std::string consumer_key,
                   uint64_t consumer = 0, int64_t start_step = 0)
      : segment_(std::move(segment)),
        consumer_key_(std::move(consumer_key)),
        consumer_(start_step >= 0 ? consumer : 0),
        call_start_(start_step),
        next_step_(start_step) {}
  bool Place(const WireStepView& step, proto::JobShmPayload* out) override;
  // The frame just encoded held `steps` steps.
  void Sent(size_t steps);
  void Acknowledge(int64_t received_steps);
  JobShmSegment* segment() const { return segment_.get(); }
  const std::string& consumer_key() const { return consumer_key_; }

 private:
  const std::shared_ptr<JobShmSegment> segment_;
  const std::string consumer_key_;
  uint64_t consumer_;        // 0: frames not logged (no key, or a count that would overflow)
  const int64_t call_start_;  // the call's start_step
  int64_t next_step_;         // the number of the next step sent
};

}  // namespace sluice

#endif  // SLUICE_CORE_RPC_JOB_SHM_SEGMENT_H_
