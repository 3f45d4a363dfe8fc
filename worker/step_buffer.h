// StepBuffer: the bounded queue between a task's producer (TaskRunner) and the streams that
// serve its consumers (GrpcWorkerService).
//
// Coordinated mode: every consumer reads every step, at its own cursor (the task step it wants
// next); a step is released once every consumer's cursor has passed it. Independent mode: each
// step is handed to exactly one consumer, whichever asks first; for a consumer with a key (a
// non-zero `consumer` in Attach/Next: the consumer's id), the steps handed to it stay buffered
// (and counted in the budget) until it acknowledges them (Acknowledge, or Attach's count), and
// when it attaches again the unacknowledged ones go back to the front of the queue: a broken
// stream loses nothing. A consumer that never comes back keeps its unacknowledged steps (at most
// its credit window) until the buffer is destroyed; they do not hold drained() back.
//
// A keyed independent consumer holds at most its window (StepLimits::unacked_bytes, at most
// max(`max_unacked_bytes`, 4 x `max_bytes`)) of unacknowledged steps: one that never acknowledges stops getting steps (its
// stream waits for an acknowledgement) while the others read on.
//
// Coordinated mode keeps, per consumer, the steps handed to it and not yet acknowledged (at
// most its window, StepLimits::unacked_bytes), even once every cursor has passed them: a
// consumer whose call broke after the worker wrote a frame but before it arrived attaches again
// at the first step it did not receive and gets it again from memory, exactly once, without a
// replay (Acknowledge releases them; a consumer that does not acknowledge keeps only its
// window's worth, the most a broken call can have lost).
//
// Memory: the buffer holds at most `max_bytes` of steps (less while Cap caps it), but
// always admits one step when it is empty (a step larger than the budget still flows). A producer that would exceed the budget
// blocks in Push until consumers advance (backpressure). A step the producer offers below every
// consumer's cursor is dropped without being buffered (a replaying task skipping what its
// consumers already have).
//
// A consumer that has not attached keeps cursor 0 and so holds steps back, which is what makes
// all consumers read the same steps; if the producer has been blocked for
// `detach_unattached_after` while such a consumer stays away, it is detached (it may have
// finished with this task before a reassignment) and later attaching below the buffer's first
// step fails with OUT_OF_RANGE (the caller then replays the task for it, see task_runner.h).
// Such a consumer does NOT count as having the end of the task (drained() stays false) until it
// confirms an end itself (ConfirmEnd here, or ConfirmEndReplayed from its replay), or the
// coordinator declares it gone (Detach): otherwise a worker could report a task finished that
// a live consumer has not read, and nobody would move the task if that worker died.
//
// Retention window (coordinated mode, `retention_bytes` > 0): the steps every consumer is past
// are not dropped at once but kept, newest last, in a window of at most `retention_bytes`
// (the oldest leave first; a step larger than the window is not kept). A consumer that attaches
// at a released step still in the window (it came late and was detached, its stream broke
// after the others read on, or it was declared gone and came back) is served from memory:
// the steps from its start on are buffered again, in order, and it reads them exactly as the
// others did (Stats::retention_hits counts these attaches, each a replay avoided). Only a start
// below the window is OUT_OF_RANGE. Retained steps are not charged to `max_bytes`: they never
// block the producer nor hold the other consumers back; what the buffer holds in all is at
// most max_bytes + retention_bytes (plus one step when a step alone is larger than max_bytes),
// and while a consumer served from the window catches up its steps count in the buffer's
// bytes as any consumer's, so the producer resumes once it has caught up to within max_bytes.
// The window is emptied once the buffer is drained (no consumer can need it) or closed.
//
// Cost with many consumers: what a step may release is decided by the lowest cursor, kept as
// counts of cursors per task step (worker/cursor_counts.h), so a push, a read of k steps, a
// release and a readiness check cost O(1) (O(k) for the read) amortized whatever the number of
// consumers, and a wake-up goes only to the streams it concerns (NotifyWhenReady). Only rare
// events visit every consumer: detaching the unattached ones for lateness (once per blocked
// stretch) and stats().
//
// Thread-safe.
#ifndef SLUICE_WORKER_STEP_BUFFER_H_
#define SLUICE_WORKER_STEP_BUFFER_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <limits>
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
#include "absl/types/span.h"
#include "core/rpc/shared_step_payload.h"
#include "sluice/tensor.h"
#include "worker/cursor_counts.h"

