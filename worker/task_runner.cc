#include "worker/task_runner.h"

#include <algorithm>
#include <limits>
#include <new>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "core/data/distribute/auto_shard.h"
#include "core/data/distribute/distribute_spec.h"
#include "core/data/distribute/rebatch.h"
#include "core/data/distribute/replica_cut.h"
#include "core/data/ops/rebatch_iterator.h"
#include "core/rpc/job_shm_segment.h"
#include "core/util/status_context.h"
#include "core/util/status_macros.h"
#include "core/util/transient_error.h"
#include "worker/cross_trainer_window.h"
#include "core/tensor/step_output_allocator.h"
#include "worker/step_placement.h"

namespace sluice {
namespace {

std::string TaskName(const proto::TaskDef& t) {
  return absl::StrCat("task ", t.task_id(), " (job ", t.job_id(), ", index ", t.task_index(), "/",
                      t.num_tasks(), ")");
}

absl::Status Prefixed(const proto::TaskDef& t, const absl::Status& s) {
  return WithContext(TaskName(t), s);
}

// The batches of a DYNAMIC task: its splits' pipelines one after another.
class SplitChainIterator : public Iterator {
 public:
  explicit SplitChainIterator(std::unique_ptr<SplitProvider> splits, ExecutorOptions executor)
      : splits_(std::move(splits)), executor_(executor) {}

  absl::Status GetNext(Element* out, bool* end_of_sequence) override {
    while (true) {
      if (done_) {
        *end_of_sequence = true;
        return absl::OkStatus();
      }
      if (current_ != nullptr) {
        bool end = false;
        RETURN_IF_ERROR(current_->GetNext(out, &end));
        if (!end) {
          *end_of_sequence = false;
          return absl::OkStatus();
        }
        current_.reset();
      }
      if (executor_.cancellation != nullptr) {
        RETURN_IF_ERROR(executor_.cancellation->Check("the task's next split"));
      }
      ASSIGN_OR_RETURN(std::optional<Dataset> split, splits_->NextSplit());
      if (!split.has_value()) {
        done_ = true;
        continue;
      }
      ASSIGN_OR_RETURN(current_, MakeIterator(*split, executor_));
    }
  }

 private:
  std::unique_ptr<SplitProvider> splits_;
  ExecutorOptions executor_;
  std::unique_ptr<Iterator> current_;
  bool done_ = false;
};

// The in-process auto-shard policy whose cut a service policy's tasks make: DATA as DATA; AUTO,
// and RANGES (a global order, compared with in-process mode's default AUTO), as AUTO; the rest,
// whose tasks each cut their own stream, as OFF.
AutoShardPolicy CutPolicy(proto::ShardingPolicy policy) {
  switch (policy) {
    case proto::SHARDING_DATA:
      return AutoShardPolicy::kData;
    case proto::SHARDING_AUTO:
    case proto::SHARDING_RANGES:
      return AutoShardPolicy::kAuto;
    default:
      return AutoShardPolicy::kOff;
  }
}

// `e`'s leaves appended to `out` in flatten order (Nest::Flatten's), moved out of `e`: a
// step's tensors change hands without a copy (each Tensor copy allocates its Shape).
void MoveLeavesInto(Element& e, std::vector<Tensor>* out) {
  if (e.is_leaf()) {
    out->push_back(std::move(e.mutable_leaf()));
    return;
  }
  for (size_t i : e.FlattenOrder()) MoveLeavesInto(e.mutable_children()[i], out);
}

size_t StepBytes(const TaskStep& step) {
  size_t n = 0;
  for (const auto& piece : step.pieces) {
    for (const Tensor& t : piece) n += t.payload_bytes();
  }
  return n;
}

// A slice's time (see task_runner.h): long enough that rescheduling costs nothing next to
// the steps made, short enough that runners of other tasks do not wait long for a turn.
constexpr absl::Duration kSliceTime = absl::Milliseconds(10);

// A block (TaskRunner::Production::ProduceBlock): the steps a slice makes before it pushes
// them, under one acquisition of the buffer's lock. At most kBlockSteps steps (a frame's
// worth, WorkerServiceOptions::max_frame_steps) and kBlockBytes, no more than the buffer's
// room at the last push (a producer held by a full buffer has made one step it could not
// push, as without blocks), and only while each step takes at most kBlockStepTime to make: at
// 1 KiB steps the per-step lock, wake-up checks and contention with the streams reading the
// buffer were a third of the worker's CPU, while a step of 64 KiB or more, or a slow one, ends
// its block (nothing waits for the steps after it longer than kBlockStepTime each). A reader
// about to wait for steps pushes the block being made itself (Production::PushHeldSteps), so
// a made step never waits for the making of the next one: that may take long (a slow read) or
// never end until a reader has taken the steps before it (a source fed by the trainer).
constexpr size_t kBlockSteps = 64;
constexpr size_t kBlockBytes = size_t{64} << 10;
constexpr absl::Duration kBlockStepTime = absl::Microseconds(20);

}  // namespace

// The producing side of a TaskRunner: the pipeline, and the slices that run it on the pool.
// Shared by the runner and the pool's jobs (a queued job keeps it alive after the runner is
// gone; it then does nothing); the buffer's wake-ups and timers hold it weakly.
class TaskRunner::Production : public std::enable_shared_from_this<Production> {
 public:
  Production(std::shared_ptr<StepBuffer> buffer, std::unique_ptr<TaskStepIterator> steps,
             StepProducer producer, TaskRunnerPool* pool, std::function<void()> on_first_step,
             std::shared_ptr<PlacementSlot> placement,
             std::shared_ptr<CancellationToken> cancellation)
      : cancellation_(std::move(cancellation)),
        buffer_(std::move(buffer)),
        placement_(std::move(placement)),
        pool_(pool),
        steps_(std::move(steps)),
        producer_(std::move(producer)),
        on_first_step_(std::move(on_first_step)) {}

