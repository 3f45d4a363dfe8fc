// InputWaitMeter: how long a trainer waits for input, for the coordinator's autoscaling
// (docs/AUTOSCALING.md, "Measurements"). The step source brackets each GetNext with
// BeginWait/EndWait; each ClientHeartbeat takes a report of the time waited, the steps
// returned and the interval since the previous report. A wait still under way when a report is
// taken counts up to that moment (a trainer starved for a whole interval reports it then, not
// when its step finally comes).
//
//   meter.BeginWait();  ... blocks for the step ...  meter.EndWait(/*got_step=*/true);
//   or, timing only the calls that block: BeginWait() just before blocking, EndCall() always.
//   InputWaitMeter::Report r = meter.TakeReport();   // in the heartbeat
//
// Thread safety: thread-safe (the trainer's thread waits, the monitor's thread reports).
#ifndef SLUICE_CLIENT_INPUT_WAIT_METER_H_
#define SLUICE_CLIENT_INPUT_WAIT_METER_H_

#include <atomic>
#include <cstdint>
#include <optional>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "core/util/clock.h"

namespace sluice {

class InputWaitMeter {
 public:
  // `clock` is borrowed (outlives the meter); nullptr: the real clock. The first report's
  // interval starts now.
  explicit InputWaitMeter(Clock* clock = nullptr);

  // The caller's wait starts now; a wait already under way keeps its start.
  void BeginWait();
  // Ends the wait BeginWait started (nothing without one); counts a step when `got_step`.
  void EndWait(bool got_step);
  // Ends a call that may have waited: the wait BeginWait started, if any, ends now, and a step
  // counts when `got_step`. A call that found its step ready calls no BeginWait and pays no
  // clock read here (at 1 KiB steps the two reads per step of BeginWait/EndWait were ~15% of
  // the trainer's CPU).
  void EndCall(bool got_step);

  struct Report {
    int64_t wait_us = 0;
    int64_t steps = 0;
    int64_t interval_us = 0;
  };
  // Since the previous report (or the meter's creation): the time waited (at most the
  // interval), the steps and the interval's length. Starts the next interval.
  Report TakeReport();

 private:
  Clock* const clock_;
  absl::Mutex mu_;
  absl::Time interval_start_ ABSL_GUARDED_BY(mu_);
  std::optional<absl::Time> waiting_since_ ABSL_GUARDED_BY(mu_);
  // waiting_since_.has_value(), written with it: EndCall without a wait (a step that was
  // ready) only counts the step, with no lock (the lock per step was ~6% of the trainer's CPU
  // at 1 KiB steps).
  std::atomic<bool> waiting_{false};
  absl::Duration waited_ ABSL_GUARDED_BY(mu_);
  std::atomic<int64_t> steps_{0};
};

}  // namespace sluice

#endif  // SLUICE_CLIENT_INPUT_WAIT_METER_H_