namespace sluice {

class CrossTrainerWindow;
struct CrossTrainerWindowOptions;

// One step of a task, all of its pieces (N in coordinated mode, R in independent mode), each
// piece the leaves of one element in flatten order. Immutable once pushed.
struct TaskStep {
  int64_t task_step = 0;
  int64_t global_step = -1;
  int64_t num_real_pieces = 0;
  std::vector<std::vector<Tensor>> pieces;
  size_t bytes = 0;  // payload bytes, for the budget
  // Set for the steps of a job shared across trainers (each sent to several streams): its
  // payload encoded once for all of them (worker/consumer_frame.h passes it to the encoder).
  std::shared_ptr<const SharedStepPayload> shared_payload;
};

struct StepBufferOptions {
  // Budget for buffered steps; at least one step is always admitted.
  size_t max_bytes = size_t{256} << 20;
  // Coordinated mode: consumers that each read every step.
  int64_t num_consumers = 1;
  // Independent mode: each step goes to one consumer; cursors are not used.
  bool independent = false;
  // See the class comment. absl::InfiniteDuration() never detaches.
  absl::Duration detach_unattached_after = absl::Seconds(10);
  // Coordinated mode: the retention window for released steps (see the class comment), in
  // bytes on top of max_bytes; 0 keeps none. Independent mode keeps none.
  size_t retention_bytes = 0;
  // Whatever window a consumer names (StepLimits::unacked_bytes), it leaves at most
  // max(max_unacked_bytes, 4 x max_bytes) unacknowledged. A consumer acknowledges at least
  // every quarter of its window (its CreditGrants), so one whose window is below 4 x this
  // never waits on it.
  size_t max_unacked_bytes = size_t{1} << 30;
  // Set: a task of a job shared across trainers. The buffer is then this window
  // (worker/cross_trainer_window.h) and the options above do not apply: Attach, Next, Ready,
  // NotifyWhenReady and ConfirmEnd take a trainer's slot (cross_trainer_window()->Join) as
  // `consumer` and the window's reader id (CrossTrainerWindow::Attach) as generation;
  // Acknowledge, Detach and ConfirmEndReplayed do nothing (a reader acknowledges to the window).
  std::shared_ptr<const CrossTrainerWindowOptions> cross_trainer = nullptr;
};

// StepBuffer::Cap's limits, below the options' max_bytes and retention_bytes.
struct StepBufferCaps {
  size_t buffered_bytes = std::numeric_limits<size_t>::max();
  size_t buffered_steps = std::numeric_limits<size_t>::max();
  size_t retained_bytes = std::numeric_limits<size_t>::max();
  size_t retained_steps = std::numeric_limits<size_t>::max();
};

// How much one Next() may take of a consumer's next steps (a stream's frame and credit).
struct StepLimits {
  size_t max_steps = 1;
  // The costs of the steps taken sum to at most this, except that the first step needs only
  // to fit first_max.
  size_t max_cost = std::numeric_limits<size_t>::max();
  // The first step is taken only if its cost is at most this; else Next() returns at once with
  // no step and its cost in *blocked_cost (the stream waits for credit).
  size_t first_max = std::numeric_limits<size_t>::max();
  // A step's cost for this consumer; empty: TaskStep::bytes.
  std::function<size_t(const TaskStep&)> cost;
  // The consumer's window (its StreamRequest.window_bytes), bounding what it may leave
  // unacknowledged. Independent reads, a keyed consumer: no step is handed to it while the
  // bytes of the steps handed to it and not acknowledged would exceed this (it always gets
  // one step when it has none unacknowledged); Next() then returns no step with *blocked_cost
  // kBlockedOnAcknowledgement. Coordinated reads: at most this many bytes of the steps handed
  // to the consumer and not acknowledged are kept for its reconnect (see Attach); none when
  // not set (a caller that never acknowledges).
  size_t unacked_bytes = std::numeric_limits<size_t>::max();
  // Steps that must not share a frame: when set, a step is taken only if its frame_kind is
  // that of `first`, frame_first when set (the steps taken continue a frame begun by an
  // earlier call) or else the first step this call takes; a first step refused so returns as
  // one that costs too much (*blocked_cost: its cost). Next() asks once per step, and once
  // for `first` (the kind of a frame's first step is not asked again for each step that may
  // join it). A stream with a shared-memory ring keeps the steps built in the ring apart from
  // those in ordinary memory (step_stream.cc).
  std::function<int(const TaskStep& step)> frame_kind;
  const TaskStep* frame_first = nullptr;
};

// Next()'s *blocked_cost when an independent consumer has its window of unacknowledged steps:
// it gets more only after an Acknowledge (its next CreditGrant).
inline constexpr size_t kBlockedOnAcknowledgement = std::numeric_limits<size_t>::max();

class StepBuffer {
 public:
  // `on_change`, when set, is called after a change that can make drained() or
  // producer_status() change (Finish, ConfirmEnd, ConfirmEndReplayed, Detach, and an
  // independent Next that empties the buffer after the end was confirmed), without the
  // buffer's lock but on the caller's thread, which may hold its own locks (a WorkerServer
  // detaches consumers under its lock): it must only note the change and wake whoever acts on
  // it (worker/worker_server.h), never block nor call the buffer.
  explicit StepBuffer(StepBufferOptions options, std::function<void()> on_change = nullptr);
  ~StepBuffer();