  // Schedules a slice, unless production is over, or a slice is queued or running (that one
  // then tries again before it gives up its turn: a wake-up is never lost).
  void Wake() ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    if (done_) return;
    if (scheduled_) {
      woken_ = true;
      return;
    }
    scheduled_ = true;
    ScheduleLocked();
  }

  // Runs fn(&pending steps) with no slice running (waits for the one running, if any) and none
  // starting until fn returns.
  void Quiesce(const std::function<void(PendingSteps*)>& fn) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    while (running_) idle_.Wait(&mu_);
    absl::MutexLock held(&pending_mu_);
    fn(&pending_);
  }

  // A reader of the buffer is about to wait for steps: the steps of the block being made go to
  // the buffer now (their wake-ups reach that reader), not once the block ends, which would
  // wait for the making of its next step; with none made yet, the block ends at its next step.
  // Called by readers on their own threads, while a slice makes steps or not.
  void PushHeldSteps() ABSL_LOCKS_EXCLUDED(pending_mu_) {
    absl::MutexLock lock(&pending_mu_);
    if (pending_.empty()) {
      reader_waiting_ = true;
      return;
    }
    absl::Time retry_at = absl::InfiniteFuture();
    // Refused steps (a full buffer) stay for the slice, which pushes them when it can.
    (void)PushPendingLocked(WakeCallback(), &retry_at);
  }

  // No slice starts any more; waits for the one running, if any; frees the pipeline.
  void Close() ABSL_LOCKS_EXCLUDED(mu_) {
    {
      absl::MutexLock lock(&mu_);
      done_ = true;
      while (running_) idle_.Wait(&mu_);
    }
    Free();  // no slice runs now, nor will one
  }

 private:
  // Lock order: mu_, then the pool's (which calls nothing back).
  void ScheduleLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    pool_->Schedule([self = shared_from_this()] { self->RunSlice(); });
  }

  std::function<void()> WakeCallback() {
    return [weak = weak_from_this()] {
      if (std::shared_ptr<Production> p = weak.lock()) p->Wake();
    };
  }

  void Free() {
    steps_.reset();  // the pipeline's resources go as soon as the task is done
    producer_ = nullptr;
    absl::MutexLock lock(&pending_mu_);
    pending_.clear();
  }

  // Pushes what the buffer takes of pending_ (TryPushSteps) and drops it from pending_.
  absl::StatusOr<size_t> PushPendingLocked(const std::function<void()>& wake, absl::Time* retry_at)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(pending_mu_) {
    reader_waiting_ = false;  // what it waits for is pushed now, or held by a full buffer
    absl::StatusOr<size_t> taken =
        buffer_->TryPushSteps(pending_, wake, retry_at, &room_, &room_steps_);
    if (!taken.ok()) return taken;
    pending_.erase(pending_.begin(), pending_.begin() + static_cast<ptrdiff_t>(*taken));
    if (*taken > 0 && on_first_step_) std::exchange(on_first_step_, nullptr)();
    return taken;
  }

  // The pipeline's next step. The backstop of the allocator that can refuse (sluice/tensor.h):
  // an allocation outside its reach that throws std::bad_alloc fails this task, hence its job,
  // with RESOURCE_EXHAUSTED; the worker and its other tasks keep running.
  absl::Status ProduceStep(StepPlacement* placement, TaskStep* step, bool* end) {
    try {
      // A stream with a shared-memory ring is attached: the step is built there (what the
      // producer did not build there is copied once, here, off the stream's lock).
      StepOutputAllocator::Scope scope(placement);
      absl::Status s = producer_ ? producer_(step, end) : steps_->GetNext(step, end);
      if (s.ok() && !*end && placement != nullptr) placement->Place(step);
      return s;
    } catch (const std::bad_alloc&) {
      return absl::ResourceExhaustedError(
          "the pipeline ran the worker out of memory (std::bad_alloc) outside the memory budget's "
          "checks; its job fails, the worker keeps serving (--memory_limit, "
          "--max_element_bytes)");
    }
  }

  // The placement the next block builds in. One just attached (AttachPlacement) first takes
  // the steps made before that no reader took yet, in order, so that every step this block
  // makes lies after them in the ring. Called with pending_ empty (those steps are all in the
  // buffer) and no other block running: the producer's steps are placed in the order made.
  std::shared_ptr<StepPlacement> CurrentPlacement() {
    std::shared_ptr<StepPlacement> attaching;
    {
      absl::MutexLock lock(&placement_->mu);
      if (placement_->attaching == nullptr) return placement_->placement;
      attaching = placement_->attaching;
    }
    // As far as the ring's room and the caps of what runs ahead allow: a step placed after
    // one that found no room would go in place ahead of it, and it inline.
    const StepBufferCaps caps = attaching->buffer_caps();
    size_t bytes = 0;
    size_t steps = 0;
    buffer_->ReplaceQueuedSteps(
        [&](const std::shared_ptr<const TaskStep>& step) -> std::shared_ptr<const TaskStep> {
          bytes += step->bytes;
          if (bytes > caps.buffered_bytes || ++steps > caps.buffered_steps) return nullptr;
          return attaching->Placed(step);
        });
    absl::MutexLock lock(&placement_->mu);
    // Detached meanwhile: its job (after this slice) moves what was placed back out.
    if (placement_->attaching == attaching) {
      placement_->placement = std::move(placement_->attaching);
    }
    return placement_->placement;
  }

  // Produces the next block into pending_ (empty): a step, then, while the steps are small
  // and quick to make, more of them (see kBlockSteps), so that the buffer takes them under one
  // lock. At the end of data or on the pipeline's error, finish_ says which, once the steps
  // before it are pushed. False when the runner stopped the pipeline (nothing to report).
  bool ProduceBlock(absl::Time slice_end) {
    std::shared_ptr<StepPlacement> placement = CurrentPlacement();
    const bool shared = buffer_->cross_trainer_window() != nullptr;
    size_t made = 0;
    size_t bytes = 0;
    absl::Time last = absl::Now();
    while (true) {
      auto step = std::make_shared<TaskStep>();
      bool end = false;
      absl::Status s = ProduceStep(placement.get(), step.get(), &end);
      if (!s.ok() && cancellation_->cancelled()) return false;  // no error of the pipeline's
      if (!s.ok() || end) {
        finish_ = std::move(s);  // OK at the end of data
        return true;
      }
      // A step of a job shared across trainers goes to several streams: encoded once.
      if (shared) step->shared_payload = std::make_shared<const SharedStepPayload>();
      ++made;
      bytes += step->bytes;
      size_t room = 0;
      size_t room_steps = 0;
      bool reader_waiting = false;
      {
        absl::MutexLock lock(&pending_mu_);
        pending_.push_back(std::move(step));
        room = room_;
        room_steps = room_steps_;
        reader_waiting = reader_waiting_;
      }
      // A block ends at its size, at what the buffer had room for (bytes, steps) when the last
      // block went (the first step of a task, before any, goes alone: time to first step; a
      // full buffer gets one step more, not a block more), with the slice, once a step took
      // long to make, or when a reader waits for steps: a step waits for the ones after it in
      // its block at most kBlockSteps x kBlockStepTime while no reader waits (one that starts
      // to wait pushes the block, PushHeldSteps).
      const absl::Time now = absl::Now();
      if (made >= std::min(kBlockSteps, room_steps) || bytes >= std::min(kBlockBytes, room) ||
          reader_waiting || now >= slice_end || now - last > kBlockStepTime ||
          buffer_->producer_stopped()) {
        return true;
      }
      last = now;
    }
  }

  void RunSlice() ABSL_LOCKS_EXCLUDED(mu_) {
    {
      absl::MutexLock lock(&mu_);
      if (done_) {
        scheduled_ = false;
        return;
      }
      running_ = true;
      woken_ = false;
    }
    const absl::Time slice_end = absl::Now() + kSliceTime;
    bool done = false;
    bool full = false;
    absl::Time retry_at = absl::InfiniteFuture();
    // One wake-up for the slice: TryPush copies it only when it refuses a step (building one
    // per step was an allocation per step).
    const std::function<void()> wake = WakeCallback();
    while (true) {
      if (PendingEmpty()) {
        if (finish_.has_value()) {  // every step before the end (or the error) is pushed
          buffer_->Finish(*std::move(finish_));
          finish_.reset();
          done = true;
          break;
        }
        if (buffer_->producer_stopped() || !ProduceBlock(slice_end)) {
          done = true;
          break;
        }
        // The end with no step before it, or a waiting reader pushed the block: go on.
        if (PendingEmpty()) continue;
      }
      {
        absl::MutexLock lock(&pending_mu_);
        if (!PushPendingLocked(wake, &retry_at).ok()) {  // stopped or closed
          done = true;
          break;
        }
        if (!pending_.empty()) {
          full = true;
          break;
        }
      }
      if (absl::Now() >= slice_end) break;  // the others' turn
    }
    if (done) Free();
    absl::MutexLock lock(&mu_);
    running_ = false;
    idle_.SignalAll();
    if (done || done_) {
      done_ = true;
      scheduled_ = false;
      return;
    }
    if (full && !woken_) {
      // The buffer's wake-up (registered by TryPush) schedules the next slice.
      scheduled_ = false;
      if (retry_at != absl::InfiniteFuture()) pool_->ScheduleAt(retry_at, WakeCallback());
      return;
    }
    ScheduleLocked();  // to the back of the queue (or woken while full: try again)
  }

  const std::shared_ptr<CancellationToken> cancellation_;  // the runner's
  const std::shared_ptr<StepBuffer> buffer_;
  const std::shared_ptr<PlacementSlot> placement_;
  TaskRunnerPool* const pool_;
  bool PendingEmpty() ABSL_LOCKS_EXCLUDED(pending_mu_) {
    absl::MutexLock lock(&pending_mu_);
    return pending_.empty();
  }

  // Used by the one slice running (scheduled_ admits one at a time), or by Close() once none
  // runs.
  std::unique_ptr<TaskStepIterator> steps_;
  StepProducer producer_;
  // Set: the pipeline ended (OK) or failed after the steps in pending_; Finish follows them.
  std::optional<absl::Status> finish_;

  // The steps made and not yet pushed: the slice's, and a waiting reader's (PushHeldSteps).
  // Lock order: mu_, then pending_mu_, then the buffer's.
  absl::Mutex pending_mu_;
  PendingSteps pending_ ABSL_GUARDED_BY(pending_mu_);  // produced, not yet taken, in order
  // The buffer's room after the last block (TryPushSteps): the next block's bytes stop there.
  size_t room_ ABSL_GUARDED_BY(pending_mu_) = 0;
  // The same in steps (StepBuffer::Cap's steps).
  size_t room_steps_ ABSL_GUARDED_BY(pending_mu_) = 0;
  // A reader waits and found no step held: the block being made ends at its next step.
  bool reader_waiting_ ABSL_GUARDED_BY(pending_mu_) = false;
  // TaskRunnerOptions::on_first_step, until called.
  std::function<void()> on_first_step_ ABSL_GUARDED_BY(pending_mu_);

  absl::Mutex mu_;
  absl::CondVar idle_;                            // running_ became false
  bool scheduled_ ABSL_GUARDED_BY(mu_) = false;   // a slice is queued or running
  bool running_ ABSL_GUARDED_BY(mu_) = false;     // a slice is running
  bool woken_ ABSL_GUARDED_BY(mu_) = false;       // Wake() while a slice was scheduled
  bool done_ ABSL_GUARDED_BY(mu_) = false;        // finished, stopped or closed
};

