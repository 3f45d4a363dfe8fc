// TaskRunner: runs one task (proto::TaskDef) of a job on a worker and feeds its StepBuffer.
//
// A task's steps: the task's pipeline (TaskDef.dataset, or under DYNAMIC the chain of the
// splits the coordinator hands out), rebatched to per-replica pieces, grouped into steps:
//  - coordinated: pieces of sizes CoordinatedPieceSizes(B, C, R), N = C x R pieces a step, piece
//    c x R + r for replica r of consumer c;
//  - independent: pieces of sizes BatchSizesForWorker(B, 1, R, 0), R pieces a step;
// where B is the pipeline's batch size (core/data/distribute/distribute_spec.h). A partial last step is filled
// with size-0 dummies (core/data/step_iterator.h). A step_sharded task keeps the job's global steps s
// with s >= skip_steps and (s - skip_steps) % K == task_index and numbers them 0, 1, ... (its
// task steps), recording s. A SHARDING_RANGES task (num_steps > 0) yields its pipeline's first
// num_steps steps, recording global step first_step + task step.
//
// Threads: a TaskRunner owns no thread. It produces its steps in jobs on a TaskRunnerPool
// (worker/task_runner_pool.h; the process's unless TaskRunnerOptions names another), each job
// a slice: steps pushed (small ones in blocks of up to 64 under one lock, StepBuffer::
// TryPushSteps; a block ends early at a step that was slow to make and at the room the buffer
// had at the last push, so a task's first step goes alone) until the StepBuffer is full (then the thread goes back to the pool and the buffer's
// space notification, StepBuffer::TryPush, schedules the next slice), the task ends, or
// kSliceTime (10 ms) passed with at least one step pushed (then the runner goes to the back of
// the pool's queue, so that the runners of all tasks take turns). A step is produced on
// one pool thread at a time, never on two at once; a step that blocks inside its pipeline holds
// its thread (the pool starts threads in its place, up to a bound, see task_runner_pool.h).
// Close(), StopProducing() and the destructor cancel the pipeline (core/data/cancellation.h), so
// that a step being produced now (a long shuffle fill, a filter scanning for a match) ends
// within one input pull of each op instead of running to its end, and stop production there:
// the destructor waits only for that step to notice, and frees the pipeline. The CANCELLED this
// gives is the runner's own doing, never reported as the task's error.
//
// Thread safety: TaskRunner is thread-safe; TaskStepIterator and StepReader are not.
#ifndef SLUICE_WORKER_TASK_RUNNER_H_
#define SLUICE_WORKER_TASK_RUNNER_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "sluice/dataset.h"
#include "core/data/cancellation.h"
#include "core/data/executor.h"
#include "core/data/step_iterator.h"
#include "proto/coordinator.pb.h"
#include "worker/step_buffer.h"
#include "worker/task_runner_pool.h"

namespace sluice {

class StepPlacement;  // worker/step_placement.h
class JobShmSegment;  // core/rpc/job_shm_segment.h

// The splits of a DYNAMIC task (the coordinator's GetSplit in production).
class SplitProvider {
 public:
  virtual ~SplitProvider() = default;
  // The next split's pipeline, or std::nullopt at the end of splits.
  virtual absl::StatusOr<std::optional<Dataset>> NextSplit() = 0;
};
// Makes a fresh provider for one run of a task; nullptr for static tasks.
using SplitProviderFactory = std::function<std::unique_ptr<SplitProvider>(const proto::TaskDef&)>;

// A task's steps, computed on the calling thread.
class TaskStepIterator {
 public:
  // INVALID_ARGUMENT for a bad TaskDef (no dataset, an unbatched pipeline with more than one
  // replica in sync: TF's message, as in-process mode; bad counts) and the
  // pipeline's construction errors. `splits` is required for DYNAMIC tasks.
  static absl::StatusOr<std::unique_ptr<TaskStepIterator>> Create(
      const proto::TaskDef& task, std::unique_ptr<SplitProvider> splits = nullptr,
      const ExecutorOptions& executor = {});

  // The next kept step (all of its pieces), or *end. Errors are the pipeline's, prefixed with
  // the task.
  absl::Status GetNext(TaskStep* step, bool* end);

  int64_t pieces_per_step() const { return pieces_per_step_; }
  // The spec of one piece (dummies are made from it).
  const ElementSpec& piece_spec() const { return piece_spec_; }

 private:
  TaskStepIterator() = default;