  // The cross-trainer window this buffer is (StepBufferOptions::cross_trainer), or null.
  CrossTrainerWindow* cross_trainer_window() const { return window_.get(); }

  // Producer: adds `step` (its task_step must be the next one), blocking while over budget.
  // CANCELLED after Close() or StopProducing().
  absl::Status Push(std::shared_ptr<const TaskStep> step);
  // Producer, without blocking (a TaskRunner on a shared pool, worker/task_runner_pool.h): as
  // Push, except that a step that does not fit the budget is not taken. Then it returns false
  // and registers `space` (replacing an earlier registration; each TryPush clears it), which is
  // called once, without the buffer's lock, on the thread that may have made room (consumers
  // releasing steps, an attach or detach, StopProducing, Close), and must not block: the
  // producer then calls TryPush again. *retry_at is when to call it again even without a
  // wake-up (the moment unattached consumers are detached, as Push's wait does), else
  // absl::InfiniteFuture(). CANCELLED after Close() or StopProducing().
  absl::StatusOr<bool> TryPush(const std::shared_ptr<const TaskStep>& step,
                               const std::function<void()>& space, absl::Time* retry_at);
  // Producer, without blocking, a block of consecutive steps (`steps[0]` the next task step):
  // exactly TryPush of each in order, under one acquisition of the lock (small steps: one lock
  // and one round of wake-ups per block instead of per step). Returns how many it took, a
  // prefix; when it took fewer than all, `space` is registered (and *retry_at set) as TryPush
  // does when it refuses. *room is then the budget's bytes left (max_bytes, or the Cap cap
  // when lower, less the bytes buffered; 0 for a cross-trainer window) and *room_steps, when
  // given, the steps it may still queue (Cap's steps less those queued; SIZE_MAX without that
  // cap, 0 for a cross-trainer window), so that the producer makes no bigger block than the
  // buffer can take. CANCELLED after Close() or StopProducing() (nothing taken).
  absl::StatusOr<size_t> TryPushSteps(absl::Span<const std::shared_ptr<const TaskStep>> steps,
                                      const std::function<void()>& space, absl::Time* retry_at,
                                      size_t* room, size_t* room_steps = nullptr);
  // Caps what the buffer holds (StepBufferCaps): from now on it admits steps only while the
  // buffered bytes stay within min(max_bytes, caps.buffered_bytes) and the steps queued for
  // consumers stay below caps.buffered_steps (still at least one step when the buffer is
  // empty), and retains released steps within min(retention_bytes, caps.retained_bytes) and
  // caps.retained_steps (the oldest retained beyond either go at once); SIZE_MAX lifts a cap.
  // Steps buffered already stay; a cap that rises wakes a producer waiting for room. A task
  // whose steps are built in a consumer's shared-memory ring caps them at parts of the ring
  // (TaskRunner::AttachPlacement, StepPlacement::buffer_caps): steps made past the ring's room
  // would go by TCP. A shared job's window: no effect.
  void Cap(const StepBufferCaps& caps);
  // True after Close() or StopProducing(): Push and TryPush take nothing more.
  bool producer_stopped() const;
  // Producer: no more steps; `status` is OK at the end of data or the pipeline's error, which
  // consumers receive after the steps before it.
  void Finish(absl::Status status);