absl::StatusOr<std::unique_ptr<TaskStepIterator>> TaskStepIterator::Create(
    const proto::TaskDef& task, std::unique_ptr<SplitProvider> splits,
    const ExecutorOptions& executor) {
  const proto::JobOptions& job = task.job();
  const int64_t c = job.num_consumers();
  const int64_t r = job.replicas_per_consumer();
  if (c < 1 || r < 1) {
    return absl::InvalidArgumentError(absl::StrCat(TaskName(task), ": num_consumers ", c,
                                                   " and replicas_per_consumer ", r,
                                                   " must be positive"));
  }
  if (task.step_sharded() && (task.num_tasks() < 1 || task.task_index() < 0 ||
                              task.task_index() >= task.num_tasks())) {
    return absl::InvalidArgumentError(absl::StrCat(TaskName(task), ": bad task index"));
  }
  if (task.skip_steps() < 0 || task.first_step() < 0 || task.num_steps() < 0) {
    return absl::InvalidArgumentError(absl::StrCat(TaskName(task), ": skip_steps ",
                                                   task.skip_steps(), ", first_step ",
                                                   task.first_step(), " and num_steps ",
                                                   task.num_steps(), " must be >= 0"));
  }
  auto dataset_or = Dataset::FromDef(task.dataset());
  if (!dataset_or.ok()) return Prefixed(task, dataset_or.status());
  const Dataset& dataset = *dataset_or;
  // The cut is in-process mode's (core/data/distribute/replica_cut.h): with one consumer (or independent
  // reads, where each step goes whole to one consumer) the task's pieces are those of
  // DistributeForWorker itself; with C coordinated consumers one global step is cut across all
  // C x R replicas as one worker with C x R replicas would, piece c * R + r to consumer c.
  const bool independent = job.read_mode() == proto::READ_MODE_INDEPENDENT;
  const int64_t consumers = independent ? 1 : c;
  const bool data_sharded = CutsLikeDataSharding(CutPolicy(job.sharding_policy()), dataset);
  auto cut = ReplicaCutForJob(dataset, data_sharded, consumers, r);
  if (!cut.ok()) return Prefixed(task, cut.status());
  auto replica_spec = DistributedPerReplicaSpec(dataset, consumers, r);
  if (!replica_spec.ok()) return Prefixed(task, replica_spec.status());
  // As in-process mode's dummies: the batch dimension (and every other unknown one) is 0.
  const ElementSpec piece_spec = DynamicBatchDimension(*replica_spec);

  std::unique_ptr<Iterator> pieces;
  if (job.sharding_policy() == proto::SHARDING_DYNAMIC) {
    if (splits == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat(TaskName(task), ": a DYNAMIC task needs a split provider"));
    }
    auto it = NewReplicaCutIterator(
        "rebatch", std::make_unique<SplitChainIterator>(std::move(splits), executor), *cut,
        piece_spec);
    if (!it.ok()) return Prefixed(task, it.status());
    pieces = *std::move(it);
  } else {
    absl::StatusOr<Dataset> cut_dataset =
        consumers == 1 ? DistributeForWorker(dataset,
                                             data_sharded ? AutoShardPolicy::kData
                                                          : AutoShardPolicy::kOff,
                                             /*num_workers=*/1, /*worker_index=*/0, r)
                       : ApplyReplicaCut(dataset, *cut);
    if (!cut_dataset.ok()) return Prefixed(task, cut_dataset.status());
    auto it = MakeIterator(*cut_dataset, executor);
    if (!it.ok()) return Prefixed(task, it.status());
    pieces = *std::move(it);
  }

  std::unique_ptr<TaskStepIterator> out(new TaskStepIterator());
  out->task_ = task;
  out->pieces_per_step_ = consumers * r;
  out->piece_spec_ = piece_spec;
  out->steps_ = std::make_unique<StepIterator>(std::move(pieces), out->pieces_per_step_,
                                               piece_spec);
  return out;
}

