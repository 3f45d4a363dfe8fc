// CrossTrainerWindow: the steps of one task of a job shared across trainers (a job created
// with JobOptions.cross_trainer, as the tf.data service's CrossTrainerCache): the task's
// pipeline runs once, its steps are kept in a window bounded in bytes, and every trainer (a
// distinct trainer_id) reads the same step sequence at its own pace through a cursor of its
// own. Consumers that name the same trainer_id share that trainer's cursor: each step of the
// trainer goes to one of them, whichever asks first (as consumers of an independent job split
// its steps), never to two.
//
// Eviction (the window is full, the producer has a step to add):
//  - skipping mode (the default, TF's behaviour): the oldest step leaves once the leading
//    trainer (the highest cursor) has read it. A trainer whose cursor is below the window's
//    first step when it reads next skips to that step: it sees a gap, never a duplicate, and
//    its skipped_steps counts the steps it missed. The producer waits only when no trainer has
//    read the oldest step (the fastest trainer drives production; the slow ones never hold it).
//  - lossless mode: the oldest step leaves only once every trainer has read it; the slowest
//    trainer holds the producer (backpressure), so every trainer reads every step from where
//    it joined. Until `expected_trainers` trainers have joined nothing leaves (so that
//    trainers starting at different times all read from step 0 while the window holds it).
// Steps leave only when the producer needs room: the window keeps what fits, and a trainer
// that joins starts at the oldest step it still holds.
//
// Worked example, window of 3 steps, skipping mode, trainers A and B: the producer pushes
// 0, 1, 2 and waits (no one has read step 0). A reads 0, 1 (A's cursor 2): 3 evicts 0, 4
// evicts 1, then the producer waits again (A has not read 2). B, still at 0, reads next: it
// skips 0 and 1 (skipped_steps 2) and gets 2. In lossless mode 3 would wait for B to read 0.
//
// Memory: at most window_bytes of steps, but an empty window always admits one step (a step
// larger than the window still flows). Each step is produced once (Stats::steps_produced)
// however many trainers read it.
//
// Client input: trainer ids are bounded in length and in number per window (INVALID_ARGUMENT /
// RESOURCE_EXHAUSTED naming the id and the bound); a trainer removed (RemoveTrainer: the
// coordinator declared it gone) frees its slot.
//
// Trainers that leave: a trainer whose readers (Attach) have all been released, and that has
// none again for `drop_departed_after`, is dropped as RemoveTrainer drops one (Stats::
// trainers_dropped counts them): in lossless mode it no longer holds the producer, and its
// consumers' unacknowledged steps are freed. The check runs when the producer finds no room
// (TryPush's *retry_at says when the next departed trainer falls due, so a producer held by
// one retries then). A trainer dropped so is refused if it comes back (Join: FAILED_PRECONDITION
// naming it): its place in the step sequence is gone, and reading on from the window's oldest
// step would hide the steps it missed (or, in lossless mode, break its promise); it joins
// again under a new id. The window remembers the last kMaxDroppedTrainersPerWindow ids dropped
// (Stats::dropped_trainer_ids; the worker reports them to the coordinator, which journals them
// and refuses them in GetOrCreateJob).
//
// Consumers and broken streams (as StepBuffer's keyed independent consumers): a consumer
// attaches with its key (StreamRequest.consumer_id, stable across its reconnects) and the number
// of steps of this task it has received. The steps handed to a keyed consumer stay with it,
// outside the window's bytes and eviction, until it acknowledges them (Acknowledge: its credit
// grants); when it attaches again, the ones beyond what it says it received go back to the front
// of its trainer's queue, and the trainer's next reads (by that consumer or another of the same
// trainer) get them before the cursor's steps: a stream cut after the worker wrote a frame and
// before it arrived loses nothing and duplicates nothing for the trainer. A keyed consumer
// leaves at most its window (StepLimits::unacked_bytes, capped at max(max_unacked_bytes,
// 4 x window_bytes)) unacknowledged: beyond it Next hands it nothing (kBlockedOnAcknowledgement)
// until it acknowledges. A consumer that does not come back (its process died) for
// `drop_departed_after` while its trainer has other consumers reading is dead: its
// unacknowledged steps go to the front of its trainer's queue, as a returning consumer's would,
// and the trainer's other consumers read them next (Stats::consumers_dead, steps_handed_over):
// the trainer loses none of the steps handed to a dead process, at the price of reading again
// those the process had received but not acknowledged (at-least-once for that trainer, as the
// tf.data service's consumers that retry). Without another consumer the trainer itself departs
// and is dropped (above). A consumer that dies within drop_departed_after of the task's end
// keeps its steps (its trainer's other consumers may have received the end already).
// Worked example: consumer k of trainer A is handed 4, 5, 6; it acknowledges 5 steps in all
// (4 is released); its call breaks; it attaches again having received 6 steps (5 arrived, 6
// did not): 6 goes back to A's queue and A's next read gets 6, then the cursor's 7.
//
// Thread-safe. Wake-ups registered by NotifyWhenReady / TryPush run without the lock, on the
// thread that made the change, and must not block.
#ifndef SLUICE_WORKER_CROSS_TRAINER_WINDOW_H_
#define SLUICE_WORKER_CROSS_TRAINER_WINDOW_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "core/rpc/trainer_id.h"
#include "worker/cursor_counts.h"
#include "worker/step_buffer.h"

