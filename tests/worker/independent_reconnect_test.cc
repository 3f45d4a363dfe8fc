// Independent reads across a broken call (docs/SERVICE.md, "Independent reads"): the worker
// keeps the steps it sent a consumer (by StreamRequest.consumer_id) until the consumer
// acknowledges them, and a new call of the same consumer gets the unacknowledged ones first, so
// a transient break loses and duplicates nothing. A real GrpcWorkerService on port 0, a task of
// 20 scalar steps, raw consumers of the StreamSteps call; synchronization on the step buffer's
// state, never on time.
#include <cstdint>
#include <string>
#include <vector>

#include "core/rpc/step_frame.h"
#include "gtest/gtest.h"
#include "tests/worker/gated_stream_task.h"
#include "tests/worker/scalar_steps_task.h"
#include "worker/cross_trainer_window.h"

namespace sluice {
namespace {

constexpr int64_t kSteps = 20;
constexpr int64_t kCost = kScalarStepCost;

class IndependentTask : public ScalarStepsTask {
 public:
  // `cross_trainer`: a task of a job shared across trainers (its buffer is a window).
  explicit IndependentTask(bool cross_trainer = false) : ScalarStepsTask(kSteps, cross_trainer) {}
};

class Call {
 public:
  // A call of consumer `id` (of trainer `trainer_id` in a shared job) that has received
  // `received` steps, with `credit` bytes.
  Call(const std::string& address, uint64_t id, int64_t received, int64_t credit,
       const std::string& trainer_id = "")
      : call_(address, ScalarStepsRequest(id, received, credit, credit, trainer_id),
              kRawCallStuck) {}
  // Appends the next frame's values; false when the call ended. *end: the frame had the end.
  bool Next(std::vector<int64_t>* values, bool* end) {
    grpc::ByteBuffer bb;
    StepFrame frame;
    if (!call_.ReadFrame(&decoder_, &bb, &frame)) return false;
    AppendScalars(frame, values);
    *end = frame.end_of_task;
    return true;
  }
  void Grant(int64_t bytes, int64_t received) {
    EXPECT_TRUE(call_.Send(CreditMessage(bytes, received)));
  }
  void HalfClose() { call_.HalfClose(); }

 private:
  RawStreamStepsCall call_;
  StepFrameDecoder decoder_{nullptr, nullptr};
};

// A GrpcWorkerService serving `task` on a loopback port 0, frames sent at once (no
// coalescing wait), at most `max_frame_steps` steps each.
struct Served {
  Served(IndependentTask* task, size_t max_frame_steps)
      : server(task, ImmediateFrames(max_frame_steps)), address(server.address()) {}
  TestStreamServer server;
  const std::string address;
};

std::vector<int64_t> Iota(int64_t n) {
  std::vector<int64_t> v;
  for (int64_t i = 0; i < n; ++i) v.push_back(i);
  return v;
}

TEST(IndependentReconnectTest, ABrokenCallLosesAndDuplicatesNothing) {
  IndependentTask task;
  Served served(&task, /*max_frame_steps=*/2);
  const std::string& address = served.address;
  constexpr uint64_t kId = 77;

  std::vector<int64_t> got;
  bool end = false;
  // Every step buffered before the first call, so that its first frame is full (the producer
  // pushes its first step alone, and then a block).
  ASSERT_TRUE(task.WaitQueued(kSteps));
  {
    // Credit for 10 steps: the worker hands out 10 (in frames of 2); the consumer reads only
    // the first frame, then its call breaks (cancelled) with 8 steps sent and never read.
    Call first(address, kId, 0, 10 * kCost);
    ASSERT_TRUE(task.WaitQueued(kSteps - 10));
    ASSERT_TRUE(first.Next(&got, &end));
    ASSERT_EQ(got, (std::vector<int64_t>{0, 1}));
  }
  // Every step is still buffered: the 10 queued and the 10 handed to the consumer.
  EXPECT_EQ(task.buffered_bytes(), kSteps * 8u);
  {
    // The same consumer calls again, having received 2: it gets 2..9 again first, then the rest.
    Call second(address, kId, 2, 100 * kCost);
    while (!end && second.Next(&got, &end)) {
      second.Grant(0, static_cast<int64_t>(got.size()));  // acknowledge as it reads
    }
    EXPECT_TRUE(end);
    second.HalfClose();
  }
  EXPECT_EQ(got, Iota(kSteps));
}

// The same for a trainer of a job shared across trainers (issue 29): the window keeps what it
// handed the broken call, and the trainer's sequence stays gap-free and duplicate-free while
// another trainer reads every step of its own.
TEST(IndependentReconnectTest, ASharedJobsTrainerLosesAndDuplicatesNothingAcrossABrokenCall) {
  IndependentTask task(/*cross_trainer=*/true);
  Served served(&task, /*max_frame_steps=*/2);
  const std::string& address = served.address;
  constexpr uint64_t kId = 77;

  std::vector<int64_t> got;
  bool end = false;
  {
    // Credit for 10 steps: trainer A's consumer is handed 10, reads the first frame, and its
    // call breaks with 8 steps sent and never read.
    Call first(address, kId, 0, 10 * kCost, "A");
    ASSERT_TRUE(task.WaitTrainerRead("A", 10));
    ASSERT_TRUE(first.Next(&got, &end));
    ASSERT_EQ(got, (std::vector<int64_t>{0, 1}));
  }
  // Trainer B reads all of its own meanwhile.
  std::vector<int64_t> got_b;
  bool end_b = false;
  {
    Call b(address, 88, 0, 100 * kCost, "B");
    while (!end_b && b.Next(&got_b, &end_b)) b.Grant(0, static_cast<int64_t>(got_b.size()));
    b.HalfClose();
  }
  EXPECT_EQ(got_b, Iota(kSteps));
  {
    Call second(address, kId, 2, 100 * kCost, "A");
    while (!end && second.Next(&got, &end)) {
      second.Grant(0, static_cast<int64_t>(got.size()));
    }
    EXPECT_TRUE(end);
    second.HalfClose();
  }
  EXPECT_EQ(got, Iota(kSteps));
  const CrossTrainerWindow::Stats s = task.window_stats();
  EXPECT_EQ(s.steps_produced, kSteps);  // produced once for both trainers
  EXPECT_EQ(s.steps_redelivered, 8);
}

// A consumer that acknowledges as it reads lets the worker release the steps: nothing stays
// buffered once it has acknowledged everything.
TEST(IndependentReconnectTest, AcknowledgedStepsAreReleased) {
  IndependentTask task;
  Served served(&task, WorkerServiceOptions().max_frame_steps);
  Call call(served.address, 5, 0, 10 * kCost);
  ASSERT_TRUE(task.WaitQueued(kSteps - 10));
  std::vector<int64_t> got;
  bool end = false;
  while (got.size() < 10 && call.Next(&got, &end)) {
  }
  ASSERT_EQ(got, Iota(10));
  EXPECT_EQ(task.buffered_bytes(), kSteps * 8u);  // none acknowledged yet
  call.Grant(0, 10);
  ScalarStepsTask::WaitFor([&] { return task.buffered_bytes() == (kSteps - 10) * 8u; });
  EXPECT_EQ(task.buffered_bytes(), (kSteps - 10) * 8u);
}

}  // namespace
}  // namespace sluice