absl::Status TaskStepIterator::GetNext(TaskStep* step, bool* end) {
  std::vector<Element>& pieces = pieces_;
  while (true) {
    int64_t num_real = 0;
    bool seq_end = false;
    absl::Status s = steps_->GetNextStep(&pieces, &num_real, &seq_end);
    if (!s.ok()) return Prefixed(task_, s);
    if (seq_end) {
      *end = true;
      return absl::OkStatus();
    }
    const int64_t global = global_step_++;
    if (task_.step_sharded() &&
        !KeepShardedStep(global, task_.skip_steps(), task_.num_tasks(), task_.task_index())) {
      continue;
    }
    const bool range = task_.num_steps() > 0;  // SHARDING_RANGES: exactly num_steps steps
    if (range && task_step_ >= task_.num_steps()) {
      *end = true;
      return absl::OkStatus();
    }
    step->task_step = task_step_++;
    step->global_step =
        task_.step_sharded() ? global : range ? task_.first_step() + step->task_step : -1;
    step->num_real_pieces = num_real;
    step->pieces.clear();
    step->pieces.reserve(pieces.size());
    for (Element& e : pieces) MoveLeavesInto(e, &step->pieces.emplace_back());
    pieces.clear();  // the step holds its tensors now; the scratch keeps only its capacity
    step->bytes = StepBytes(*step);
    *end = false;
    return absl::OkStatus();
  }
}

