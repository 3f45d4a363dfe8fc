#include "worker/step_buffer.h"

#include <algorithm>
#include <limits>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/util/transient_error.h"
#include "worker/cross_trainer_window.h"
#include "worker/run_wakeups.h"

namespace sluice {
namespace {

// The most a consumer may leave unacknowledged (StepLimits::unacked_bytes), whatever window it
// names: max(max_unacked_bytes, 4 x the buffer's budget).
size_t UnackedCap(const StepLimits& limits, const StepBufferOptions& options) {
  const size_t four =
      options.max_bytes > std::numeric_limits<size_t>::max() / 4
          ? std::numeric_limits<size_t>::max()
          : 4 * options.max_bytes;
  return std::min(limits.unacked_bytes, std::max(four, options.max_unacked_bytes));
}

}  // namespace

StepBuffer::StepBuffer(StepBufferOptions options, std::function<void()> on_change)
    : options_(std::move(options)),
      on_change_(std::move(on_change)),
      window_(options_.cross_trainer != nullptr
                  ? std::make_unique<CrossTrainerWindow>(*options_.cross_trainer, on_change_)
                  : nullptr) {
  const size_t n = static_cast<size_t>(std::max<int64_t>(options_.num_consumers, 1));
  cursors_.assign(n, 0);
  generations_.assign(n, 0);
  attached_.assign(n, false);
  ended_.assign(n, false);
  confirmed_.assign(n, false);
  absl::MutexLock lock(&mu_);
  in_flight_.resize(options_.independent ? 0 : n);
  unattached_ = static_cast<int64_t>(n);
  not_ended_ = static_cast<int64_t>(n);
  for (size_t c = 0; c < n; ++c) cursor_counts_.Insert(0);
}

StepBuffer::~StepBuffer() = default;

int64_t StepBuffer::MinCursor() const { return cursor_counts_.min(); }

void StepBuffer::SetCursorLocked(size_t consumer, int64_t cursor, bool attached) {
  const int64_t old = cursors_[consumer];
  if (old != cursor) {
    if (old == kDetached) {
      cursor_counts_.Insert(cursor);
    } else if (cursor == kDetached) {
      cursor_counts_.Erase(old);
    } else {
      cursor_counts_.Move(old, cursor);
    }
  }
  const bool was_unattached = !attached_[consumer] && old != kDetached;
  const bool is_unattached = !attached && cursor != kDetached;
  unattached_ += static_cast<int64_t>(is_unattached) - static_cast<int64_t>(was_unattached);
  cursors_[consumer] = cursor;
  attached_[consumer] = attached;
}

void StepBuffer::SetEndedLocked(size_t consumer, bool ended) {
  if (ended_[consumer] == ended) return;
  not_ended_ += ended ? -1 : 1;
  ended_[consumer] = ended;
}

void StepBuffer::DetachUnattachedLocked() {
  if (unattached_ == 0) return;
  for (size_t c = 0; c < cursors_.size(); ++c) {
    ++scan_ops_;
    // Detached, not ended: it has not read this task here, so the task is not drained for it
    // (a worker that reported it finished would not be replaced if it died).
    if (!attached_[c]) SetCursorLocked(c, kDetached, false);
  }
}

void StepBuffer::ReleaseLocked(Wakeups* wake) {
  if (options_.independent) return;
  const int64_t min = MinCursor();
  bool released = false;
  while (!steps_.empty() && first_step_ < min) {
    std::shared_ptr<const TaskStep> step = std::move(steps_.front());
    bytes_ -= step->bytes;
    steps_.pop_front();
    ++first_step_;
    RetainLocked(std::move(step));
    released = true;
  }
  if (steps_.empty() && first_step_ < next_push_) {
    first_step_ = next_push_;
    ClearRetainedLocked();  // the window would no longer end where the buffer starts
  }
  DropAfterUnlockLocked(wake);
  if (released) {
    cv_.SignalAll();
    WakeProducerLocked(wake);
  }
}

void StepBuffer::RetainLocked(std::shared_ptr<const TaskStep> step) {
  if (retention_budget_ == 0 || retention_step_budget_ == 0 || closed_) {
    dropped_.push_back(std::move(step));
    return;
  }
  if (step->task_step != first_step_ - 1 ||
      (!retained_.empty() && retained_.back()->task_step + 1 != step->task_step)) {
    ClearRetainedLocked();  // not contiguous (cannot happen): keep the window exact
    return;
  }
  retained_bytes_ += step->bytes;
  retained_.push_back(std::move(step));
  TrimRetainedLocked();
}

void StepBuffer::TrimRetainedLocked() {
  while (!retained_.empty() && (retained_bytes_ > retention_budget_ ||
                                retained_.size() > retention_step_budget_)) {
    retained_bytes_ -= retained_.front()->bytes;
    dropped_.push_back(std::move(retained_.front()));
    retained_.pop_front();
  }
}

void StepBuffer::DropAfterUnlockLocked(Wakeups* wake) {
  if (dropped_.empty()) return;
  // RunWakeups destroys its callbacks (and so these steps) after the lock it was declared
  // before.
  wake->push_back([dropped = std::move(dropped_)] {});
  dropped_.clear();
}

void StepBuffer::NotifyChangeLocked(Wakeups* wake) {
  if (on_change_) wake->push_back(on_change_);
}

void StepBuffer::ClearRetainedLocked() {
  retained_.clear();
  retained_bytes_ = 0;
}

void StepBuffer::ReplaceSteps(const std::function<std::shared_ptr<const TaskStep>(
                                  const std::shared_ptr<const TaskStep>&)>& replace) {
  absl::MutexLock lock(&mu_);
  absl::flat_hash_map<const TaskStep*, std::shared_ptr<const TaskStep>> done;
  auto each = [&](std::deque<std::shared_ptr<const TaskStep>>& steps) {
    for (std::shared_ptr<const TaskStep>& step : steps) {
      auto [it, fresh] = done.try_emplace(step.get());
      if (fresh) it->second = replace(step);
      step = it->second;
    }
  };
  each(steps_);
  each(retained_);
  for (auto& [key, u] : unacked_) each(u.steps);
  for (InFlight& f : in_flight_) each(f.steps);
}

void StepBuffer::ReplaceQueuedSteps(const std::function<std::shared_ptr<const TaskStep>(
                                        const std::shared_ptr<const TaskStep>&)>& replace) {
  absl::MutexLock lock(&mu_);
  for (std::shared_ptr<const TaskStep>& step : steps_) {
    std::shared_ptr<const TaskStep> replaced = replace(step);
    if (replaced == nullptr) return;
    step = std::move(replaced);
  }
}

absl::Status StepBuffer::Push(std::shared_ptr<const TaskStep> step) {
  if (window_) return window_->Push(std::move(step));
  RunWakeups run;
  absl::MutexLock lock(&mu_);
  if (step->task_step != next_push_) {
    return absl::InternalError(absl::StrCat("step buffer: pushed task step ", step->task_step,
                                            ", expected ", next_push_));
  }
  if (!options_.independent && step->task_step < MinCursor()) {
    // Every consumer is past this step: skip it (a replay catching up); it is released at once
    // (into the retention window, for a consumer that comes later).
    ++next_push_;
    if (steps_.empty()) first_step_ = next_push_;
    RetainLocked(std::move(step));
    DropAfterUnlockLocked(&run.wake);
    return absl::OkStatus();
  }
  absl::Time blocked_since = absl::InfinitePast();
  // Once per blocked wait: detaching again could release nothing more (only a consumer that
  // attaches, which wakes us, changes who is unattached), and with a zero delay it would spin
  // here holding mu_, starving the very consumer that would make room.
  bool detached = false;
  while (!closed_ && !stop_producing_ && OverBudgetLocked(*step)) {
    if (blocked_since == absl::InfinitePast()) blocked_since = absl::Now();
    const absl::Time detach_at = blocked_since + options_.detach_unattached_after;
    if (!options_.independent && !detached && absl::Now() >= detach_at) {
      DetachUnattachedLocked();
      ReleaseLocked(&run.wake);
      detached = true;
      continue;
    }
    cv_.WaitWithDeadline(&mu_, options_.independent || detached ? absl::InfiniteFuture()
                                                                : detach_at);
  }
  if (closed_ || stop_producing_) return absl::CancelledError("step buffer: producer stopped");
  AdmitLocked(std::move(step), &run.wake);
  return absl::OkStatus();
}

void StepBuffer::AdmitLocked(std::shared_ptr<const TaskStep> step, Wakeups* wake) {
  if (!options_.independent && step->task_step < MinCursor()) {
    ++next_push_;
    if (steps_.empty()) first_step_ = next_push_;
    RetainLocked(std::move(step));
    DropAfterUnlockLocked(wake);
    return;
  }
  if (steps_.empty()) first_step_ = step->task_step;
  bytes_ += step->bytes;
  const int64_t pushed = step->task_step;
  steps_.push_back(std::move(step));
  ++next_push_;
  cv_.SignalAll();
  if (options_.independent) {
    WakeOneIndependentLocked(wake);
  } else {
    WakeAtLocked(pushed, wake);
  }
}

absl::StatusOr<bool> StepBuffer::TryPush(const std::shared_ptr<const TaskStep>& step,
                                         const ReadyCallback& space, absl::Time* retry_at) {
  if (window_) return window_->TryPush(step, space, retry_at);
  RunWakeups run;
  absl::MutexLock lock(&mu_);
  return TryPushLocked(step, space, retry_at, &run.wake);
}

absl::StatusOr<size_t> StepBuffer::TryPushSteps(
    absl::Span<const std::shared_ptr<const TaskStep>> steps, const ReadyCallback& space,
    absl::Time* retry_at, size_t* room, size_t* room_steps) {
  *room = 0;
  if (room_steps != nullptr) *room_steps = 0;
  // Each step in turn through `push` (TryPush's contract), up to the first one not taken; an
  // error only when no step was taken (the next call meets it again otherwise).
  auto push_each = [&](auto push) -> absl::StatusOr<size_t> {
    size_t taken = 0;
    for (const std::shared_ptr<const TaskStep>& step : steps) {
      absl::StatusOr<bool> took = push(step);
      if (!took.ok() && taken == 0) return took.status();
      if (!took.ok() || !*took) break;
      ++taken;
    }
    return taken;
  };
  if (window_) {  // a shared job's window: step by step
    return push_each([&](const std::shared_ptr<const TaskStep>& step) {
      return window_->TryPush(step, space, retry_at);
    });
  }
  RunWakeups run;
  absl::MutexLock lock(&mu_);
  absl::StatusOr<size_t> taken =
      push_each([&](const std::shared_ptr<const TaskStep>& step) ABSL_NO_THREAD_SAFETY_ANALYSIS {
        return TryPushLocked(step, space, retry_at, &run.wake);
      });
  *room = bytes_ < budget_ ? budget_ - bytes_ : 0;
  if (room_steps != nullptr) {
    *room_steps = step_budget_ == std::numeric_limits<size_t>::max() ? step_budget_
                  : steps_.size() < step_budget_                      ? step_budget_ - steps_.size()
                                                                      : 0;
  }
  return taken;
}

void StepBuffer::Cap(const StepBufferCaps& caps) {
  if (window_) return;
  RunWakeups run;
  absl::MutexLock lock(&mu_);
  const size_t budget = std::min(options_.max_bytes, caps.buffered_bytes);
  const bool rose = budget > budget_ || caps.buffered_steps > step_budget_;
  budget_ = budget;
  step_budget_ = caps.buffered_steps;
  if (rose) {
    cv_.SignalAll();  // Push's wait
    WakeProducerLocked(&run.wake);
  }
  retention_budget_ = std::min(options_.retention_bytes, caps.retained_bytes);
  retention_step_budget_ = caps.retained_steps;
  TrimRetainedLocked();
  DropAfterUnlockLocked(&run.wake);
}

bool StepBuffer::OverBudgetLocked(const TaskStep& step) const {
  return !steps_.empty() &&
         (bytes_ + step.bytes > budget_ || steps_.size() >= step_budget_);
}

absl::StatusOr<bool> StepBuffer::TryPushLocked(const std::shared_ptr<const TaskStep>& step,
                                               const ReadyCallback& space, absl::Time* retry_at,
                                               Wakeups* wake) {
  *retry_at = absl::InfiniteFuture();
  producer_wake_ = nullptr;
  if (step->task_step != next_push_) {
    return absl::InternalError(absl::StrCat("step buffer: pushed task step ", step->task_step,
                                            ", expected ", next_push_));
  }
  if (closed_ || stop_producing_) return absl::CancelledError("step buffer: producer stopped");
  auto full = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return (options_.independent || step->task_step >= MinCursor()) && OverBudgetLocked(*step);
  };
  if (full()) {
    // As Push's wait, spread over calls: the first refusal starts the blocked time, and
    // unattached consumers are detached once per blocked stretch.
    const absl::Time now = absl::Now();
    if (try_blocked_since_ == absl::InfinitePast()) try_blocked_since_ = now;
    const absl::Time detach_at = try_blocked_since_ + options_.detach_unattached_after;
    if (!options_.independent && !try_detached_ && unattached_ > 0) {
      if (now >= detach_at) {
        DetachUnattachedLocked();  // as in Push: detached, not ended
        ReleaseLocked(wake);
        try_detached_ = true;
      } else {
        *retry_at = detach_at;
      }
    }
    if (full()) {
      producer_wake_ = space;  // copied only when refused: the producer keeps one per slice
      return false;
    }
    *retry_at = absl::InfiniteFuture();
  }
  try_blocked_since_ = absl::InfinitePast();
  try_detached_ = false;
  AdmitLocked(step, wake);
  return true;
}

