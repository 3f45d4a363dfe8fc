#include "client/input_wait_meter.h"

#include <algorithm>

namespace sluice {

InputWaitMeter::InputWaitMeter(Clock* clock)
    : clock_(clock != nullptr ? clock : Clock::Real()), interval_start_(clock_->Now()) {}

void InputWaitMeter::BeginWait() {
  const absl::Time now = clock_->Now();
  absl::MutexLock lock(&mu_);
  if (!waiting_since_.has_value()) waiting_since_ = now;
  waiting_.store(true);
}

void InputWaitMeter::EndCall(bool got_step) {
  if (got_step) steps_.fetch_add(1, std::memory_order_relaxed);
  if (!waiting_.load()) return;  // no wait under way: nothing to time
  absl::MutexLock lock(&mu_);
  if (waiting_since_.has_value()) {
    waited_ += clock_->Now() - std::max(*waiting_since_, interval_start_);
    waiting_since_.reset();
    waiting_.store(false);
  }
}

void InputWaitMeter::EndWait(bool got_step) {
  const absl::Time now = clock_->Now();
  absl::MutexLock lock(&mu_);
  if (!waiting_since_.has_value()) return;
  waited_ += now - std::max(*waiting_since_, interval_start_);
  waiting_since_.reset();
  waiting_.store(false);
  if (got_step) steps_.fetch_add(1, std::memory_order_relaxed);
}

InputWaitMeter::Report InputWaitMeter::TakeReport() {
  const absl::Time now = clock_->Now();
  absl::MutexLock lock(&mu_);
  absl::Duration waited = waited_;
  if (waiting_since_.has_value()) waited += now - std::max(*waiting_since_, interval_start_);
  const absl::Duration interval = std::max(now - interval_start_, absl::ZeroDuration());
  Report r;
  r.interval_us = absl::ToInt64Microseconds(interval);
  r.wait_us = std::min(absl::ToInt64Microseconds(waited), r.interval_us);
  r.steps = steps_.exchange(0);
  interval_start_ = now;
  waited_ = absl::ZeroDuration();
  return r;
}

}  // namespace sluice