StepReader::~StepReader() {
  if (instance_ != 0 && owner_ != nullptr) owner_->ReleaseIndex(claimed_index_, instance_);
  if (buffer_ != nullptr && buffer_->cross_trainer_window() != nullptr) {
    buffer_->cross_trainer_window()->Release(generation_);
  }
  // The replay (private_) is freed before the slot goes back.
  private_.reset();
  if (replay_slot_ != nullptr) replay_slot_->Release();
}

absl::Status TaskRunner::ClaimIndex(int64_t index, uint64_t instance) {
  absl::MutexLock lock(&claims_mu_);
  Claim& c = claims_[index];
  if (c.readers > 0 && c.instance != instance) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "%s: consumer_index %d is held by consumer instance %016x (a stream open on this "
        "worker); this consumer is instance %016x: two consumer processes claim the same "
        "consumer_index of job %d",
        TaskName(task_), index, c.instance, instance, task_.job_id()));
  }
  c.instance = instance;
  ++c.readers;
  return absl::OkStatus();
}

void TaskRunner::ReleaseIndex(int64_t index, uint64_t instance) {
  absl::MutexLock lock(&claims_mu_);
  auto it = claims_.find(index);
  if (it == claims_.end() || it->second.instance != instance) return;
  if (--it->second.readers <= 0) claims_.erase(it);
}