bool StepBuffer::producer_stopped() const {
  if (window_) return window_->producer_stopped();
  return producer_stopped_.load();
}

void StepBuffer::WakeProducerLocked(Wakeups* wake) {
  if (producer_wake_ == nullptr) return;
  wake->push_back(std::move(producer_wake_));
  producer_wake_ = nullptr;
}

void StepBuffer::Finish(absl::Status status) {
  if (window_) return window_->Finish(std::move(status));
  RunWakeups run;
  absl::MutexLock lock(&mu_);
  if (finished_) return;
  NotifyChangeLocked(&run.wake);
  finished_ = true;
  status_ = std::move(status);
  if (DrainedLocked()) ClearRetainedLocked();  // every consumer had its end elsewhere
  cv_.SignalAll();
  WakeAllLocked(&run.wake);
}

void StepBuffer::AcknowledgeLocked(Unacked* u, int64_t received_steps, Wakeups* wake) {
  bool released = false;
  while (u->acknowledged < received_steps && !u->steps.empty()) {
    bytes_ -= u->steps.front()->bytes;
    u->bytes -= u->steps.front()->bytes;
    dropped_.push_back(std::move(u->steps.front()));
    u->steps.pop_front();
    ++u->acknowledged;
    released = true;
  }
  DropAfterUnlockLocked(wake);
  if (released) {
    cv_.SignalAll();
    WakeProducerLocked(wake);
  }
}