namespace sluice {

struct CrossTrainerWindowOptions {
  // Bytes of steps the window keeps (TaskStep::bytes); at least one step is always admitted.
  // Counted in the worker's memory budget as a task's step buffer is.
  size_t window_bytes = size_t{64} << 20;
  // See the class comment: false skips slow trainers ahead, true holds the producer.
  bool lossless = false;
  // Lossless mode: nothing leaves the window before this many trainers have joined (0: none
  // awaited).
  int64_t expected_trainers = 0;
  // Bounds on client input: trainers at once, and the length of a trainer id.
  int64_t max_trainers = kDefaultMaxTrainers;
  size_t max_trainer_id_bytes = kMaxTrainerIdBytes;
  // Keyed consumers remembered at once (each with its unacknowledged steps), over all trainers.
  int64_t max_consumers = 4096;
  // A keyed consumer leaves at most max(this, 4 x window_bytes) unacknowledged, whatever window
  // it names.
  size_t max_unacked_bytes = size_t{1} << 30;
  // A trainer without a reader for this long is dropped (see the class comment);
  // absl::InfiniteDuration() never drops one.
  absl::Duration drop_departed_after = absl::Minutes(5);
  // The clock departures are measured with (tests inject one).
  std::function<absl::Time()> now = [] { return absl::Now(); };
};

class CrossTrainerWindow {
 public:
  using Callback = std::function<void()>;

  // `on_change`, when set, is called (without the lock, must not block) after a change that
  // can make drained() or producer_status() change: Finish, ConfirmEnd, RemoveTrainer.
  explicit CrossTrainerWindow(CrossTrainerWindowOptions options, Callback on_change = nullptr);

  // Producer: adds `step` (its task_step must be the next one) if the window has room or can
  // make room by eviction (see the class comment). Otherwise returns false and registers
  // `space` (replacing an earlier one), called once when room may have appeared; the producer
  // then calls TryPush again. CANCELLED after Close().
  // *retry_at (may be null): when a departed trainer holding the producer falls due to be
  // dropped (call TryPush again then, even without a wake-up), else absl::InfiniteFuture().
  absl::StatusOr<bool> TryPush(const std::shared_ptr<const TaskStep>& step, Callback space,
                               absl::Time* retry_at = nullptr);
  // Producer, blocking until the step is admitted. CANCELLED after Close().
  absl::Status Push(std::shared_ptr<const TaskStep> step);
  // Producer: no more steps; `status` is OK at the end of data or the pipeline's error, which
  // trainers get after the steps before it.
  void Finish(absl::Status status);
  // Everything stops: Push returns CANCELLED, Next UNAVAILABLE (the pipeline's error if it
  // failed deterministically, as StepBuffer::Close).
  void Close();
  // The producer stops (Push returns CANCELLED); trainers are served what the window holds,
  // then get UNAVAILABLE. Used to drain a worker.
  void StopProducing();
  // True after Close() or StopProducing().
  bool producer_stopped() const;
  // The status the producer finished with; OK before then.
  absl::Status producer_status() const;