void StepReader::PushHeldSteps() {
  TaskRunner* producing = private_ != nullptr ? private_.get() : owner_.get();
  if (producing != nullptr && producing->production_ != nullptr) {
    producing->production_->PushHeldSteps();
  }
}

absl::Status StepReader::Next(size_t max_steps, size_t max_bytes, absl::Time deadline,
                              std::vector<std::shared_ptr<const TaskStep>>* steps, bool* end) {
  if (deadline != absl::InfinitePast()) PushHeldSteps();  // it may wait
  return buffer_->Next(consumer_, generation_, max_steps, max_bytes, deadline, steps, end);
}

void StepReader::ConfirmEnd() {
  buffer_->ConfirmEnd(consumer_, generation_);
  // A replay's end is the shared task's end for this consumer too.
  if (private_ != nullptr && private_->finished()) {
    owner_->buffer()->ConfirmEndReplayed(consumer_);
  }
}

absl::Status StepReader::Next(const StepLimits& limits, absl::Time deadline,
                              std::vector<std::shared_ptr<const TaskStep>>* steps, bool* end,
                              size_t* blocked_cost) {
  if (deadline != absl::InfinitePast()) PushHeldSteps();  // it may wait
  return buffer_->Next(consumer_, generation_, limits, deadline, steps, end, blocked_cost);
}

bool StepReader::Ready() const { return buffer_->Ready(consumer_); }

void StepReader::Acknowledge(int64_t received_steps) {
  // A shared job's window keys what it keeps by the reader (generation_, its Attach).
  if (CrossTrainerWindow* window = buffer_->cross_trainer_window()) {
    return window->Acknowledge(generation_, received_steps);
  }
  buffer_->Acknowledge(consumer_, received_steps);
}

bool StepReader::ReadyWithin(const StepLimits& limits) const {
  if (CrossTrainerWindow* window = buffer_->cross_trainer_window()) {
    return window->ReadyWithin(consumer_, limits, generation_);
  }
  return buffer_->ReadyWithin(consumer_, limits);
}

bool StepReader::NotifyWhenReady(StepBuffer::ReadyCallback ready) {
  if (!buffer_->NotifyWhenReady(consumer_, generation_, std::move(ready))) return false;
  // Registered before the push: the steps pushed now wake it.
  PushHeldSteps();
  return true;
}

void StepReader::CancelNotify() { buffer_->CancelNotify(consumer_, generation_); }

TaskRunner::TaskRunner(proto::TaskDef task, TaskRunnerOptions options,
                       std::unique_ptr<TaskStepIterator> steps)
    : task_(std::move(task)),
      options_(std::move(options)),
      cancellation_(options_.executor.cancellation != nullptr
                        ? options_.executor.cancellation
                        : std::make_shared<CancellationToken>()),
      steps_(std::move(steps)) {
  if (steps_ != nullptr) {
    piece_leaves_ = static_cast<int64_t>(steps_->piece_spec().Flatten().size());
  }
  StepBufferOptions b;
  b.max_bytes = options_.buffer_bytes;
  b.independent = task_.job().read_mode() == proto::READ_MODE_INDEPENDENT;
  b.num_consumers = b.independent ? 1 : task_.job().num_consumers();
  b.detach_unattached_after = options_.detach_unattached_after;
  b.retention_bytes = options_.retention_bytes;
  if (const proto::CrossTrainerOptions& x = task_.job().cross_trainer(); x.enabled()) {
    auto w = std::make_shared<CrossTrainerWindowOptions>();
    w->window_bytes = options_.cross_trainer_window_bytes;
    w->drop_departed_after = options_.cross_trainer_drop_departed_after;
    w->lossless = x.lossless();
    w->expected_trainers = x.expected_trainers();
    w->max_trainers = x.max_trainers() > 0 ? x.max_trainers() : kDefaultMaxTrainers;
    b.cross_trainer = std::move(w);
  }
  buffer_ = std::make_shared<StepBuffer>(b, options_.on_change);
}