void StepBuffer::Acknowledge(int64_t consumer, int64_t received_steps) {
  if (window_) return;
  RunWakeups run;
  absl::MutexLock lock(&mu_);
  if (!options_.independent) {
    if (consumer < 0 || consumer >= static_cast<int64_t>(in_flight_.size())) return;
    InFlight& f = in_flight_[consumer];
    while (!f.steps.empty() && f.steps.front()->task_step < received_steps) {
      f.bytes -= f.steps.front()->bytes;
      dropped_.push_back(std::move(f.steps.front()));
      f.steps.pop_front();
    }
    DropAfterUnlockLocked(&run.wake);
    return;
  }
  if (consumer == 0) return;
  auto it = unacked_.find(consumer);
  if (it != unacked_.end()) AcknowledgeLocked(&it->second, received_steps, &run.wake);
}

absl::StatusOr<int64_t> StepBuffer::Attach(int64_t consumer, int64_t start_step) {
  if (window_) {
    // A trainer's slot, read by a consumer without a key (TaskRunner::OpenReader attaches the
    // data plane's keyed consumers to the window itself).
    return window_->Attach(consumer, 0, 0);
  }
  RunWakeups run;
  absl::MutexLock lock(&mu_);
  if (options_.independent) {
    const int64_t generation = next_generation_++;
    if (consumer == 0) return generation;
    Unacked& u = unacked_[consumer];
    AcknowledgeLocked(&u, start_step, &run.wake);
    // What it did not receive goes back first, in the order it was handed out; it is still
    // counted in bytes_.
    for (auto it = u.steps.rbegin(); it != u.steps.rend(); ++it) steps_.push_front(*it);
    u.steps.clear();
    u.bytes = 0;
    u.acknowledged = std::max(u.acknowledged, start_step);
    const int64_t superseded = u.generation;
    u.generation = generation;
    cv_.SignalAll();  // a superseded Next() wakes up; waiting streams see the steps
    WakeGenerationLocked(consumer, superseded, &run.wake);
    if (!steps_.empty()) WakeOneIndependentLocked(&run.wake);
    return generation;
  }
  if (consumer < 0 || consumer >= static_cast<int64_t>(cursors_.size())) {
    return absl::InvalidArgumentError(absl::StrCat("consumer index ", consumer, " out of range [0, ",
                                                   cursors_.size(), ")"));
  }
  if (start_step < 0) {
    return absl::InvalidArgumentError(absl::StrCat("negative start_step ", start_step));
  }
  const int64_t generation = next_generation_++;
  if (start_step < first_step_ && RestoreLocked(consumer, start_step)) {
    ++retention_hits_;
  } else if (start_step < first_step_) {
    const int64_t first_retained = first_step_ - static_cast<int64_t>(retained_.size());
    // It will read elsewhere (the caller replays the task for it) or not at all: its cursor
    // here must not hold the other consumers back. Detached as for lateness, not ended: only
    // its own confirmed end counts (ConfirmEndReplayed). A stream of it still open is
    // superseded, as by any new Attach.
    in_flight_[consumer].steps.clear();
    in_flight_[consumer].bytes = 0;
    if (cursors_[consumer] != kDetached) {
      SetCursorLocked(static_cast<size_t>(consumer), kDetached, false);
      const int64_t superseded = generations_[consumer];
      generations_[consumer] = generation;
      ReleaseLocked(&run.wake);
      cv_.SignalAll();
      WakeGenerationLocked(consumer, superseded, &run.wake);
    }
    return absl::OutOfRangeError(absl::StrCat(
        "task step ", start_step, " was already released; the first buffered is ", first_step_,
        retained_.empty() ? std::string()
                          : absl::StrCat(", the first retained ", first_retained)));
  }
  // What it kept for this consumer was received (below start_step) or is buffered again.
  in_flight_[consumer].steps.clear();
  in_flight_[consumer].bytes = 0;
  SetCursorLocked(static_cast<size_t>(consumer), start_step, true);
  SetEndedLocked(static_cast<size_t>(consumer), false);
  const int64_t superseded = generations_[consumer];
  generations_[consumer] = generation;
  ReleaseLocked(&run.wake);
  cv_.SignalAll();  // a superseded Next() wakes up
  WakeProducerLocked(&run.wake);  // who is unattached changed (TryPush's retry_at)
  WakeGenerationLocked(consumer, superseded, &run.wake);
  return generation;
}