  // Coordinated mode: (re)positions `consumer` at `start_step` and returns a generation that
  // Next() must pass; an older generation of the same consumer is superseded (its Next() gets
  // CANCELLED). A start_step already released but still in the retention window is buffered
  // again (served from memory); OUT_OF_RANGE when it has left the window too, and then the
  // consumer no longer holds steps here (detached as for lateness: it reads the task elsewhere,
  // and only its own confirmed end counts, see ConfirmEndReplayed) and a stream of it still
  // open is superseded; INVALID_ARGUMENT for a bad consumer index. Independent mode: `consumer` is the consumer's key (0: none) and
  // `start_step` the number of steps it has received; the steps handed to it beyond that go
  // back to the front of the queue, and an older generation of the key is superseded.
  absl::StatusOr<int64_t> Attach(int64_t consumer, int64_t start_step);
  // Independent mode: the consumer with key `consumer` has received `received_steps` steps in
  // all; the ones handed to it up to there are released. Coordinated mode: the consumer
  // (index) has received every task step below `received_steps`; the ones kept for its
  // reconnect below there are dropped.
  void Acknowledge(int64_t consumer, int64_t received_steps);
  // Replaces every step the buffer holds (queued, retained, handed out and not acknowledged)
  // by replace(step), the same replacement for each step wherever it is held (a stream that
  // ended moves the steps placed in its shared-memory ring to ordinary memory,
  // worker/step_placement.h). Steps a reader already took are not affected. Not for a
  // cross-trainer window's steps.
  void ReplaceSteps(const std::function<std::shared_ptr<const TaskStep>(
                        const std::shared_ptr<const TaskStep>&)>& replace);
  // Replaces the queued steps (pushed, taken by no reader yet), in task step order, by
  // replace(step) until it returns null (that step and the rest stay), under the buffer's lock
  // (a reader takes a step either before or after): the steps made before a stream's
  // shared-memory ring attached are copied into it (TaskRunner::AttachPlacement). Not for a
  // cross-trainer window's steps.
  void ReplaceQueuedSteps(const std::function<std::shared_ptr<const TaskStep>(
                              const std::shared_ptr<const TaskStep>&)>& replace);

  // Waits until `deadline` for the consumer's next step(s): on return *steps holds between 1 and
  // max_steps steps (fewer if that would exceed max_bytes, never fewer than one), or is empty
  // with *end set at the end of the task, or empty with neither at the deadline. The steps
  // count as delivered (cursor advanced / claimed). Errors: the pipeline's (after all steps
  // before it), CANCELLED for a superseded generation, UNAVAILABLE after StopProducing() once
  // the buffered steps are served, or after Close() (the pipeline's error instead if it failed
  // deterministically: see Close).
  absl::Status Next(int64_t consumer, int64_t generation, size_t max_steps, size_t max_bytes,
                    absl::Time deadline, std::vector<std::shared_ptr<const TaskStep>>* steps,
                    bool* end);
  // The same within `limits`: when the consumer's next step is buffered but costs more than
  // limits.first_max, returns OK at once with no step, *end false and *blocked_cost set to the
  // step's cost (0 otherwise; blocked_cost may be null).
  absl::Status Next(int64_t consumer, int64_t generation, const StepLimits& limits,
                    absl::Time deadline, std::vector<std::shared_ptr<const TaskStep>>* steps,
                    bool* end, size_t* blocked_cost = nullptr);
  // True if Next() would return at once (a step, the end or an error).
  bool Ready(int64_t consumer) const;
  // True if Next(limits) would return at once with a step, the end or an error (not blocked).
  bool ReadyWithin(int64_t consumer, const StepLimits& limits) const;

  // Wake-ups for streams that do not block in Next() (the worker's reactor streams). If Next()
  // for (consumer, generation) would return at once (a buffered step for it, whatever its cost;
  // the end; an error; a superseded generation), returns false and registers nothing: call
  // Next(). Otherwise registers `ready` and returns true; `ready` is then called once, without
  // the buffer's lock, on the thread that makes the stream ready, and must not block (schedule
  // the work elsewhere). Only the streams a change concerns are woken: a push of task step t
  // wakes the coordinated consumers whose cursor is t, and in independent mode one waiting
  // stream (which passes the wake on to the next one if it leaves steps buffered); the end, an
  // error, Close() and StopProducing() wake every stream; Attach() and Detach() the superseded
  // generation. A stream has at most one registration (a new one replaces it).
  using ReadyCallback = std::function<void()>;
  bool NotifyWhenReady(int64_t consumer, int64_t generation, ReadyCallback ready);
  // Removes the registration of (consumer, generation), if any; after it returns, its callback
  // is not called (unless it is running on another thread now).
  void CancelNotify(int64_t consumer, int64_t generation);

