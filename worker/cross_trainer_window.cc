#include "worker/cross_trainer_window.h"

#include <algorithm>
#include <iterator>
#include <limits>
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
                                                 Callback space, absl::Time* retry_at) {
  RunWakeups run;
  absl::MutexLock lock(&mu_);
  producer_wake_ = nullptr;
  if (retry_at != nullptr) *retry_at = absl::InfiniteFuture();
  if (closed_ || stop_producing_) {
    return absl::CancelledError("cross-trainer window: producer stopped");
  }
  if (step->task_step != next_push_) {
    return absl::InternalError(absl::StrCat("cross-trainer window: pushed task step ",
                                            step->task_step, ", expected ", next_push_));
  }
  const absl::Time due = DropDepartedLocked(options_.now(), &run.wake);
  if (!MakeRoomLocked(*step)) {
    producer_wake_ = std::move(space);
    if (retry_at != nullptr) *retry_at = due;  // a departed trainer may be what holds it
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
  while (!closed_ && !stop_producing_) {
    const absl::Time due = DropDepartedLocked(options_.now(), &run.wake);
    if (MakeRoomLocked(*step)) break;
    if (due == absl::InfiniteFuture()) {
      cv_.Wait(&mu_);
    } else {
      // Measured on options_.now's clock, waited for on the real one: a fake clock's due time
      // is checked again at least every second.
      cv_.WaitWithTimeout(&mu_, std::min(due - options_.now(), absl::Seconds(1)));
    }
  }
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
  consumers_.clear();  // their unacknowledged steps: nobody reads them any more
  for (Trainer& t : trainers_) t.returned.clear();
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
  if (std::find(dropped_ids_.begin(), dropped_ids_.end(), trainer_id) != dropped_ids_.end()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "trainer_id ", QuoteTrainerId(trainer_id),
        " refused: it was dropped from the job's window after no stream of it was open for ",
        absl::FormatDuration(options_.drop_departed_after),
        " (--drop_departed_trainers_after), and the steps it missed are gone; join the job "
        "under a new trainer_id"));
  }
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
  t.left_at = options_.now();  // no reader yet (Attach follows)
  if (options_.lossless) cursor_counts_.Insert(t.cursor);
  ++joined_ever_;
  slots_[t.id] = static_cast<int64_t>(slot);
  return static_cast<int64_t>(slot);
}

void CrossTrainerWindow::RemoveTrainer(absl::string_view trainer_id) {
  RunWakeups run;
  absl::MutexLock lock(&mu_);
  RemoveTrainerLocked(std::string(trainer_id), &run.wake);
}

void CrossTrainerWindow::ReaderGoneLocked(int64_t trainer) {
  Trainer& t = trainers_[static_cast<size_t>(trainer)];
  if (!t.joined || t.open_readers <= 0) return;
  if (--t.open_readers == 0) t.left_at = options_.now();
}

void CrossTrainerWindow::HandOverDeadConsumersLocked(absl::Time now, Wakeups* wake) {
  if (now < next_dead_due_) return;
  next_dead_due_ = absl::InfiniteFuture();
  bool handed = false;
  for (auto it = consumers_.begin(); it != consumers_.end();) {
    Consumer& c = it->second;
    Trainer& t = trainers_[static_cast<size_t>(c.trainer)];
    const absl::Time due = c.left_at + options_.drop_departed_after;
    if (c.reader != 0 || c.unacked.empty()) {
      ++it;
      continue;
    }
    if (due > now || t.open_readers == 0) {
      // Not dead yet, or no one to hand to: its trainer departs as a whole.
      if (due > now) next_dead_due_ = std::min(next_dead_due_, due);
      ++it;
      continue;
    }
    // Both queues are in task-step order: merge them, so the trainer reads in order.
    std::deque<std::shared_ptr<const TaskStep>> merged;
    std::merge(t.returned.begin(), t.returned.end(), c.unacked.begin(), c.unacked.end(),
               std::back_inserter(merged),
               [](const auto& a, const auto& b) { return a->task_step < b->task_step; });
    t.returned = std::move(merged);
    handed_over_ += static_cast<int64_t>(c.unacked.size());
    ++consumers_dead_;
    handed = true;
    consumers_.erase(it++);
  }
  if (handed) {
    WakeAllLocked(wake);
    cv_.SignalAll();
  }
}