bool StepBuffer::RestoreLocked(int64_t consumer, int64_t start_step) {
  const int64_t first_retained = first_step_ - static_cast<int64_t>(retained_.size());
  const InFlight& f = in_flight_[consumer];
  if (start_step < first_retained) {
    // The rest must come from the steps kept for this consumer (contiguous, in order).
    if (f.steps.empty()) return false;
    const int64_t base = f.steps.front()->task_step;
    if (start_step < base) return false;
    for (int64_t t = start_step; t < first_retained; ++t) {
      const size_t i = static_cast<size_t>(t - base);
      if (i >= f.steps.size() || f.steps[i]->task_step != t) return false;
    }
  }
  // Released steps buffered again from start_step on, in order (the others' cursors are all
  // at first_step_ or beyond): first the retention window's, then this consumer's own.
  while (first_step_ > start_step && !retained_.empty()) {
    std::shared_ptr<const TaskStep> step = std::move(retained_.back());
    retained_.pop_back();
    retained_bytes_ -= step->bytes;
    bytes_ += step->bytes;
    steps_.push_front(std::move(step));
    --first_step_;
  }
  while (first_step_ > start_step) {
    const int64_t base = f.steps.front()->task_step;
    std::shared_ptr<const TaskStep> step = f.steps[static_cast<size_t>(first_step_ - 1 - base)];
    bytes_ += step->bytes;
    steps_.push_front(std::move(step));
    --first_step_;
  }
  return true;
}

