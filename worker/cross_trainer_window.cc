#include "worker/cross_trainer_window.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/rpc/trainer_id.h"
#include "core/util/transient_error.h"
#include "worker/run_wakeups.h"

namespace sluice {

CrossTrainerWindow::CrossTrainerWindow(CrossTrainerWindowOptions options, Callback on_change)
    : options_(std::move(options)), on_change_(std::move(on_change)) {}

const CrossTrainerWindow::Trainer* CrossTrainerWindow::FindLocked(int64_t trainer) const {
  if (trainer < 0 || trainer >= static_cast<int64_t>(trainers_.size())) return nullptr;
  const Trainer& t = trainers_[static_cast<size_t>(trainer)];
  return t.joined ? &t : nullptr;
}

bool CrossTrainerWindow::FitsLocked(const TaskStep& step) const {
  return steps_.empty() || bytes_ + step.bytes <= options_.window_bytes;
}

bool CrossTrainerWindow::CanEvictFrontLocked() const {
  if (steps_.empty()) return false;
  if (!options_.lossless) return first_step_ < max_cursor_;
  if (joined_ever_ < options_.expected_trainers) return false;
  // No trainer joined: nobody has read anything, keep it for whoever comes.
  return cursor_counts_.size() > 0 && first_step_ < cursor_counts_.min();
}

bool CrossTrainerWindow::MakeRoomLocked(const TaskStep& step) {
  while (!FitsLocked(step) && CanEvictFrontLocked()) {
    bytes_ -= steps_.front()->bytes;
    steps_.pop_front();
    ++first_step_;
    ++evicted_;
  }
  return FitsLocked(step);
}

void CrossTrainerWindow::AdmitLocked(std::shared_ptr<const TaskStep> step, Wakeups* wake) {
  if (steps_.empty()) first_step_ = step->task_step;
  bytes_ += step->bytes;
  steps_.push_back(std::move(step));
  ++next_push_;
  cv_.SignalAll();
  // A waiting stream's trainer has read everything, so the new step is its next one.
  WakeAllLocked(wake);
}

absl::StatusOr<bool> CrossTrainerWindow::TryPush(const std::shared_ptr<const TaskStep>& step,
                                                 Callback space) {
  RunWakeups run;
  absl::MutexLock lock(&mu_);
  producer_wake_ = nullptr;
  if (closed_ || stop_producing_) {
    return absl::CancelledError("cross-trainer window: producer stopped");
  }
  if (step->task_step != next_push_) {
    return absl::InternalError(absl::StrCat("cross-trainer window: pushed task step ",
                                            step->task_step, ", expected ", next_push_));
  }
  if (!MakeRoomLocked(*step)) {
    producer_wake_ = std::move(space);
    return false;
  }
  AdmitLocked(step, &run.wake);
  return true;
}

absl::Status CrossTrainerWindow::Push(std::shared_ptr<const TaskStep> step) {
  RunWakeups run;
  absl::MutexLock lock(&mu_);
  if (step->task_step != next_push_) {
    return absl::InternalError(absl::StrCat("cross-trainer window: pushed task step ",
                                            step->task_step, ", expected ", next_push_));
  }
  while (!closed_ && !stop_producing_ && !MakeRoomLocked(*step)) cv_.Wait(&mu_);
  if (closed_ || stop_producing_) {
    return absl::CancelledError("cross-trainer window: producer stopped");
  }
  AdmitLocked(std::move(step), &run.wake);
  return absl::OkStatus();
}

void CrossTrainerWindow::Finish(absl::Status status) {
  RunWakeups run;
  absl::MutexLock lock(&mu_);
  if (finished_) return;
  finished_ = true;
  status_ = std::move(status);
  cv_.SignalAll();
  WakeAllLocked(&run.wake);
  if (on_change_) run.wake.push_back(on_change_);
}

void CrossTrainerWindow::StopProducing() {
  RunWakeups run;
  absl::MutexLock lock(&mu_);
  stop_producing_ = true;
  cv_.SignalAll();
  WakeAllLocked(&run.wake);
  WakeProducerLocked(&run.wake);
}

bool CrossTrainerWindow::producer_stopped() const {
  absl::MutexLock lock(&mu_);
  return closed_ || stop_producing_;
}

absl::Status CrossTrainerWindow::producer_status() const {
  absl::MutexLock lock(&mu_);
  return finished_ ? status_ : absl::OkStatus();
}

void CrossTrainerWindow::Close() {
  RunWakeups run;
  absl::MutexLock lock(&mu_);
  closed_ = true;
  steps_.clear();
  bytes_ = 0;
  cv_.SignalAll();
  WakeAllLocked(&run.wake);
  WakeProducerLocked(&run.wake);
}

absl::StatusOr<int64_t> CrossTrainerWindow::Join(absl::string_view trainer_id) {
  absl::Status valid =
      ValidateTrainerId(trainer_id, "trainer_id", options_.max_trainer_id_bytes);
  if (!valid.ok()) return valid;
  absl::MutexLock lock(&mu_);
  auto it = slots_.find(trainer_id);
  if (it != slots_.end()) return it->second;  // another consumer of the same trainer
  if (static_cast<int64_t>(slots_.size()) >= options_.max_trainers) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "trainer_id ", QuoteTrainerId(trainer_id), " refused: the job is shared by its maximum of ",
        options_.max_trainers, " trainers"));
  }
  size_t slot = 0;
  while (slot < trainers_.size() && trainers_[slot].joined) ++slot;
  if (slot == trainers_.size()) trainers_.emplace_back();
  Trainer& t = trainers_[slot];
  t = Trainer{};
  t.id = std::string(trainer_id);
  t.joined = true;
  t.cursor = steps_.empty() ? next_push_ : first_step_;
  if (options_.lossless) cursor_counts_.Insert(t.cursor);
  ++joined_ever_;
  slots_[t.id] = static_cast<int64_t>(slot);
  return static_cast<int64_t>(slot);
}