  // The consumer has the end of the task: its stream half-closed after the end frame, which a
  // consumer does only once it has read it. Only then does its end count for drained(): a
  // worker frozen between handing the end to the stream and sending it must not report the
  // task finished (the coordinator would not move it, and its consumers would wait for an end
  // that never leaves the worker). A superseded generation is ignored.
  void ConfirmEnd(int64_t consumer, int64_t generation);
  // The consumer confirmed the end of the task read through a private replay (this buffer had
  // released the steps it wanted): its end counts here too, unless it has attached here again.
  void ConfirmEndReplayed(int64_t consumer);
  // Marks that `consumer` will not read again (it received the end, or the coordinator declared
  // it gone): it no longer holds steps. A stream of it still open is superseded (its Next()
  // gets CANCELLED); attaching again works as for any consumer (OUT_OF_RANGE below the first
  // buffered step).
  void Detach(int64_t consumer);

  // The producer stops (Push returns CANCELLED); consumers are served what is buffered, then
  // get UNAVAILABLE. Used to drain a worker.
  void StopProducing();
  // Everything stops: Push returns CANCELLED, Next UNAVAILABLE with `message` (default: "task
  // closed on this worker"), or the pipeline's error if it failed deterministically
  // (ClosedTaskStatus, core/util/transient_error.h: a consumer that had not read it yet still
  // gets it when the worker stops the failed task).
  void Close(absl::string_view message = {});

  // Bytes and steps buffered for consumers (the retention window not included).
  size_t buffered_bytes() const;
  size_t buffered_steps() const;
  // Bytes of the retention window.
  size_t retained_bytes() const;
  // A consistent snapshot for metrics (worker/worker_metrics.h); O(consumers).
  struct Stats {
    int64_t steps_produced = 0;  // steps the producer has pushed (or skipped)
    size_t bytes = 0;            // buffered
    size_t steps = 0;            // buffered
    size_t max_bytes = 0;
    // The producer was refused for want of room (TryPush returned false) and waits for the
    // buffer's space wake-up: it has stopped at max_bytes (what flow-control tests wait for).
    bool producer_waiting_for_space = false;
    bool independent = false;
    // Coordinated mode: each consumer's cursor, -1 once detached or ended.
    std::vector<int64_t> cursors;
    // Coordinated mode, the retention window: released steps kept for late consumers, its
    // capacity (StepBufferOptions::retention_bytes), and how many attaches it served (each a
    // private replay avoided).
    size_t retained_bytes = 0;
    size_t retained_steps = 0;
    size_t retention_capacity = 0;
    int64_t retention_hits = 0;
    // Coordinated mode: the consumers that have confirmed the end of the task here
    // (ConfirmEnd or ConfirmEndReplayed: they read it to its end), ascending. Reported to the
    // coordinator (TaskProgress.ended_consumers), which counts them even when they have
    // exited before they could report it themselves.
    std::vector<int64_t> confirmed_ends;
  };
  Stats stats() const;
  // True once every consumer has confirmed the end of the task (ConfirmEnd or
  // ConfirmEndReplayed) or been detached by Detach (coordinated mode), or one consumer has
  // confirmed it (independent mode). Detaching an unattached consumer for lateness does not
  // count.
  bool drained() const;
  // The status the producer finished with (Finish); OK before then and at the end of data.
  absl::Status producer_status() const;

  // The work done on consumers' cursors so far: slots of the cursor counts touched, plus every
  // consumer visited by a loop over all of them outside stats(). Tests check with it that a
  // step costs the same whatever the number of consumers, without timing anything.
  int64_t TEST_cursor_ops() const;

 private:
  static constexpr int64_t kDetached = INT64_MAX;
  static_assert(kDetached == CursorCounts::kNone, "a detached cursor holds nothing back");