bool StepBuffer::ReadyLocked(int64_t consumer) const {
  if (closed_ || finished_ || stop_producing_) return true;
  if (options_.independent) return !steps_.empty();
  return cursors_[consumer] < first_step_ + static_cast<int64_t>(steps_.size());
}

bool StepBuffer::Ready(int64_t consumer) const {
  if (window_) return window_->ReadyWithin(consumer, StepLimits());
  absl::MutexLock lock(&mu_);
  if (!options_.independent &&
      (consumer < 0 || consumer >= static_cast<int64_t>(cursors_.size()))) {
    return true;
  }
  return ReadyLocked(consumer);
}

const TaskStep* StepBuffer::NextStepLocked(int64_t consumer) const {
  if (options_.independent) return steps_.empty() ? nullptr : steps_.front().get();
  const int64_t cursor = cursors_[consumer];
  const int64_t last = first_step_ + static_cast<int64_t>(steps_.size());
  if (cursor < first_step_ || cursor >= last) return nullptr;
  return steps_[static_cast<size_t>(cursor - first_step_)].get();
}

bool StepBuffer::ReadyWithin(int64_t consumer, const StepLimits& limits) const {
  if (window_) return window_->ReadyWithin(consumer, limits);
  absl::MutexLock lock(&mu_);
  if (!options_.independent &&
      (consumer < 0 || consumer >= static_cast<int64_t>(cursors_.size()))) {
    return true;
  }
  if (closed_) return true;
  if (const TaskStep* s = NextStepLocked(consumer)) {
    if (options_.independent && consumer != 0) {
      // A consumer with its window of steps unacknowledged takes none (Next): not ready, or a
      // frame would wait in gRPC for a write that does not come (buffer_hint).
      auto it = unacked_.find(consumer);
      if (it != unacked_.end() && !it->second.steps.empty() &&
          it->second.bytes + s->bytes > UnackedCap(limits, options_)) {
        return false;
      }
    }
    return (limits.cost ? limits.cost(*s) : s->bytes) <= limits.first_max;
  }
  return finished_ || stop_producing_;
}

absl::Status StepBuffer::Next(int64_t consumer, int64_t generation, size_t max_steps,
                              size_t max_bytes, absl::Time deadline,
                              std::vector<std::shared_ptr<const TaskStep>>* steps, bool* end) {
  StepLimits limits;
  limits.max_steps = max_steps;
  limits.max_cost = max_bytes;
  return Next(consumer, generation, limits, deadline, steps, end);
}

bool StepBuffer::NotifyWhenReady(int64_t consumer, int64_t generation, ReadyCallback ready) {
  if (window_) return window_->NotifyWhenReady(consumer, generation, std::move(ready));
  absl::MutexLock lock(&mu_);
  if (closed_ || finished_ || stop_producing_) return false;
  if (options_.independent) {
    if (consumer != 0) {
      auto it = unacked_.find(consumer);
      if (it == unacked_.end() || it->second.generation != generation) return false;
    }
    if (!steps_.empty()) return false;
    waiters_[generation] = Waiter{consumer, std::move(ready)};
    waiting_order_.push_back(generation);
    return true;
  }
  if (consumer < 0 || consumer >= static_cast<int64_t>(cursors_.size()) ||
      generations_[consumer] != generation || NextStepLocked(consumer) != nullptr) {
    return false;
  }
  waiters_[generation] = Waiter{consumer, std::move(ready)};
  waiting_at_[cursors_[consumer]].push_back(generation);
  return true;
}