void CrossTrainerWindow::RemoveTrainer(absl::string_view trainer_id) {
  RunWakeups run;
  absl::MutexLock lock(&mu_);
  auto it = slots_.find(trainer_id);
  if (it == slots_.end()) return;
  Trainer& t = trainers_[static_cast<size_t>(it->second)];
  if (options_.lossless) cursor_counts_.Erase(t.cursor);
  t.joined = false;
  const int64_t slot = it->second;
  slots_.erase(it);
  // Its streams waiting for a step learn that it is gone.
  for (auto w = waiters_.begin(); w != waiters_.end();) {
    if (w->second.trainer == slot) {
      run.wake.push_back(std::move(w->second.ready));
      waiters_.erase(w++);
    } else {
      ++w;
    }
  }
  cv_.SignalAll();
  WakeProducerLocked(&run.wake);
  if (on_change_) run.wake.push_back(on_change_);
}

void CrossTrainerWindow::ApplySkipLocked(Trainer* t) {
  // Steps leave only to admit a newer one, so the window is empty only before the first push
  // (or after Close): then every trainer is at next_push_ already.
  const int64_t first = steps_.empty() ? next_push_ : first_step_;
  if (t->cursor >= first) return;
  t->skipped += first - t->cursor;
  SetCursorLocked(t, first);
}

void CrossTrainerWindow::SetCursorLocked(Trainer* t, int64_t cursor) {
  if (options_.lossless) cursor_counts_.Move(t->cursor, cursor);
  t->cursor = cursor;
  max_cursor_ = std::max(max_cursor_, cursor);
}

bool CrossTrainerWindow::ReadyLocked(const Trainer& t) const {
  return closed_ || finished_ || stop_producing_ || NextStepLocked(t) != nullptr;
}

const TaskStep* CrossTrainerWindow::NextStepLocked(const Trainer& t) const {
  if (steps_.empty()) return nullptr;
  const int64_t cursor = std::max(t.cursor, first_step_);
  const int64_t last = first_step_ + static_cast<int64_t>(steps_.size());
  return cursor < last ? steps_[static_cast<size_t>(cursor - first_step_)].get() : nullptr;
}

bool CrossTrainerWindow::ReadyWithin(int64_t trainer, const StepLimits& limits) const {
  absl::MutexLock lock(&mu_);
  const Trainer* t = FindLocked(trainer);
  if (t == nullptr || closed_) return true;
  if (const TaskStep* s = NextStepLocked(*t)) {
    return (limits.cost ? limits.cost(*s) : s->bytes) <= limits.first_max;
  }
  return finished_ || stop_producing_;
}

absl::Status CrossTrainerWindow::Next(int64_t trainer, size_t max_steps, size_t max_bytes,
                                      absl::Time deadline,
                                      std::vector<std::shared_ptr<const TaskStep>>* steps,
                                      bool* end) {
  StepLimits limits;
  limits.max_steps = max_steps;
  limits.max_cost = max_bytes;
  return Next(trainer, limits, deadline, steps, end);
}

