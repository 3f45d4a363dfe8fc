// FrameReadAhead: how a StreamSteps call that handles its frames on a thread of its own (a call
// with a bulk data socket, client/task_stream_call.h) reads ahead: each frame a read brings is
// handed to that thread in the order the reads were made, at most kFramesAhead frames wait for
// the thread, and at most one read is in flight.
//
// Why the order is guarded here (docs/SERVICE.md "Bulk data channel", "Why it is safe on by
// default"): the bulk socket carries the frames' tensor bytes back to back, in the order the
// worker sent the frames, with no framing of its own, so the thread must receive them for the
// frames in that order. A read completes on one of gRPC's threads (OnReadDone), while the
// thread may start the next read as soon as it has handled a frame. The frame a read brought is
// therefore handed over in the same critical section that records that no read is in flight:
// until that is recorded, nobody starts the next read, so the next frame cannot reach the
// thread first. (Handing it over after leaving the critical section let the thread start the
// next read meanwhile and its frame overtake this one: the thread then received one frame's
// socket bytes for the other's header, 64-byte-aligned tensors read from the padding between
// them, and a trainer of a shared job received a step of zeros.)
//
// Usage (TaskStreamCall): OnReadDone(ok, handle) from gRPC's read reaction, where `handle`
// handles that frame on the thread (or the end of reading, !ok) and calls FrameHandled() under
// the call's lock when done; ReadAhead() under the lock when reading may go on.
//
// Thread safety: OnReadDone takes *mu (the call's lock, borrowed); FrameHandled and ReadAhead
// require it.
#ifndef SLUICE_CLIENT_FRAME_READ_AHEAD_H_
#define SLUICE_CLIENT_FRAME_READ_AHEAD_H_

#include <functional>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace sluice {

class FrameReadAhead {
 public:
  // Frames handed over and not yet handled at most: the header of frame N+1 is read while
  // N's bytes are received (what is read ahead is what the worker sent within its credit).
  static constexpr int kFramesAhead = 2;

  struct Env {
    // The call's lock (borrowed for the object's life).
    absl::Mutex* mu = nullptr;
    // Starts the call's next read (gRPC's StartRead); called with or without *mu held.
    std::function<void()> start_read;
    // Queues `task` on the call's thread, after the tasks queued before it; called under *mu.
    std::function<void(std::function<void()>)> hand_over;
    // Whether reading is over (an error, the end): no more reads then. Called under *mu.
    std::function<bool()> reading_finished;
    // Tests only: runs in OnReadDone once the frame is handed over and *mu released, before
    // the next read starts (where a test lets the thread race the read reaction).
    std::function<void()> TEST_after_hand_over;
  };

  explicit FrameReadAhead(Env env) : env_(std::move(env)) {}

  // A read completed (`ok`: it brought a frame; !ok: the stream ended): hands `handle` over,
  // then starts the next read unless reading is over or kFramesAhead frames wait.
  void OnReadDone(bool ok, std::function<void()> handle) ABSL_LOCKS_EXCLUDED(*env_.mu);
  // The thread is done with a frame handed over (handled or dropped): starts the next read if
  // there is room now.
  void FrameHandled() ABSL_EXCLUSIVE_LOCKS_REQUIRED(*env_.mu);
  // Starts the next read unless one is in flight, reading is over, or kFramesAhead frames wait.
  void ReadAhead() ABSL_EXCLUSIVE_LOCKS_REQUIRED(*env_.mu);

 private:
  const Env env_;
  int frames_ahead_ ABSL_GUARDED_BY(*env_.mu) = 0;
  bool read_in_flight_ ABSL_GUARDED_BY(*env_.mu) = false;
};

}  // namespace sluice

#endif  // SLUICE_CLIENT_FRAME_READ_AHEAD_H_