absl::Status TaskRunner::StartProducing() {
  pool_ = options_.pool;
  if (pool_ == nullptr) {
    ASSIGN_OR_RETURN(pool_, ProcessTaskRunnerPool());
  }
  production_ = std::make_shared<Production>(buffer_, std::move(steps_), std::move(producer_),
                                             pool_, options_.on_first_step, placement_,
                                             cancellation_);
  production_->Wake();
  return absl::OkStatus();
}

bool TaskRunner::AttachPlacement(std::shared_ptr<StepPlacement> placement) {
  const StepBufferCaps caps = placement->buffer_caps();
  {
    absl::MutexLock lock(&placement_->mu);
    if (placement_->placement != nullptr || placement_->attaching != nullptr) return false;
    placement_->attaching = std::move(placement);
  }
  buffer_->Cap(caps);
  return true;
}

std::shared_ptr<JobShmSegment> TaskRunner::JobSegment(size_t min_bytes, size_t max_bytes) {
  if (!task_.job().cross_trainer().enabled() || max_bytes == 0) return nullptr;
  absl::MutexLock lock(&job_segment_mu_);
  if (job_segment_ == nullptr) {
    const size_t want = std::clamp(options_.cross_trainer_window_bytes * 4, min_bytes,
                                   std::max(min_bytes, max_bytes));
    absl::StatusOr<std::shared_ptr<JobShmSegment>> created =
        JobShmSegment::Create(std::min(want, max_bytes));
    if (created.ok()) job_segment_ = *std::move(created);
  }
  return job_segment_;
}

std::shared_ptr<JobShmSegment> TaskRunner::ExistingJobSegment() {
  absl::MutexLock lock(&job_segment_mu_);
  return job_segment_;
}

void TaskRunner::DetachPlacement(const StepPlacement* placement) {
  std::shared_ptr<StepPlacement> detached;
  {
    absl::MutexLock lock(&placement_->mu);
    if (placement_->attaching.get() == placement) {
      detached = std::move(placement_->attaching);  // no block placed anything in it
    } else if (placement_->placement.get() == placement) {
      detached = std::move(placement_->placement);
    } else {
      return;
    }
  }
  buffer_->Cap(StepBufferCaps{});
  // A runner that never produced (Failed, or its pool could not start) has no pool, and
  // nothing placed to move out.
  if (pool_ == nullptr) return;
  pool_->Schedule([production = production_, buffer = buffer_, detached] {
    auto unplace = [&](TaskRunner::PendingSteps* pending) {
      if (pending != nullptr) {
        for (std::shared_ptr<const TaskStep>& step : *pending) step = detached->Unplaced(step);
      }
      buffer->ReplaceSteps(
          [&](const std::shared_ptr<const TaskStep>& step) { return detached->Unplaced(step); });
    };
    // A step placed by a slice that read the placement before it went is pushed by then.
    if (production != nullptr) {
      production->Quiesce(unplace);
    } else {
      unplace(nullptr);
    }
  });
}

absl::StatusOr<std::unique_ptr<TaskRunner>> TaskRunner::Make(const proto::TaskDef& task,
                                                             TaskRunnerOptions options) {
  std::unique_ptr<SplitProvider> splits;
  if (task.job().sharding_policy() == proto::SHARDING_DYNAMIC && options.splits) {
    splits = options.splits(task);
  }
  options.executor.cancellation = std::make_shared<CancellationToken>();  // this runner's
  ASSIGN_OR_RETURN(auto steps, TaskStepIterator::Create(task, std::move(splits), options.executor));
  return std::unique_ptr<TaskRunner>(new TaskRunner(task, std::move(options), std::move(steps)));
}

absl::StatusOr<std::shared_ptr<TaskRunner>> TaskRunner::Start(const proto::TaskDef& task,
                                                              TaskRunnerOptions options) {
  ASSIGN_OR_RETURN(std::unique_ptr<TaskRunner> runner, Make(task, std::move(options)));
  std::shared_ptr<TaskRunner> shared(std::move(runner));
  RETURN_IF_ERROR(WithContext(absl::StrCat("task ", task.task_id()), shared->StartProducing()));
  return shared;
}

std::shared_ptr<TaskRunner> TaskRunner::StartWith(const proto::TaskDef& task,
                                                  TaskRunnerOptions options,
                                                  StepProducer producer) {
  std::shared_ptr<TaskRunner> runner(new TaskRunner(task, std::move(options), nullptr));
  runner->producer_ = std::move(producer);
  runner->replayable_ = false;
  if (absl::Status s = runner->StartProducing(); !s.ok()) runner->buffer_->Finish(std::move(s));
  return runner;
}