absl::Time CrossTrainerWindow::DropDepartedLocked(absl::Time now, Wakeups* wake) {
  if (options_.drop_departed_after == absl::InfiniteDuration()) return absl::InfiniteFuture();
  HandOverDeadConsumersLocked(now, wake);
  absl::Time next = absl::InfiniteFuture();
  std::vector<std::string> gone;
  for (const Trainer& t : trainers_) {
    if (!t.joined || t.open_readers > 0) continue;
    const absl::Time due = t.left_at + options_.drop_departed_after;
    if (due <= now) {
      gone.push_back(t.id);
    } else {
      next = std::min(next, due);
    }
  }
  for (std::string& id : gone) {
    RemoveTrainerLocked(id, wake);
    dropped_ids_.push_back(std::move(id));
    if (dropped_ids_.size() > kMaxDroppedTrainersPerWindow) dropped_ids_.pop_front();
  }
  dropped_ += static_cast<int64_t>(gone.size());
  return next;
}

void CrossTrainerWindow::RemoveTrainerLocked(const std::string& trainer_id, Wakeups* wake) {
  auto it = slots_.find(trainer_id);
  if (it == slots_.end()) return;
  Trainer& t = trainers_[static_cast<size_t>(it->second)];
  if (options_.lossless) cursor_counts_.Erase(t.cursor);
  t.joined = false;
  t.returned.clear();
  const int64_t slot = it->second;
  slots_.erase(it);
  ForgetConsumersLocked(slot);
  // Its streams waiting for a step learn that it is gone.
  for (auto w = waiters_.begin(); w != waiters_.end();) {
    if (w->second.trainer == slot) {
      wake->push_back(std::move(w->second.ready));
      waiters_.erase(w++);
    } else {
      ++w;
    }
  }
  cv_.SignalAll();
  WakeProducerLocked(wake);
  if (on_change_) wake->push_back(on_change_);
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
  if (!t.returned.empty()) return t.returned.front().get();
  if (steps_.empty()) return nullptr;
  const int64_t cursor = std::max(t.cursor, first_step_);
  const int64_t last = first_step_ + static_cast<int64_t>(steps_.size());
  return cursor < last ? steps_[static_cast<size_t>(cursor - first_step_)].get() : nullptr;
}

bool CrossTrainerWindow::ReadyWithin(int64_t trainer, const StepLimits& limits,
                                     int64_t reader) const {
  absl::MutexLock lock(&mu_);
  const Trainer* t = FindLocked(trainer);
  if (t == nullptr || closed_) return true;
  if (reader != 0 && !readers_.contains(reader)) return true;  // superseded: CANCELLED
  if (const TaskStep* s = NextStepLocked(*t)) {
    return (limits.cost ? limits.cost(*s) : s->bytes) <= limits.first_max &&
           UnackedRoomLocked(ConsumerLocked(reader), limits, s->bytes);
  }
  return finished_ || stop_producing_;
}

absl::StatusOr<int64_t> CrossTrainerWindow::Attach(int64_t trainer, uint64_t consumer_key,
                                                   int64_t received_steps) {
  RunWakeups run;
  absl::MutexLock lock(&mu_);
  if (FindLocked(trainer) == nullptr) {
    return absl::NotFoundError(
        absl::StrCat("trainer slot ", trainer, " is not joined to this task's window"));
  }
  if (received_steps < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("StreamRequest.start_step ", received_steps, " of consumer_id ",
                     consumer_key, " is negative (the steps it received)"));
  }
  const int64_t id = next_reader_++;
  if (consumer_key != 0) {
    auto it = consumers_.find(consumer_key);
    if (it == consumers_.end()) {
      if (static_cast<int64_t>(consumers_.size()) >= options_.max_consumers) {
        return absl::ResourceExhaustedError(absl::StrCat(
            "consumer_id ", consumer_key, " refused: the task's window remembers its maximum of ",
            options_.max_consumers, " consumers"));
      }
      it = consumers_.emplace(consumer_key, Consumer{}).first;
      it->second.trainer = trainer;
      it->second.received = received_steps;
    } else {
      Consumer& c = it->second;
      if (c.trainer != trainer) {
        return absl::InvalidArgumentError(absl::StrCat(
            "consumer_id ", consumer_key, " already reads for trainer ",
            QuoteTrainerId(trainers_[static_cast<size_t>(c.trainer)].id)));
      }
      // What it received is acknowledged; the rest of what it was handed goes back, in order,
      // to the front of its trainer's queue.
      AcknowledgeLocked(&c, received_steps);
      Trainer& t = trainers_[static_cast<size_t>(trainer)];
      t.returned.insert(t.returned.begin(), c.unacked.begin(), c.unacked.end());
      c.unacked.clear();
      c.unacked_bytes = 0;
      if (c.reader != 0) {  // its older stream is superseded
        if (readers_.erase(c.reader) > 0) ReaderGoneLocked(trainer);
        if (auto w = waiters_.find(c.reader); w != waiters_.end()) {
          run.wake.push_back(std::move(w->second.ready));
          waiters_.erase(w);
        }
      }
      WakeAllLocked(&run.wake);  // the trainer's streams may take what came back
    }
    it->second.reader = id;
    it->second.left_at = absl::InfiniteFuture();
  }
  readers_[id] = Reader{trainer, consumer_key};
  Trainer& joined = trainers_[static_cast<size_t>(trainer)];
  ++joined.open_readers;
  joined.left_at = absl::InfiniteFuture();
  // A trainer that had no reader may now take over the steps of its dead consumers.
  if (joined.open_readers == 1) next_dead_due_ = absl::InfinitePast();
  return id;
}