  proto::TaskDef task_;
  int64_t pieces_per_step_ = 0;
  ElementSpec piece_spec_;
  std::unique_ptr<StepIterator> steps_;
  int64_t global_step_ = 0;  // steps of the underlying sequence read so far
  int64_t task_step_ = 0;    // steps kept so far
  std::vector<Element> pieces_;  // GetNext's scratch (its capacity kept from step to step)
};

struct TaskRunnerOptions {
  // Budget of the task's StepBuffer.
  size_t buffer_bytes = size_t{256} << 20;
  // StepBufferOptions::detach_unattached_after.
  absl::Duration detach_unattached_after = absl::Seconds(10);
  // StepBufferOptions::retention_bytes: released steps kept for consumers that come late or
  // reconnect, so that they read from memory instead of a private replay.
  size_t retention_bytes = size_t{64} << 20;
  // Tasks of jobs shared across trainers (JobOptions.cross_trainer): the bytes of steps their
  // window keeps (CrossTrainerWindowOptions::window_bytes), instead of buffer_bytes.
  size_t cross_trainer_window_bytes = size_t{64} << 20;
  // Such a task's trainer without a stream open for this long is dropped from its window
  // (CrossTrainerWindowOptions::drop_departed_after).
  absl::Duration cross_trainer_drop_departed_after = absl::Minutes(5);
  // The task's buffer's on_change (StepBuffer's constructor; not its private replays').
  std::function<void()> on_change;
  // Called once, on the producing thread, when the buffer has taken the task's first step (a
  // WorkerServer reports it at once: the coordinator's failure policy tells a worker that dies
  // before a task's first step from one that dies making progress). Same rules as on_change.
  std::function<void()> on_first_step;
  // The pipeline's executor options; `cancellation` is replaced by the runner's own token
  // (each runner, replays included, cancels its pipeline when it is closed).
  ExecutorOptions executor;
  // DYNAMIC tasks get their splits from here.
  SplitProviderFactory splits;
  // Where the runner produces its steps (borrowed; must outlive the runner and its replays);
  // null: ProcessTaskRunnerPool().
  TaskRunnerPool* pool = nullptr;
};

class TaskRunner;

// Bounds the private replays (OpenReader) alive at once on a worker, over all its tasks: each
// holds a pipeline and a buffer of its own, so that consumers coming back late cannot make a
// worker build any number of them. Thread-safe.
class ReplaySlots {
 public:
  // `max` < 1 counts as 1.
  explicit ReplaySlots(int max) : max_(max < 1 ? 1 : max) {}
  // Takes a slot; false when all `max` are taken.
  bool TryAcquire() {
    int n = used_.load(std::memory_order_relaxed);
    while (n < max_) {
      if (used_.compare_exchange_weak(n, n + 1, std::memory_order_relaxed)) return true;
    }
    return false;
  }
  void Release() { used_.fetch_sub(1, std::memory_order_relaxed); }
  int used() const { return used_.load(std::memory_order_relaxed); }
  int max() const { return max_; }

 private:
  const int max_;
  std::atomic<int> used_{0};
};

// How a stream opens its reader (TaskRunner::OpenReader).
struct ReaderOptions {
  // The consumer's instance (StreamRequest.consumer_id: random per consumer iterator; 0: an
  // older client without one) and its consumer_index. While a reader of one instance is open
  // for a consumer_index, opening one for the same index with another non-zero instance is
  // FAILED_PRECONDITION naming both (two processes claiming one consumer_index would otherwise
  // supersede each other forever); the same instance (a reconnect) supersedes its old reader.
  uint64_t instance = 0;
  int64_t consumer_index = 0;
  // Private replays take a slot here for as long as their reader lives; none free is
  // UNAVAILABLE (the consumer retries). Null: no bound.
  std::shared_ptr<ReplaySlots> replay_slots;
  // A job shared across trainers: the trainer the stream reads for (StreamRequest.trainer_id);
  // its consumers share the trainer's cursor in the task's window.
  std::string trainer_id;
};

// One consumer stream's view of a task: the shared buffer at the consumer's cursor (from its
// retention window when the step was released but is still kept), or a private replay of the
// task when the stream starts at a step the buffer no longer holds.
class StepReader {
 public:
  ~StepReader();
  // As StepBuffer::Next.
  absl::Status Next(size_t max_steps, size_t max_bytes, absl::Time deadline,
                    std::vector<std::shared_ptr<const TaskStep>>* steps, bool* end);
  absl::Status Next(const StepLimits& limits, absl::Time deadline,
                    std::vector<std::shared_ptr<const TaskStep>>* steps, bool* end,
                    size_t* blocked_cost);
  bool ReadyWithin(const StepLimits& limits) const;
  // As StepBuffer::NotifyWhenReady and CancelNotify, for this reader (streams that do not
  // block in Next: the worker's reactor streams). A registration (and a Next that may wait)
  // first has the runner push the steps it made and still holds in a block (task_runner.cc,
  // kBlockSteps): a waiting reader never waits for the making of a later step.
  bool NotifyWhenReady(StepBuffer::ReadyCallback ready);
  void CancelNotify();
  // As StepBuffer::Acknowledge (independent reads).
  void Acknowledge(int64_t received_steps);
  // As StepBuffer::ConfirmEnd: the consumer half-closed after the end frame.
  void ConfirmEnd();
  bool Ready() const;
  bool replaying() const { return private_ != nullptr; }