void StepBuffer::CancelNotify(int64_t consumer, int64_t generation) {
  if (window_) return window_->CancelNotify(generation);
  RunWakeups run;
  absl::MutexLock lock(&mu_);
  (void)consumer;
  waiters_.erase(generation);
  // It may have been woken for steps it will now not take: the next waiting stream takes them.
  if (options_.independent && !steps_.empty()) WakeOneIndependentLocked(&run.wake);
}

void StepBuffer::WakeAtLocked(int64_t task_step, Wakeups* wake) {
  auto at = waiting_at_.find(task_step);
  if (at == waiting_at_.end()) return;
  for (int64_t generation : at->second) {
    auto w = waiters_.find(generation);
    if (w == waiters_.end()) continue;  // cancelled, or woken otherwise
    wake->push_back(std::move(w->second.ready));
    waiters_.erase(w);
  }
  waiting_at_.erase(at);
}

void StepBuffer::WakeOneIndependentLocked(Wakeups* wake) {
  while (!waiting_order_.empty()) {
    const int64_t generation = waiting_order_.front();
    waiting_order_.pop_front();
    auto w = waiters_.find(generation);
    if (w == waiters_.end()) continue;
    wake->push_back(std::move(w->second.ready));
    waiters_.erase(w);
    return;
  }
}

void StepBuffer::WakeGenerationLocked(int64_t consumer, int64_t superseded, Wakeups* wake) {
  if (options_.independent && consumer == 0) return;  // streams without a key supersede none
  auto w = waiters_.find(superseded);
  if (w == waiters_.end() || w->second.consumer != consumer) return;
  wake->push_back(std::move(w->second.ready));
  waiters_.erase(w);
}

void StepBuffer::WakeAllLocked(Wakeups* wake) {
  for (auto& [generation, w] : waiters_) wake->push_back(std::move(w.ready));
  waiters_.clear();
  waiting_at_.clear();
  waiting_order_.clear();
}

absl::Status StepBuffer::Next(int64_t consumer, int64_t generation, const StepLimits& limits,
                              absl::Time deadline,
                              std::vector<std::shared_ptr<const TaskStep>>* steps, bool* end,
                              size_t* blocked_cost) {
  if (window_) {
    return window_->Next(consumer, generation, limits, deadline, steps, end, blocked_cost);
  }
  RunWakeups run;
  steps->clear();
  *end = false;
  if (blocked_cost != nullptr) *blocked_cost = 0;
  const size_t max_steps = std::max<size_t>(limits.max_steps, 1);
  auto cost = [&limits](const TaskStep& s) { return limits.cost ? limits.cost(s) : s.bytes; };
  // The frame's kind (StepLimits::frame_kind): the continued frame's, else that of the first
  // step taken, once it is.
  std::optional<int> frame_kind;
  if (limits.frame_kind && limits.frame_first != nullptr) {
    frame_kind = limits.frame_kind(*limits.frame_first);
  }
  // Whether `s` may join the `taken` steps costing `total` so far (the caller then takes it).
  auto fits = [&](const TaskStep& s, size_t total, size_t* c) {
    *c = cost(s);
    int kind = 0;
    if (limits.frame_kind) {
      kind = limits.frame_kind(s);
      if (frame_kind.has_value() && kind != *frame_kind) return false;
    }
    const bool fit = steps->empty() ? *c <= limits.first_max
                                    : steps->size() < max_steps && total + *c <= limits.max_cost;
    if (fit && limits.frame_kind && !frame_kind.has_value()) frame_kind = kind;
    return fit;
  };
  absl::MutexLock lock(&mu_);
  if (!options_.independent &&
      (consumer < 0 || consumer >= static_cast<int64_t>(cursors_.size()))) {
    return absl::InvalidArgumentError(absl::StrCat("consumer index ", consumer, " out of range"));
  }
  while (true) {
    if (closed_) {
      return ClosedTaskStatus(finished_ ? status_ : absl::OkStatus(),
                              close_message_.empty() ? "task closed on this worker"
                                                     : close_message_);
    }
    size_t total = 0;
    size_t c = 0;
    if (options_.independent) {
      Unacked* u = nullptr;
      if (consumer != 0) {
        u = &unacked_[consumer];
        if (u->generation != generation) {
          return absl::CancelledError(
              absl::StrCat("stream of consumer ", consumer, " superseded by a newer one"));
        }
      }
      const size_t cap = UnackedCap(limits, options_);
      bool capped = false;
      while (!steps_.empty()) {
        if (u != nullptr && !u->steps.empty() && u->bytes + steps_.front()->bytes > cap) {
          capped = true;  // its window of unacknowledged steps is full
          break;
        }
        if (!fits(*steps_.front(), total, &c)) break;
        total += c;
        if (u != nullptr) {
          u->bytes += steps_.front()->bytes;
          u->steps.push_back(steps_.front());  // still counted in bytes_ until acknowledged
        } else {
          bytes_ -= steps_.front()->bytes;
        }
        steps->push_back(std::move(steps_.front()));
        steps_.pop_front();
        ++first_step_;
      }
      // Steps left behind go to the next waiting stream.
      if (!steps->empty()) {
        // Steps given back by a reconnect, taken after the end was confirmed: drained now.
        if (steps_.empty() && end_confirmed_) NotifyChangeLocked(&run.wake);
        cv_.SignalAll();
        // Their bytes were released, or (kept until acknowledged) the queue is empty: either
        // lets the producer push (an empty buffer always admits a step).
        if (u == nullptr || steps_.empty()) WakeProducerLocked(&run.wake);
        if (!steps_.empty()) WakeOneIndependentLocked(&run.wake);
        return absl::OkStatus();
      }
      if (!steps_.empty()) {  // the first step does not fit
        if (blocked_cost != nullptr) *blocked_cost = capped ? kBlockedOnAcknowledgement : c;
        WakeOneIndependentLocked(&run.wake);
        return absl::OkStatus();
      }
    } else {
      if (generations_[consumer] != generation) {
        return absl::CancelledError(
            absl::StrCat("stream of consumer ", consumer, " superseded by a newer one"));
      }
      int64_t cursor = cursors_[consumer];
      const int64_t last = first_step_ + static_cast<int64_t>(steps_.size());
      bool blocked = false;
      while (cursor >= first_step_ && cursor < last) {
        const auto& s = steps_[static_cast<size_t>(cursor - first_step_)];
        if (!fits(*s, total, &c)) {
          blocked = steps->empty();
          break;
        }
        total += c;
        steps->push_back(s);
        ++cursor;
      }
      if (!steps->empty()) {
        // Kept for the consumer's reconnect until acknowledged, when the caller names its
        // window (the data plane's streams do; callers without acknowledgements do not).
        if (limits.unacked_bytes != std::numeric_limits<size_t>::max()) {
          KeepInFlightLocked(consumer, *steps, UnackedCap(limits, options_), &run.wake);
        }
        SetCursorLocked(static_cast<size_t>(consumer), cursor, attached_[consumer]);
        ReleaseLocked(&run.wake);
        return absl::OkStatus();
      }
      if (blocked) {
        if (blocked_cost != nullptr) *blocked_cost = c;
        return absl::OkStatus();
      }
    }
    if (finished_) {
      if (!status_.ok()) return status_;
      *end = true;  // counted once the consumer confirms it (ConfirmEnd)
      return absl::OkStatus();
    }
    if (stop_producing_) {
      return absl::UnavailableError("task stopped on this worker (draining)");
    }
    if (cv_.WaitWithDeadline(&mu_, deadline) && absl::Now() >= deadline) {
      return absl::OkStatus();
    }
  }
}