void CrossTrainerWindow::Acknowledge(int64_t reader, int64_t received_steps) {
  absl::MutexLock lock(&mu_);
  if (Consumer* c = ConsumerLocked(reader)) AcknowledgeLocked(c, received_steps);
}

void CrossTrainerWindow::Release(int64_t reader) {
  RunWakeups run;
  absl::MutexLock lock(&mu_);
  auto r = readers_.find(reader);
  if (r == readers_.end()) return;
  const uint64_t key = r->second.key;
  ReaderGoneLocked(r->second.trainer);
  const Trainer& t = trainers_[static_cast<size_t>(r->second.trainer)];
  if (t.joined && t.open_readers == 0 && options_.drop_departed_after != absl::InfiniteDuration()) {
    // The trainer departed: a producer already waiting for room learns when it falls due to be
    // dropped (TryPush's retry time, Push's timed wait), or it would wait for reads that may
    // never come.
    WakeProducerLocked(&run.wake);
    cv_.SignalAll();
  }
  readers_.erase(r);
  waiters_.erase(reader);
  if (key == 0) return;
  auto c = consumers_.find(key);
  if (c == consumers_.end() || c->second.reader != reader) return;
  c->second.reader = 0;
  if (c->second.unacked.empty()) {
    consumers_.erase(c);  // nothing to give back on a return
    return;
  }
  if (options_.drop_departed_after == absl::InfiniteDuration()) return;
  c->second.left_at = options_.now();
  next_dead_due_ = std::min(next_dead_due_, c->second.left_at + options_.drop_departed_after);
}

CrossTrainerWindow::Consumer* CrossTrainerWindow::ConsumerLocked(int64_t reader) {
  return const_cast<Consumer*>(std::as_const(*this).ConsumerLocked(reader));
}

const CrossTrainerWindow::Consumer* CrossTrainerWindow::ConsumerLocked(int64_t reader) const {
  if (reader == 0) return nullptr;
  auto r = readers_.find(reader);
  if (r == readers_.end() || r->second.key == 0) return nullptr;
  auto c = consumers_.find(r->second.key);
  return c == consumers_.end() || c->second.reader != reader ? nullptr : &c->second;
}

bool CrossTrainerWindow::UnackedRoomLocked(const Consumer* c, const StepLimits& limits,
                                           size_t bytes) const {
  if (c == nullptr || c->unacked.empty()) return true;  // one step always goes
  const size_t four = options_.window_bytes > std::numeric_limits<size_t>::max() / 4
                          ? std::numeric_limits<size_t>::max()
                          : 4 * options_.window_bytes;
  const size_t cap = std::min(limits.unacked_bytes, std::max(four, options_.max_unacked_bytes));
  return c->unacked_bytes + bytes <= cap;
}

void CrossTrainerWindow::AcknowledgeLocked(Consumer* c, int64_t received) {
  while (c->received < received && !c->unacked.empty()) {
    c->unacked_bytes -= c->unacked.front()->bytes;
    c->unacked.pop_front();
    ++c->received;
  }
  // A count beyond what it was handed (a consumer new to this worker's task, or a hostile
  // one) moves its base: it is owed nothing below it.
  c->received = std::max(c->received, received);
}