 private:
  friend class TaskRunner;
  StepReader() = default;
  // The producing runner's held steps to its buffer (TaskRunner::Production::PushHeldSteps).
  void PushHeldSteps();
  std::shared_ptr<TaskRunner> owner_;     // keeps the shared runner alive
  // Released by the destructor: the consumer_index claim (instance != 0) and the replay slot.
  uint64_t instance_ = 0;
  int64_t claimed_index_ = 0;
  std::shared_ptr<ReplaySlots> replay_slot_;
  std::unique_ptr<TaskRunner> private_;   // a replay for this stream alone
  StepBuffer* buffer_ = nullptr;
  int64_t consumer_ = 0;
  int64_t generation_ = 0;
};

class TaskRunner : public std::enable_shared_from_this<TaskRunner> {
 public:
  // Validates the task (TaskStepIterator::Create) and schedules its first slice on the pool.
  static absl::StatusOr<std::shared_ptr<TaskRunner>> Start(const proto::TaskDef& task,
                                                           TaskRunnerOptions options);
  // Produces a task's steps as TaskStepIterator::GetNext does.
  using StepProducer = std::function<absl::Status(TaskStep* step, bool* end)>;
  // A runner whose steps come from `producer` instead of the task's pipeline (benchmarks and
  // tests of the data plane). Such a task cannot be replayed.
  static std::shared_ptr<TaskRunner> StartWith(const proto::TaskDef& task,
                                               TaskRunnerOptions options, StepProducer producer);
  // A runner for a task whose pipeline could not be built: every reader gets `error`.
  static std::shared_ptr<TaskRunner> Failed(const proto::TaskDef& task, absl::Status error);
  ~TaskRunner();  // Close()s and waits for a step being produced now

  // A reader for `consumer` starting at task step `start_step`. A task of a shared job reads
  // for open.trainer_id instead, from its trainer's cursor (consumer and start_step unused;
  // CrossTrainerWindow::Join's errors). INVALID_ARGUMENT for a bad consumer; FAILED_PRECONDITION when the steps are gone and the task cannot be replayed
  // (DYNAMIC).
  // With `open`: FAILED_PRECONDITION when another instance holds open.consumer_index, and
  // UNAVAILABLE when the reader needs a private replay and open.replay_slots has none free
  // (see ReaderOptions).
  absl::StatusOr<std::unique_ptr<StepReader>> OpenReader(int64_t consumer, int64_t start_step,
                                                         const ReaderOptions& open = {});
  // The number of leaves of one piece (one replica's value) of the task's steps; -1 when not
  // known (StartWith, Failed).
  int64_t piece_leaves() const { return piece_leaves_; }

  // Stops producing (cancelling the step in progress); readers get what is buffered, then
  // UNAVAILABLE.
  void StopProducing();
  // Stops everything now (cancelling the step in progress); readers get UNAVAILABLE (with
  // `message`, if not empty).
  void Close(absl::string_view message = {});
  // True once every consumer received the end of the task.
  bool finished() const { return buffer_->drained(); }
  // The pipeline's error when it failed deterministically (not IsTransientTaskError: running
  // the task again elsewhere would fail the same way), or the error that kept it from being
  // built (Failed()); OK otherwise. The worker reports it to the coordinator, which fails the
  // job (docs/SERVICE.md, "Failure policy").
  absl::Status DeterministicError() const;
  // The pipeline's error when it is transient (IsTransientTaskError: GetSplit gave up while
  // the coordinator was down, a store timed out), or the transient error that kept it from
  // being built; OK otherwise. Its buffer has ended with it: the worker gives the task back
  // to the coordinator, which runs it again (WorkerHeartbeatRequest.handed_back_tasks).
  absl::Status TransientError() const;

  const proto::TaskDef& task() const { return task_; }
  StepBuffer* buffer() { return buffer_.get(); }

  // Steps produced from now on are built in `placement`'s shared-memory ring
  // (worker/step_placement.h), until DetachPlacement(placement). False, and nothing changes,
  // when another placement is attached (one consumer's ring at a time). The producer's next
  // block first copies into the ring the steps made before that no reader took yet (queued in
  // the buffer), in order: a ring region goes in place only after every region sent before it
  // (core/rpc/shm_ring.h), so with the next steps made in the ring ahead of them, the steps
  // made before the stream came found no room in order and went inline (bench/RESULTS.md,
  // shmstart).
  bool AttachPlacement(std::shared_ptr<StepPlacement> placement);
  // Stops placing steps in `placement` (if attached; at once) and moves the steps placed
  // there that the task still holds to ordinary memory (StepPlacement::Unplaced) in a job on
  // the runner's pool, once no step is being produced. Returns without waiting: callable under
  // any lock.
  void DetachPlacement(const StepPlacement* placement);