  // A consumer of `trainer_id` joins: returns the trainer's slot, the same for every consumer
  // of that id. A new trainer starts at the oldest step the window holds. INVALID_ARGUMENT for
  // a bad id (core/rpc/trainer_id.h), RESOURCE_EXHAUSTED when max_trainers other trainers are
  // joined, FAILED_PRECONDITION for a trainer dropped after departing (see the class comment).
  absl::StatusOr<int64_t> Join(absl::string_view trainer_id);
  // The coordinator declared the trainer gone: its cursor no longer holds anything (lossless
  // mode) and its slot is free. Unknown ids are ignored. A consumer of it still reading gets
  // NOT_FOUND; joining again starts a new trainer.
  void RemoveTrainer(absl::string_view trainer_id);

  // A consumer of the joined `trainer` (a slot) opens a stream: returns its reader id (> 0), which
  // Next, ReadyWithin, Acknowledge and Release take. `consumer_key` 0: a consumer without a key
  // (nothing is kept for it). Otherwise `received_steps` is how many steps of this task the
  // consumer has received; the steps handed to it beyond that go back to the trainer's queue
  // (see the class comment), and an earlier reader of the key is superseded (its Next returns
  // CANCELLED). NOT_FOUND for a slot not joined, INVALID_ARGUMENT for a key already reading for
  // another trainer or a negative count, RESOURCE_EXHAUSTED beyond max_consumers.
  absl::StatusOr<int64_t> Attach(int64_t trainer, uint64_t consumer_key, int64_t received_steps);
  // The keyed consumer of `reader` has received `received_steps` steps of this task in all: the
  // ones handed to it up to there are released. Unknown or superseded readers are ignored.
  void Acknowledge(int64_t reader, int64_t received_steps);
  // The reader's stream is gone. Its key is forgotten when it has nothing unacknowledged.
  void Release(int64_t reader);

  // Waits until `deadline` for the trainer's next steps: on return *steps holds 1 to
  // max_steps steps (fewer when they would exceed max_bytes, never fewer than one), or is
  // empty with *end at the end of the task, or empty with neither at the deadline. The steps
  // are the trainer's (its cursor moved past them). Errors: NOT_FOUND for a slot not joined
  // (or removed), the pipeline's error after the steps before it, UNAVAILABLE after Close().
  absl::Status Next(int64_t trainer, size_t max_steps, size_t max_bytes, absl::Time deadline,
                    std::vector<std::shared_ptr<const TaskStep>>* steps, bool* end);
  // The same within `limits` (StepBuffer's: a stream's frame and credit; unacked_bytes is not
  // used): when the trainer's next step costs more than limits.first_max, returns OK at once
  // with no step and its cost in *blocked_cost (0 otherwise; may be null).
  absl::Status Next(int64_t trainer, const StepLimits& limits, absl::Time deadline,
                    std::vector<std::shared_ptr<const TaskStep>>* steps, bool* end,
                    size_t* blocked_cost = nullptr);
  // The same for the stream of `reader` (Attach; 0: none): the steps handed to a keyed
  // consumer are kept until acknowledged, and while its unacknowledged steps fill its window
  // (limits.unacked_bytes) it gets none (*blocked_cost kBlockedOnAcknowledgement). CANCELLED for
  // a superseded or released reader.
  absl::Status Next(int64_t trainer, int64_t reader, const StepLimits& limits,
                    absl::Time deadline, std::vector<std::shared_ptr<const TaskStep>>* steps,
                    bool* end, size_t* blocked_cost = nullptr);
  // True if Next(trainer, reader, limits) would return at once (a step within first_max, the
  // end or an error).
  bool ReadyWithin(int64_t trainer, const StepLimits& limits, int64_t reader = 0) const;
  // Streams that do not block in Next: if Next(trainer) would return at once, returns false
  // and registers nothing; else registers `ready` under `key` (unique per stream; a new
  // registration replaces the key's old one) and returns true: `ready` is called once, when a
  // step, the end or an error arrives.
  bool NotifyWhenReady(int64_t trainer, int64_t key, Callback ready);
  // Removes `key`'s registration; after it returns, its callback is not called (unless it is
  // running on another thread now).
  void CancelNotify(int64_t key);
  // A consumer of the trainer received the end of the task (its stream half-closed after it).
  void ConfirmEnd(int64_t trainer);

