#include "client/frame_read_ahead.h"

#include <utility>

namespace sluice {

void FrameReadAhead::OnReadDone(bool ok, std::function<void()> handle) {
  bool read_next = false;
  {
    absl::MutexLock lock(env_.mu);
    read_in_flight_ = false;
    ++frames_ahead_;
    read_next = ok && !env_.reading_finished() && frames_ahead_ < kFramesAhead;
    read_in_flight_ = read_next;
    // Handed over before the lock goes: once it does, the thread may start the next read
    // (FrameHandled), and that read's frame must queue behind this one.
    env_.hand_over(std::move(handle));
  }
  if (env_.TEST_after_hand_over) env_.TEST_after_hand_over();
  if (read_next) env_.start_read();
}

void FrameReadAhead::FrameHandled() {
  --frames_ahead_;
  ReadAhead();
}

void FrameReadAhead::ReadAhead() {
  if (read_in_flight_ || env_.reading_finished() || frames_ahead_ >= kFramesAhead) return;
  read_in_flight_ = true;
  env_.start_read();
}

}  // namespace sluice