  // Steps and bytes written to consumers' streams (every consumer's copy counts, a step sent
  // again after a reconnect too), recorded by the stream service as it starts each write, for
  // metrics and heartbeats (worker/worker_metrics.h).
  void RecordDelivered(int64_t steps, int64_t bytes) {
    steps_delivered_.fetch_add(steps, std::memory_order_relaxed);
    bytes_delivered_.fetch_add(bytes, std::memory_order_relaxed);
  }
  int64_t steps_delivered() const { return steps_delivered_.load(std::memory_order_relaxed); }
  int64_t bytes_delivered() const { return bytes_delivered_.load(std::memory_order_relaxed); }
  // Private replays OpenReader started (streams that asked for steps no longer in memory).
  int64_t replays() const { return replays_.load(std::memory_order_relaxed); }

  // A task of a job shared across trainers: its job segment (core/rpc/job_shm_segment.h), which
  // every co-located consumer maps; created on the first call, of four times the window's
  // bytes (the window's steps plus what paced trainers hold ahead of it, each up to its receive
  // budget) clamped to [min_bytes, max_bytes]. Null (and not tried again until a call with more room)
  // when the memory budget refuses it; null for other tasks.
  std::shared_ptr<JobShmSegment> JobSegment(size_t min_bytes, size_t max_bytes);
  // The job segment if one was created (JobSegment), else null; creates none.
  std::shared_ptr<JobShmSegment> ExistingJobSegment() ABSL_LOCKS_EXCLUDED(job_segment_mu_);

 private:
  TaskRunner(proto::TaskDef task, TaskRunnerOptions options,
             std::unique_ptr<TaskStepIterator> steps);
  static absl::StatusOr<std::unique_ptr<TaskRunner>> Make(const proto::TaskDef& task,
                                                          TaskRunnerOptions options);
  // Hands the pipeline (steps_ or producer_) to a Production and schedules its first slice.
  // Sets pool_. RESOURCE_EXHAUSTED when options_.pool is null and the process's cannot start.
  absl::Status StartProducing();

  class Production;  // the producing state, shared with the pool's jobs (task_runner.cc)
  // Steps produced and not yet taken by the buffer (a block, task_runner.cc), in order.
  using PendingSteps = std::vector<std::shared_ptr<const TaskStep>>;
  // The placement attached (AttachPlacement), shared with the Production that reads it.
  struct PlacementSlot {
    absl::Mutex mu;
    std::shared_ptr<StepPlacement> placement ABSL_GUARDED_BY(mu);
    // Attached, and the queued steps made before not yet copied into it: the producer's next
    // block does that, then moves it to `placement`.
    std::shared_ptr<StepPlacement> attaching ABSL_GUARDED_BY(mu);
  };
  const std::shared_ptr<PlacementSlot> placement_ = std::make_shared<PlacementSlot>();

  const proto::TaskDef task_;
  const TaskRunnerOptions options_;
  // The pipeline's (options_.executor.cancellation, set by Make; a fresh one for StartWith
  // and Failed runners): cancelled by Close, StopProducing and the destructor.
  const std::shared_ptr<CancellationToken> cancellation_;
  std::unique_ptr<TaskStepIterator> steps_;  // until StartProducing()
  StepProducer producer_;                    // instead of steps_, when set
  bool replayable_ = true;                   // false for StartWith runners
  std::shared_ptr<StepBuffer> buffer_;
  std::shared_ptr<Production> production_;
  // options_.pool, or the process's: set by StartProducing, before the runner is shared; null
  // for a runner that never produced (Failed, or its pool could not start).
  TaskRunnerPool* pool_ = nullptr;
  std::atomic<int64_t> steps_delivered_{0};
  std::atomic<int64_t> bytes_delivered_{0};
  std::atomic<int64_t> replays_{0};
  int64_t piece_leaves_ = -1;

  // Which instance holds each consumer_index (ReaderOptions::instance), and its open readers.
  friend class StepReader;
  struct Claim {
    uint64_t instance = 0;
    int64_t readers = 0;
  };
  absl::Status ClaimIndex(int64_t index, uint64_t instance);
  void ReleaseIndex(int64_t index, uint64_t instance);
  absl::Mutex claims_mu_;
  absl::flat_hash_map<int64_t, Claim> claims_ ABSL_GUARDED_BY(claims_mu_);

  absl::Mutex job_segment_mu_;
  std::shared_ptr<JobShmSegment> job_segment_ ABSL_GUARDED_BY(job_segment_mu_);
};

}  // namespace sluice

#endif  // SLUICE_WORKER_TASK_RUNNER_H_