  struct TrainerStats {
    std::string trainer_id;
    int64_t slot = 0;
    int64_t steps_read = 0;     // steps handed to this trainer's consumers
    int64_t skipped_steps = 0;  // steps it missed: it fell behind the window (skipping mode)
    int64_t lag_steps = 0;      // steps produced that it has not read and can still read
    int64_t cursor = 0;         // the task step it reads next (after any skip due)
    int64_t returned_steps = 0;  // steps given back by broken streams, queued for it now
    int64_t unacked_steps = 0;   // steps its keyed consumers hold unacknowledged
    int64_t open_readers = 0;    // streams of it open now (0: departed, may be dropped)
  };
  struct Stats {
    int64_t steps_produced = 0;  // each produced once, whatever the number of trainers
    int64_t steps_evicted = 0;
    int64_t steps_redelivered = 0;  // handed again after a broken stream gave them back
    int64_t trainers_dropped = 0;   // departed for drop_departed_after (see the class comment)
    int64_t consumers_dead = 0;     // keyed consumers gone for drop_departed_after (above)
    int64_t steps_handed_over = 0;  // their unacknowledged steps, queued for their trainers
    size_t bytes = 0;  // held now (the window; unacknowledged steps it evicted are extra)
    size_t steps = 0;
    size_t window_bytes = 0;
    bool lossless = false;
    bool producer_waiting = false;  // TryPush refused for want of room
    std::vector<TrainerStats> trainers;  // by slot
    // Trainers dropped after departing, oldest first (the last kMaxDroppedTrainersPerWindow).
    std::vector<std::string> dropped_trainer_ids;
  };
  // A consistent snapshot, O(trainers).
  Stats stats() const;
  // True once the producer finished and every joined trainer confirmed the end (at least one;
  // in lossless mode at least expected_trainers, who read every step whenever they join).
  bool drained() const;

 private:
  struct Trainer {
    std::string id;
    bool joined = false;
    bool ended = false;
    int64_t cursor = 0;
    int64_t steps_read = 0;
    int64_t skipped = 0;
    // Steps a broken stream gave back, in task-step order, all below the cursor: read first.
    std::deque<std::shared_ptr<const TaskStep>> returned;
    int64_t open_readers = 0;  // Attach'ed and not released
    absl::Time left_at = absl::InfiniteFuture();  // when open_readers last fell to 0
  };
  // A keyed consumer (StreamRequest.consumer_id) and what it holds unacknowledged.
  struct Consumer {
    int64_t trainer = 0;
    int64_t reader = 0;    // its current stream's reader id; 0: none open
    int64_t received = 0;  // steps of this task it acknowledged or said it received
    std::deque<std::shared_ptr<const TaskStep>> unacked;  // handed after `received`, in order
    size_t unacked_bytes = 0;
    absl::Time left_at = absl::InfiniteFuture();  // when its last stream was released
  };
  struct Reader {
    int64_t trainer = 0;
    uint64_t key = 0;  // 0: no Consumer
  };
  using Wakeups = std::vector<Callback>;