  // Wake-ups (NotifyWhenReady, TryPush). `wake` collects the callbacks to run once mu_ is
  // released.
  using Wakeups = std::vector<std::function<void()>>;

  // The lowest cursor (kDetached when every consumer is detached): O(1), from cursor_counts_.
  int64_t MinCursor() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Sets `consumer`'s cursor and attached flag, keeping cursor_counts_ and unattached_ in step:
  // the only way either field changes after construction.
  void SetCursorLocked(size_t consumer, int64_t cursor, bool attached)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Sets `consumer`'s ended flag, keeping not_ended_ in step.
  void SetEndedLocked(size_t consumer, bool ended) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Detaches, as late, every consumer that has not attached (Push and TryPush when blocked).
  void DetachUnattachedLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ReleaseLocked(Wakeups* wake) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Appends `step` (the next one, known to fit), or skips it when every consumer is past it.
  void AdmitLocked(std::shared_ptr<const TaskStep> step, Wakeups* wake)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void WakeProducerLocked(Wakeups* wake) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether `step` must wait for room: the buffer is not empty and the step would take it past
  // the budget in bytes or in steps (Cap).
  bool OverBudgetLocked(const TaskStep& step) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // TryPush under the lock, its wake-ups into `wake`.
  absl::StatusOr<bool> TryPushLocked(const std::shared_ptr<const TaskStep>& step,
                                     const std::function<void()>& space, absl::Time* retry_at,
                                     Wakeups* wake) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Keeps the released `step` (task step first_step_ - 1) in the retention window, dropping the
  // oldest retained steps beyond retention_budget_ (into dropped_).
  void RetainLocked(std::shared_ptr<const TaskStep> step) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Drops the oldest retained steps beyond retention_budget_ (into dropped_).
  void TrimRetainedLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Hands the steps in dropped_ to `wake`, so that they are destroyed once mu_ is released.
  void DropAfterUnlockLocked(Wakeups* wake) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ClearRetainedLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool DrainedLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool ReadyLocked(int64_t consumer) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The consumer's next buffered step, or null.
  const TaskStep* NextStepLocked(int64_t consumer) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  void WakeAtLocked(int64_t task_step, Wakeups* wake) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void WakeOneIndependentLocked(Wakeups* wake) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Wakes the registration of `consumer`'s `superseded` generation, if any: a stream registers
  // only under its consumer's current generation and every change of it comes here, so that is
  // the only one the consumer can have.
  void WakeGenerationLocked(int64_t consumer, int64_t superseded, Wakeups* wake)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void WakeAllLocked(Wakeups* wake) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Adds on_change_, if set, to `wake`.
  void NotifyChangeLocked(Wakeups* wake) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const StepBufferOptions options_;
  const std::function<void()> on_change_;
  const std::unique_ptr<CrossTrainerWindow> window_;  // see cross_trainer_window()
  mutable absl::Mutex mu_;
  absl::CondVar cv_;
  std::deque<std::shared_ptr<const TaskStep>> steps_ ABSL_GUARDED_BY(mu_);
  int64_t first_step_ ABSL_GUARDED_BY(mu_) = 0;  // task_step of steps_.front()
  int64_t next_push_ ABSL_GUARDED_BY(mu_) = 0;   // task_step the producer pushes next
  size_t bytes_ ABSL_GUARDED_BY(mu_) = 0;
  // What the producer may buffer and what is retained: options_.max_bytes and
  // options_.retention_bytes, or the caps set by Cap when lower; and in steps (Cap).
  size_t budget_ ABSL_GUARDED_BY(mu_) = options_.max_bytes;
  size_t step_budget_ ABSL_GUARDED_BY(mu_) = std::numeric_limits<size_t>::max();
  size_t retention_budget_ ABSL_GUARDED_BY(mu_) = options_.retention_bytes;
  size_t retention_step_budget_ ABSL_GUARDED_BY(mu_) = std::numeric_limits<size_t>::max();
  // The retention window: task steps [first_step_ - retained_.size(), first_step_), released.
  std::deque<std::shared_ptr<const TaskStep>> retained_ ABSL_GUARDED_BY(mu_);
  size_t retained_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t retention_hits_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<int64_t> cursors_ ABSL_GUARDED_BY(mu_);
  // The cursors other than kDetached, counted per task step: MinCursor() without a scan.
  CursorCounts cursor_counts_ ABSL_GUARDED_BY(mu_);
  std::vector<int64_t> generations_ ABSL_GUARDED_BY(mu_);
  std::vector<bool> attached_ ABSL_GUARDED_BY(mu_);
  // Consumers not attached and not detached (they hold steps back until detached as late).
  int64_t unattached_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<bool> ended_ ABSL_GUARDED_BY(mu_);
  int64_t not_ended_ ABSL_GUARDED_BY(mu_) = 0;  // consumers with !ended_
  // Consumers visited by loops over all of them (TEST_cursor_ops).
  int64_t scan_ops_ ABSL_GUARDED_BY(mu_) = 0;
  // Ended by its own confirmed end (not by Detach); stays set.
  std::vector<bool> confirmed_ ABSL_GUARDED_BY(mu_);
  int64_t next_generation_ ABSL_GUARDED_BY(mu_) = 1;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  bool end_confirmed_ ABSL_GUARDED_BY(mu_) = false;  // independent mode
  // Independent mode, by consumer key: the steps handed out and not yet acknowledged (in the
  // order handed out), how many were acknowledged, and the key's current generation.
  struct Unacked {
    std::deque<std::shared_ptr<const TaskStep>> steps;
    int64_t acknowledged = 0;
    int64_t generation = 0;
    size_t bytes = 0;  // of `steps`
  };
  absl::flat_hash_map<int64_t, Unacked> unacked_ ABSL_GUARDED_BY(mu_);
  // Coordinated mode, per consumer: the steps handed to it (in task step order, contiguous)
  // and not acknowledged, kept for its reconnect (see the class comment), and their bytes.
  struct InFlight {
    std::deque<std::shared_ptr<const TaskStep>> steps;
    size_t bytes = 0;
  };
  std::vector<InFlight> in_flight_ ABSL_GUARDED_BY(mu_);
  // Steps this buffer let go of under mu_, maybe their last reference: destroyed after mu_ is
  // released (DropAfterUnlockLocked). Freeing a step (its tensors, a shared-memory region's
  // bookkeeping) is per-step work that would otherwise hold the producer and every other
  // stream of the task off mu_; at 1 KiB steps it was most of the time the lock was held.
  std::vector<std::shared_ptr<const TaskStep>> dropped_ ABSL_GUARDED_BY(mu_);
  // Adds the steps Next() just handed to `consumer` to its in-flight steps, keeping at most
  // `keep_bytes` of them (at least the last step).
  void KeepInFlightLocked(int64_t consumer,
                          const std::vector<std::shared_ptr<const TaskStep>>& steps,
                          size_t keep_bytes, Wakeups* wake) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Steps [start_step, first_step_) back into the buffer from the retention window and
  // `consumer`'s in-flight steps; false (nothing changed) when they do not cover them.
  bool RestoreLocked(int64_t consumer, int64_t start_step) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void AcknowledgeLocked(Unacked* u, int64_t received_steps, Wakeups* wake)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Registered wake-ups, by generation (unique in the buffer). Coordinated mode: waiting_at_
  // lists the generations waiting for each task step (their cursor); independent mode:
  // waiting_order_ in the order registered. An entry whose generation is no longer in waiters_
  // is stale and skipped.
  struct Waiter {
    int64_t consumer = 0;
    ReadyCallback ready;
  };
  absl::flat_hash_map<int64_t, Waiter> waiters_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<int64_t, std::vector<int64_t>> waiting_at_ ABSL_GUARDED_BY(mu_);
  std::deque<int64_t> waiting_order_ ABSL_GUARDED_BY(mu_);
  // TryPush: the producer's registered wake-up, and its blocked stretch (as Push's locals).
  std::function<void()> producer_wake_ ABSL_GUARDED_BY(mu_);
  absl::Time try_blocked_since_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  bool try_detached_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status status_ ABSL_GUARDED_BY(mu_);
  bool stop_producing_ ABSL_GUARDED_BY(mu_) = false;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  // stop_producing_ || closed_, for producer_stopped() without the lock (the producer asks
  // before each step; the lock it took was a second acquisition per step next to TryPush's).
  std::atomic<bool> producer_stopped_{false};
  std::string close_message_ ABSL_GUARDED_BY(mu_);
};

}  // namespace sluice

#endif  // SLUICE_WORKER_STEP_BUFFER_H_
