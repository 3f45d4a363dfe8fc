// FrameReadAhead (client/frame_read_ahead.h): the frames a call's reads bring reach its receive
// thread in the order read, whatever the interleaving of gRPC's read reactions and the thread;
// one read in flight at most, and no read while kFramesAhead frames wait. The fake gRPC here
// completes a read when the test says so, on a thread of its own (as gRPC's callback threads
// do); the receive thread is the real BulkReceiveThread.
#include "client/frame_read_ahead.h"

#include <algorithm>
#include <functional>
#include <map>
#include <memory>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "core/rpc/bulk_channel.h"
#include "gtest/gtest.h"

namespace sluice {
namespace {

// What a wait below waits out is another thread of this test taking a lock and running a few
// lines: far less than this. One that runs out fails the test instead of hanging it.
constexpr absl::Duration kWait = absl::Seconds(30);

// A call: read k brings frame k; the receive thread records the frames in the order it handles
// them, each after its gate (if the test set one) opens.
class FakeCall {
 public:
  explicit FakeCall(std::function<void()> after_hand_over = nullptr) {
    read_ahead_ = std::make_unique<FrameReadAhead>(FrameReadAhead::Env{
        .mu = &mu_,
        .start_read = [this] { ReadStarted(); },
        .hand_over = [this](std::function<void()> task) { thread_->Run(std::move(task)); },
        .reading_finished = [this]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return finished_; },
        .TEST_after_hand_over = std::move(after_hand_over)});
  }
  ~FakeCall() { thread_.reset(); }  // runs what was handed over (every gate is open by then)

  // Frame k waits on the thread until Open(k).
  void Gate(int k) { gates_[k] = std::make_unique<absl::Notification>(); }
  void Open(int k) { gates_.at(k)->Notify(); }

  void Begin() {
    absl::MutexLock lock(&mu_);
    read_ahead_->ReadAhead();
  }
  // gRPC completing read k (which must have been started) on a thread of its own; returns when
  // its reaction returned.
  void CompleteRead(int k) {
    ASSERT_TRUE(AwaitReadsStarted(k + 1)) << "read " << k << " was never started";
    {
      absl::MutexLock lock(&reads_mu_);
      --in_flight_;
    }
    std::thread reaction([this, k] { read_ahead_->OnReadDone(true, [this, k] { Handle(k); }); });
    reaction.join();
  }
  bool AwaitReadsStarted(int n) {
    absl::MutexLock lock(&reads_mu_);
    reads_wanted_ = n;
    return reads_mu_.AwaitWithTimeout(absl::Condition(this, &FakeCall::EnoughReads), kWait);
  }
  bool AwaitHandled(size_t n) {
    absl::MutexLock lock(&mu_);
    handled_wanted_ = n;
    return mu_.AwaitWithTimeout(absl::Condition(this, &FakeCall::EnoughHandled), kWait);
  }
  void FinishReading() {
    absl::MutexLock lock(&mu_);
    finished_ = true;
  }
  std::vector<int> handled() {
    absl::MutexLock lock(&mu_);
    return handled_;
  }
  int reads_started() {
    absl::MutexLock lock(&reads_mu_);
    return reads_started_;
  }
  int max_reads_in_flight() {
    absl::MutexLock lock(&reads_mu_);
    return max_in_flight_;
  }

 private:
  bool EnoughReads() const ABSL_NO_THREAD_SAFETY_ANALYSIS {
    return reads_started_ >= reads_wanted_;
  }
  bool EnoughHandled() const ABSL_NO_THREAD_SAFETY_ANALYSIS {
    return handled_.size() >= handled_wanted_;
  }

  // gRPC's StartRead, called with or without mu_ held (FrameHandled, ReadAhead: held), hence
  // the reads' own lock.
  void ReadStarted() {
    absl::MutexLock lock(&reads_mu_);
    ++reads_started_;
    max_in_flight_ = std::max(max_in_flight_, ++in_flight_);
  }

  // On the receive thread.
  void Handle(int k) {
    auto gate = gates_.find(k);
    if (gate != gates_.end()) {
      EXPECT_TRUE(gate->second->WaitForNotificationWithTimeout(kWait)) << "frame " << k;
    }
    absl::MutexLock lock(&mu_);
    handled_.push_back(k);
    read_ahead_->FrameHandled();
  }

  absl::Mutex mu_;
  std::vector<int> handled_ ABSL_GUARDED_BY(mu_);
  size_t handled_wanted_ ABSL_GUARDED_BY(mu_) = 0;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  absl::Mutex reads_mu_;
  int reads_started_ ABSL_GUARDED_BY(reads_mu_) = 0;
  int reads_wanted_ ABSL_GUARDED_BY(reads_mu_) = 0;
  int in_flight_ ABSL_GUARDED_BY(reads_mu_) = 0;
  int max_in_flight_ ABSL_GUARDED_BY(reads_mu_) = 0;
  std::map<int, std::unique_ptr<absl::Notification>> gates_;  // set before the frames come
  std::unique_ptr<FrameReadAhead> read_ahead_;
  std::unique_ptr<BulkReceiveThread> thread_ = *BulkReceiveThread::Create("a test stream");
};

// The interleaving that gave a trainer a step of zeros with the bulk data channel on: frame 1's
// read reaction is between its bookkeeping and the next read when the thread, done with frame
// 0, starts read 2, and read 2's frame comes at once on another gRPC thread. Frame 1 must still
// reach the thread first (its socket bytes come first).
TEST(FrameReadAheadTest, AFrameReadLaterNeverOvertakesOneWhoseReactionIsStillRunning) {
  std::unique_ptr<FakeCall> call;
  int reactions = 0;
  call = std::make_unique<FakeCall>([&] {
    if (++reactions != 2) return;  // frame 1's reaction (frame 0's is the first)
    call->Open(0);                 // the thread finishes frame 0 and starts read 2 ...
    call->CompleteRead(2);         // ... whose frame comes at once
  });
  call->Gate(0);  // frame 0 keeps the thread busy: two frames wait, no read ahead
  call->Begin();
  call->CompleteRead(0);
  call->CompleteRead(1);
  ASSERT_TRUE(call->AwaitHandled(3));
  EXPECT_EQ(call->handled(), (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(call->max_reads_in_flight(), 1);
}

TEST(FrameReadAheadTest, NoReadWhileTwoFramesWaitAndNoneOnceReadingIsOver) {
  FakeCall call;
  call.Gate(0);
  call.Gate(1);
  call.Begin();
  call.CompleteRead(0);  // frame 0 waits on the thread: read 1 starts
  call.CompleteRead(1);  // two frames wait: no read 2 until the thread is done with one
  EXPECT_EQ(call.reads_started(), 2);
  call.Open(0);
  ASSERT_TRUE(call.AwaitHandled(1));
  ASSERT_TRUE(call.AwaitReadsStarted(3));
  EXPECT_EQ(call.reads_started(), 3);
  call.FinishReading();  // an error or the end: frame 1 is the last one read
  call.Open(1);
  ASSERT_TRUE(call.AwaitHandled(2));
  call.CompleteRead(2);  // the read in flight ends (the stream ended): nothing more starts
  ASSERT_TRUE(call.AwaitHandled(3));
  EXPECT_EQ(call.reads_started(), 3);
  EXPECT_EQ(call.handled(), (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(call.max_reads_in_flight(), 1);
}

}  // namespace
}  // namespace sluice