void StepBuffer::KeepInFlightLocked(int64_t consumer,
                                    const std::vector<std::shared_ptr<const TaskStep>>& steps,
                                    size_t keep_bytes, Wakeups* wake) {
  InFlight& f = in_flight_[consumer];
  if (!f.steps.empty() && f.steps.back()->task_step + 1 != steps.front()->task_step) {
    f.steps.clear();  // not contiguous (a reattach elsewhere clears it first): start again
    f.bytes = 0;
  }
  for (const auto& step : steps) {
    f.bytes += step->bytes;
    f.steps.push_back(step);
  }
  while (f.steps.size() > 1 && f.bytes > keep_bytes) {
    f.bytes -= f.steps.front()->bytes;
    dropped_.push_back(std::move(f.steps.front()));
    f.steps.pop_front();
  }
  DropAfterUnlockLocked(wake);
}

void StepBuffer::ConfirmEnd(int64_t consumer, int64_t generation) {
  if (window_) return window_->ConfirmEnd(consumer);
  RunWakeups run;
  absl::MutexLock lock(&mu_);
  if (!finished_ || !status_.ok()) return;
  NotifyChangeLocked(&run.wake);
  if (options_.independent) {
    end_confirmed_ = true;
    // It half-closed after the end frame: it has every step handed to it.
    auto it = unacked_.find(consumer);
    if (consumer != 0 && it != unacked_.end() && it->second.generation == generation) {
      AcknowledgeLocked(&it->second, std::numeric_limits<int64_t>::max(), &run.wake);
    }
  } else {
    if (consumer < 0 || consumer >= static_cast<int64_t>(cursors_.size()) ||
        generations_[consumer] != generation) {
      return;
    }
    SetEndedLocked(static_cast<size_t>(consumer), true);
    confirmed_[consumer] = true;
    // It half-closed after the end frame: it has every step handed to it, so what was kept
    // for its reconnect goes (freed after the lock). Kept, a step built in the consumer's
    // shared-memory ring would be copied out of it when the stream ends (worker/step_placement.h).
    InFlight& f = in_flight_[consumer];
    for (std::shared_ptr<const TaskStep>& step : f.steps) dropped_.push_back(std::move(step));
    f.steps.clear();
    f.bytes = 0;
    DropAfterUnlockLocked(&run.wake);
  }
  if (DrainedLocked()) ClearRetainedLocked();  // no consumer can need the window now
  cv_.SignalAll();
}