  bool FitsLocked(const TaskStep& step) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether the oldest step may leave now (see the class comment).
  bool CanEvictFrontLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Evicts oldest steps until `step` fits or none may leave; true when it fits.
  bool MakeRoomLocked(const TaskStep& step) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void AdmitLocked(std::shared_ptr<const TaskStep> step, Wakeups* wake)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Moves a trainer behind the window to its first step, counting the skip.
  void ApplySkipLocked(Trainer* t) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SetCursorLocked(Trainer* t, int64_t cursor) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool ReadyLocked(const Trainer& t) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The keyed consumer of `reader`, or null (no key, or no such reader).
  Consumer* ConsumerLocked(int64_t reader) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  const Consumer* ConsumerLocked(int64_t reader) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether `c` may take one more step of cost `cost` within `limits`' unacknowledged window.
  bool UnackedRoomLocked(const Consumer* c, const StepLimits& limits, size_t cost) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Releases c's unacknowledged steps up to `received` steps in all.
  void AcknowledgeLocked(Consumer* c, int64_t received) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Forgets the trainer's consumers and readers (it was removed).
  void ForgetConsumersLocked(int64_t trainer) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // RemoveTrainer's work, the id found; wake-ups into *wake.
  void RemoveTrainerLocked(const std::string& trainer_id, Wakeups* wake)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A reader of `trainer` closed (or was superseded).
  void ReaderGoneLocked(int64_t trainer) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Drops the trainers departed for drop_departed_after by `now`; returns when the next one
  // falls due (absl::InfiniteFuture(): none).
  absl::Time DropDepartedLocked(absl::Time now, Wakeups* wake) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Hands the unacknowledged steps of the consumers dead by `now` (see the class comment) to
  // their trainers' queues; sets next_dead_due_ to when the next one falls due.
  void HandOverDeadConsumersLocked(absl::Time now, Wakeups* wake)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The trainer's next step (after any skip due), or null.
  const TaskStep* NextStepLocked(const Trainer& t) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // After cursors moved: the producer may have room.
  void WakeProducerLocked(Wakeups* wake) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void WakeAllLocked(Wakeups* wake) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  const Trainer* FindLocked(int64_t trainer) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const CrossTrainerWindowOptions options_;
  const Callback on_change_;
  mutable absl::Mutex mu_;
  absl::CondVar cv_;
  std::deque<std::shared_ptr<const TaskStep>> steps_ ABSL_GUARDED_BY(mu_);
  int64_t first_step_ ABSL_GUARDED_BY(mu_) = 0;  // task step of steps_.front()
  int64_t next_push_ ABSL_GUARDED_BY(mu_) = 0;
  size_t bytes_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t evicted_ ABSL_GUARDED_BY(mu_) = 0;
  // The highest cursor any trainer reached (cursors only move forward, and a trainer joins at
  // or below it): what skipping mode may evict below.
  int64_t max_cursor_ ABSL_GUARDED_BY(mu_) = 0;
  // Lossless mode: the joined trainers' cursors (the lowest one bounds eviction).
  CursorCounts cursor_counts_ ABSL_GUARDED_BY(mu_);
  int64_t joined_ever_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<Trainer> trainers_ ABSL_GUARDED_BY(mu_);  // by slot; !joined: a free slot
  absl::flat_hash_map<std::string, int64_t> slots_ ABSL_GUARDED_BY(mu_);
  struct Waiter {
    int64_t trainer = 0;
    Callback ready;
  };
  absl::flat_hash_map<int64_t, Waiter> waiters_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint64_t, Consumer> consumers_ ABSL_GUARDED_BY(mu_);  // by key
  absl::flat_hash_map<int64_t, Reader> readers_ ABSL_GUARDED_BY(mu_);        // open, by id
  int64_t next_reader_ ABSL_GUARDED_BY(mu_) = 1;
  int64_t redelivered_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t dropped_ ABSL_GUARDED_BY(mu_) = 0;
  // The ids dropped after departing, oldest first, at most kMaxDroppedTrainersPerWindow.
  std::deque<std::string> dropped_ids_ ABSL_GUARDED_BY(mu_);
  int64_t consumers_dead_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t handed_over_ ABSL_GUARDED_BY(mu_) = 0;
  // The earliest time a released consumer with unacknowledged steps may be dead.
  absl::Time next_dead_due_ ABSL_GUARDED_BY(mu_) = absl::InfiniteFuture();
  Callback producer_wake_ ABSL_GUARDED_BY(mu_);
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status status_ ABSL_GUARDED_BY(mu_);
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  bool stop_producing_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace sluice

#endif  // SLUICE_WORKER_CROSS_TRAINER_WINDOW_H_