absl::Status CrossTrainerWindow::Next(int64_t trainer, const StepLimits& limits,
                                      absl::Time deadline,
                                      std::vector<std::shared_ptr<const TaskStep>>* steps,
                                      bool* end, size_t* blocked_cost) {
  RunWakeups run;
  steps->clear();
  *end = false;
  if (blocked_cost != nullptr) *blocked_cost = 0;
  const size_t max_steps = std::max<size_t>(limits.max_steps, 1);
  auto cost = [&limits](const TaskStep& s) { return limits.cost ? limits.cost(s) : s.bytes; };
  absl::MutexLock lock(&mu_);
  while (true) {
    if (closed_) {
      return ClosedTaskStatus(finished_ ? status_ : absl::OkStatus(),
                              "task closed on this worker");
    }
    if (FindLocked(trainer) == nullptr) {
      return absl::NotFoundError(absl::StrCat("trainer slot ", trainer,
                                              " is not joined to this task's window"));
    }
    Trainer& t = trainers_[static_cast<size_t>(trainer)];
    ApplySkipLocked(&t);
    const int64_t last = first_step_ + static_cast<int64_t>(steps_.size());
    int64_t cursor = t.cursor;
    size_t total = 0;
    while (cursor < last && steps->size() < max_steps) {
      const auto& s = steps_[static_cast<size_t>(cursor - first_step_)];
      const size_t c = cost(*s);
      if (steps->empty() && c > limits.first_max) {
        if (blocked_cost != nullptr) *blocked_cost = c;  // waits for credit
        return absl::OkStatus();
      }
      if (!steps->empty() && total + c > limits.max_cost) break;
      total += c;
      steps->push_back(s);
      ++cursor;
    }
    if (!steps->empty()) {
      t.steps_read += static_cast<int64_t>(steps->size());
      SetCursorLocked(&t, cursor);
      WakeProducerLocked(&run.wake);  // the leading or the slowest trainer may have moved
      cv_.SignalAll();
      return absl::OkStatus();
    }
    if (finished_) {
      if (!status_.ok()) return status_;
      *end = true;
      return absl::OkStatus();
    }
    if (stop_producing_) return absl::UnavailableError("task stopped on this worker (draining)");
    if (cv_.WaitWithDeadline(&mu_, deadline) && absl::Now() >= deadline) {
      return absl::OkStatus();
    }
  }
}

bool CrossTrainerWindow::NotifyWhenReady(int64_t trainer, int64_t key, Callback ready) {
  absl::MutexLock lock(&mu_);
  const Trainer* t = FindLocked(trainer);
  if (t == nullptr || ReadyLocked(*t)) return false;
  waiters_[key] = Waiter{trainer, std::move(ready)};
  return true;
}

void CrossTrainerWindow::CancelNotify(int64_t key) {
  absl::MutexLock lock(&mu_);
  waiters_.erase(key);
}

void CrossTrainerWindow::ConfirmEnd(int64_t trainer) {
  RunWakeups run;
  absl::MutexLock lock(&mu_);
  if (!finished_ || !status_.ok() || FindLocked(trainer) == nullptr) return;
  trainers_[static_cast<size_t>(trainer)].ended = true;
  cv_.SignalAll();
  if (on_change_) run.wake.push_back(on_change_);
}

void CrossTrainerWindow::WakeProducerLocked(Wakeups* wake) {
  if (producer_wake_ == nullptr) return;
  wake->push_back(std::move(producer_wake_));
  producer_wake_ = nullptr;
}

void CrossTrainerWindow::WakeAllLocked(Wakeups* wake) {
  for (auto& [key, w] : waiters_) wake->push_back(std::move(w.ready));
  waiters_.clear();
}

CrossTrainerWindow::Stats CrossTrainerWindow::stats() const {
  absl::MutexLock lock(&mu_);
  Stats s;
  s.steps_produced = next_push_;
  s.steps_evicted = evicted_;
  s.bytes = bytes_;
  s.steps = steps_.size();
  s.window_bytes = options_.window_bytes;
  s.lossless = options_.lossless;
  s.producer_waiting = producer_wake_ != nullptr;
  for (size_t slot = 0; slot < trainers_.size(); ++slot) {
    const Trainer& t = trainers_[slot];
    if (!t.joined) continue;
    TrainerStats ts;
    ts.trainer_id = t.id;
    ts.slot = static_cast<int64_t>(slot);
    ts.steps_read = t.steps_read;
    // A skip due (the trainer is behind the window and has not read since) already counts:
    // the count only grows, and equals the gap the trainer sees when it reads.
    const int64_t from = steps_.empty() ? next_push_ : std::max(t.cursor, first_step_);
    ts.skipped_steps = t.skipped + (from - t.cursor);
    ts.cursor = from;
    ts.lag_steps = next_push_ - from;
    s.trainers.push_back(std::move(ts));
  }
  return s;
}

bool CrossTrainerWindow::drained() const {
  absl::MutexLock lock(&mu_);
  if (!finished_ || slots_.empty()) return false;
  for (const auto& [id, slot] : slots_) {
    if (!trainers_[static_cast<size_t>(slot)].ended) return false;
  }
  return true;
}

}  // namespace sluice