void StepBuffer::ConfirmEndReplayed(int64_t consumer) {
  if (window_) return;
  RunWakeups run;
  absl::MutexLock lock(&mu_);
  if (options_.independent) return;
  if (consumer < 0 || consumer >= static_cast<int64_t>(cursors_.size())) return;
  if (cursors_[consumer] != kDetached) return;  // it reads here (again): its own end counts
  NotifyChangeLocked(&run.wake);
  SetEndedLocked(static_cast<size_t>(consumer), true);
  confirmed_[consumer] = true;
  if (DrainedLocked()) ClearRetainedLocked();
  cv_.SignalAll();
}

void StepBuffer::Detach(int64_t consumer) {
  if (window_) return;
  RunWakeups run;
  absl::MutexLock lock(&mu_);
  if (options_.independent) return;
  if (consumer < 0 || consumer >= static_cast<int64_t>(cursors_.size())) return;
  NotifyChangeLocked(&run.wake);
  SetCursorLocked(static_cast<size_t>(consumer), kDetached, attached_[consumer]);
  SetEndedLocked(static_cast<size_t>(consumer), true);
  in_flight_[consumer].steps.clear();
  in_flight_[consumer].bytes = 0;
  // A stream of this consumer still open must not read on from kDetached (it would see the end
  // of the task without the steps): it is superseded.
  const int64_t superseded = generations_[consumer];
  generations_[consumer] = next_generation_++;
  ReleaseLocked(&run.wake);
  if (DrainedLocked()) ClearRetainedLocked();
  cv_.SignalAll();
  WakeGenerationLocked(consumer, superseded, &run.wake);
}

void StepBuffer::StopProducing() {
  if (window_) return window_->StopProducing();
  RunWakeups run;
  absl::MutexLock lock(&mu_);
  stop_producing_ = true;
  producer_stopped_ = true;
  cv_.SignalAll();
  WakeAllLocked(&run.wake);
  WakeProducerLocked(&run.wake);
}

void StepBuffer::Close(absl::string_view message) {
  if (window_) return window_->Close();
  RunWakeups run;
  absl::MutexLock lock(&mu_);
  if (!closed_) close_message_ = std::string(message);
  closed_ = true;
  producer_stopped_ = true;
  ClearRetainedLocked();
  for (InFlight& f : in_flight_) {
    f.steps.clear();
    f.bytes = 0;
  }
  cv_.SignalAll();
  WakeAllLocked(&run.wake);
  WakeProducerLocked(&run.wake);
}

size_t StepBuffer::buffered_bytes() const {
  if (window_) return window_->stats().bytes;
  absl::MutexLock lock(&mu_);
  return bytes_;
}

size_t StepBuffer::buffered_steps() const {
  if (window_) return window_->stats().steps;
  absl::MutexLock lock(&mu_);
  return steps_.size();
}

size_t StepBuffer::retained_bytes() const {
  absl::MutexLock lock(&mu_);
  return retained_bytes_;
}

StepBuffer::Stats StepBuffer::stats() const {
  if (window_) {
    const CrossTrainerWindow::Stats w = window_->stats();
    Stats s;
    s.steps_produced = w.steps_produced;
    s.bytes = w.bytes;
    s.steps = w.steps;
    s.max_bytes = w.window_bytes;
    s.producer_waiting_for_space = w.producer_waiting;
    s.independent = true;
    return s;
  }
  absl::MutexLock lock(&mu_);
  Stats s;
  s.steps_produced = next_push_;
  s.bytes = bytes_;
  s.steps = steps_.size();
  s.max_bytes = budget_;
  s.producer_waiting_for_space = producer_wake_ != nullptr;
  s.independent = options_.independent;
  s.retained_bytes = retained_bytes_;
  s.retained_steps = retained_.size();
  s.retention_capacity = options_.independent ? 0 : retention_budget_;
  s.retention_hits = retention_hits_;
  if (!options_.independent) {
    s.cursors.reserve(cursors_.size());
    for (size_t c = 0; c < cursors_.size(); ++c) {
      s.cursors.push_back(cursors_[c] == kDetached || ended_[c] ? -1 : cursors_[c]);
      if (confirmed_[c]) s.confirmed_ends.push_back(static_cast<int64_t>(c));
    }
  }
  return s;
}

absl::Status StepBuffer::producer_status() const {
  if (window_) return window_->producer_status();
  absl::MutexLock lock(&mu_);
  return finished_ ? status_ : absl::OkStatus();
}

bool StepBuffer::drained() const {
  if (window_) return window_->drained();
  absl::MutexLock lock(&mu_);
  return DrainedLocked();
}

bool StepBuffer::DrainedLocked() const {
  if (!finished_ || !steps_.empty()) return false;
  if (options_.independent) return end_confirmed_;
  return not_ended_ == 0;
}

int64_t StepBuffer::TEST_cursor_ops() const {
  absl::MutexLock lock(&mu_);
  return cursor_counts_.TEST_ops() + scan_ops_;
}

}  // namespace sluice