void CrossTrainerWindow::ForgetConsumersLocked(int64_t trainer) {
  for (auto r = readers_.begin(); r != readers_.end();) {
    if (r->second.trainer == trainer) {
      readers_.erase(r++);
    } else {
      ++r;
    }
  }
  for (auto c = consumers_.begin(); c != consumers_.end();) {
    if (c->second.trainer == trainer) {
      consumers_.erase(c++);
    } else {
      ++c;
    }
  }
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
  return Next(trainer, /*reader=*/0, limits, deadline, steps, end, blocked_cost);
}

absl::Status CrossTrainerWindow::Next(int64_t trainer, int64_t reader, const StepLimits& limits,
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
    if (reader != 0 && !readers_.contains(reader)) {
      return absl::CancelledError(absl::StrCat(
          "stream of trainer slot ", trainer, " superseded by a newer one of its consumer"));
    }
    if (!finished_) HandOverDeadConsumersLocked(options_.now(), &run.wake);
    Trainer& t = trainers_[static_cast<size_t>(trainer)];
    Consumer* consumer = ConsumerLocked(reader);
    ApplySkipLocked(&t);
    const int64_t last = first_step_ + static_cast<int64_t>(steps_.size());
    int64_t cursor = t.cursor;
    size_t total = 0;
    size_t returned = 0;  // taken from t.returned
    while (steps->size() < max_steps) {
      const bool again = returned < t.returned.size();
      if (!again && cursor >= last) break;
      const auto& s =
          again ? t.returned[returned] : steps_[static_cast<size_t>(cursor - first_step_)];
      const size_t c = cost(*s);
      if (!UnackedRoomLocked(consumer, limits, s->bytes)) {
        // Its window of unacknowledged steps is full: more after an acknowledgement.
        if (steps->empty() && blocked_cost != nullptr) *blocked_cost = kBlockedOnAcknowledgement;
        if (steps->empty()) return absl::OkStatus();
        break;
      }
      if (steps->empty() && c > limits.first_max) {
        if (blocked_cost != nullptr) *blocked_cost = c;  // waits for credit
        return absl::OkStatus();
      }
      if (!steps->empty() && total + c > limits.max_cost) break;
      total += c;
      steps->push_back(s);
      if (consumer != nullptr) {  // kept until acknowledged
        consumer->unacked.push_back(s);
        consumer->unacked_bytes += s->bytes;
      }
      if (again) {
        ++returned;
      } else {
        ++cursor;
      }
    }
    if (!steps->empty()) {
      t.returned.erase(t.returned.begin(), t.returned.begin() + static_cast<ptrdiff_t>(returned));
      redelivered_ += static_cast<int64_t>(returned);
      t.steps_read += static_cast<int64_t>(steps->size() - returned);
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
    // Also wakes when a dead consumer's steps fall due to be handed over (next_dead_due_ is
    // on options_.now()'s clock: with an injected clock the stream's deadline bounds the wait).
    const absl::Time wake_at =
        options_.now() < next_dead_due_ ? std::min(deadline, absl::Now() + (next_dead_due_ -
                                                                            options_.now()))
                                         : deadline;
    if (cv_.WaitWithDeadline(&mu_, wake_at) && absl::Now() >= deadline) {
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
  s.steps_redelivered = redelivered_;
  s.trainers_dropped = dropped_;
  s.consumers_dead = consumers_dead_;
  s.steps_handed_over = handed_over_;
  s.dropped_trainer_ids.assign(dropped_ids_.begin(), dropped_ids_.end());
  std::vector<int64_t> unacked(trainers_.size(), 0);
  for (const auto& [key, c] : consumers_) {
    unacked[static_cast<size_t>(c.trainer)] += static_cast<int64_t>(c.unacked.size());
  }
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
    ts.returned_steps = static_cast<int64_t>(t.returned.size());
    ts.unacked_steps = unacked[slot];
    ts.open_readers = t.open_readers;
    s.trainers.push_back(std::move(ts));
  }
  return s;
}

bool CrossTrainerWindow::drained() const {
  absl::MutexLock lock(&mu_);
  if (!finished_ || slots_.empty()) return false;
  // A lossless window keeps every step for the trainers it awaits: one that joins after the
  // others read to the end still reads the whole sequence, so the task must outlive them.
  if (options_.lossless && joined_ever_ < options_.expected_trainers) return false;
  for (const auto& [id, slot] : slots_) {
    if (!trainers_[static_cast<size_t>(slot)].ended) return false;
  }
  return true;
}

}  // namespace sluice