std::shared_ptr<TaskRunner> TaskRunner::Failed(const proto::TaskDef& task, absl::Status error) {
  std::shared_ptr<TaskRunner> runner(new TaskRunner(task, TaskRunnerOptions(), nullptr));
  runner->buffer_->Finish(std::move(error));
  return runner;
}

absl::Status TaskRunner::DeterministicError() const {
  absl::Status s = buffer_->producer_status();
  if (s.ok() || IsTransientTaskError(s.code())) return absl::OkStatus();
  return s;
}

absl::Status TaskRunner::TransientError() const {
  absl::Status s = buffer_->producer_status();
  if (s.ok() || !IsTransientTaskError(s.code())) return absl::OkStatus();
  return s;
}

TaskRunner::~TaskRunner() {
  buffer_->Close();
  cancellation_->Cancel(absl::StrCat(TaskName(task_), " ended on this worker"));
  if (production_ != nullptr) production_->Close();
}

void TaskRunner::StopProducing() {
  buffer_->StopProducing();
  cancellation_->Cancel(absl::StrCat(TaskName(task_), " stopped producing on this worker"));
}

void TaskRunner::Close(absl::string_view message) {
  buffer_->Close(message);
  cancellation_->Cancel(absl::StrCat(TaskName(task_), " closed on this worker",
                                     message.empty() ? "" : ": ", message));
}

absl::StatusOr<std::unique_ptr<StepReader>> TaskRunner::OpenReader(int64_t consumer,
                                                                   int64_t start_step,
                                                                   const ReaderOptions& open) {
  std::unique_ptr<StepReader> reader(new StepReader());
  reader->owner_ = shared_from_this();
  reader->consumer_ = consumer;
  if (open.instance != 0) {
    RETURN_IF_ERROR(ClaimIndex(open.consumer_index, open.instance));
    reader->instance_ = open.instance;
    reader->claimed_index_ = open.consumer_index;
  }
  if (CrossTrainerWindow* window = buffer_->cross_trainer_window()) {
    absl::StatusOr<int64_t> slot = window->Join(open.trainer_id);
    if (!slot.ok()) return Prefixed(task_, slot.status());
    reader->consumer_ = *slot;
    // Independent reads: `consumer` is the consumer's key and start_step the steps it has
    // received (what it was handed beyond them comes back to its trainer).
    absl::StatusOr<int64_t> id =
        window->Attach(*slot, static_cast<uint64_t>(consumer), start_step);
    if (!id.ok()) return Prefixed(task_, id.status());
    reader->generation_ = *id;
    reader->buffer_ = buffer_.get();
    return reader;
  }
  absl::StatusOr<int64_t> gen = buffer_->Attach(consumer, start_step);
  if (gen.ok()) {
    reader->buffer_ = buffer_.get();
    reader->generation_ = *gen;
    return reader;
  }
  if (gen.status().code() != absl::StatusCode::kOutOfRange) return Prefixed(task_, gen.status());
  // The shared buffer released these steps: replay the task for this stream alone.
  if (task_.job().sharding_policy() == proto::SHARDING_DYNAMIC || !replayable_) {
    return absl::FailedPreconditionError(absl::StrCat(
        TaskName(task_), ": consumer ", consumer, " asked for task step ", start_step,
        ", already released, and this task cannot be replayed (DYNAMIC or a custom producer): ", gen.status().message()));
  }
  if (open.replay_slots != nullptr) {
    if (!open.replay_slots->TryAcquire()) {
      return absl::UnavailableError(absl::StrCat(
          TaskName(task_), ": consumer ", consumer, " needs a private replay from task step ",
          start_step, " and ", open.replay_slots->max(),
          " are running on this worker (max_concurrent_replays): retry later"));
    }
    reader->replay_slot_ = open.replay_slots;
  }
  TaskRunnerOptions options = options_;
  options.detach_unattached_after = absl::InfiniteDuration();
  options.retention_bytes = 0;  // its one consumer never comes back to it
  options.on_change = nullptr;   // its end reaches the shared buffer (ConfirmEndReplayed)
  options.on_first_step = nullptr;  // a replay is no news to the coordinator
  ASSIGN_OR_RETURN(std::unique_ptr<TaskRunner> replay, Make(task_, options));
  for (int64_t c = 0; c < task_.job().num_consumers(); ++c) {
    if (c != consumer) replay->buffer_->Detach(c);
  }
  ASSIGN_OR_RETURN(int64_t g, replay->buffer_->Attach(consumer, start_step));
  TaskRunner* raw = replay.get();
  RETURN_IF_ERROR(raw->StartProducing());
  reader->buffer_ = raw->buffer_.get();
  reader->generation_ = g;
  reader->private_ = std::move(replay);
  replays_.fetch_add(1, std::memory_order_relaxed);
  return reader;
}

}  // namespace sluice
