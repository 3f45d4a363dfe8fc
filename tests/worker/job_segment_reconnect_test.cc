// Frames lost in broken calls of a shared job's co-located consumer (core/rpc/job_shm_segment.h,
// docs/SERVICE.md "One copy per step"): a real GrpcWorkerService on port 0 serves a task of a
// job shared across trainers, and a raw consumer of the StreamSteps call maps the task's job
// segment and reads its steps as views of it. Its calls break again and again with frames in
// flight (sent, never read); each new call says how many steps it received. At the end the
// worker holds for that consumer process exactly the regions it still views, every step arrived
// exactly once, and once it drops its views nothing is held. A hostile start_step is refused and
// frees nothing. Synchronization on the segment's accounting, never on time.
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/rpc/job_shm_reader.h"
#include "core/rpc/job_shm_segment.h"
#include "core/rpc/shm_segment.h"
#include "core/rpc/step_frame.h"
#include "gtest/gtest.h"
#include "tests/worker/gated_stream_task.h"
#include "tests/worker/scalar_steps_task.h"
#include "tests/worker/shm_handover_test_util.h"

namespace sluice {
namespace {

constexpr int64_t kSteps = 60;
constexpr int64_t kCost = kScalarStepCost;
constexpr uint64_t kConsumerId = 77;
const char kKey[] = "consumer-process-key";

// A task of a job shared across trainers, and its job segment's accounting.
class SharedTask : public ScalarStepsTask {
 public:
  SharedTask() : ScalarStepsTask(kSteps, /*cross_trainer=*/true) {}
  std::shared_ptr<JobShmSegment> segment() { return runner()->ExistingJobSegment(); }
  // Until the worker holds `n` frames for the consumer process.
  bool WaitHeld(size_t n) {
    return WaitFor([&] { return segment() != nullptr && segment()->held_by(kKey) == n; });
  }
};

// One StreamSteps call of the consumer (trainer "A", consumer_id kConsumerId, process kKey) that
// has received `received` steps, with credit for `credit` bytes (in a window of 1000 steps, so
// that only the credit bounds what is sent). Its first frame offers the segments: it declines
// the stream's ring and takes the job segment (mapping it on the first call; `*reader`
// afterwards).
class Call {
 public:
  Call(const std::string& address, int64_t received, int64_t credit,
       std::shared_ptr<JobShmReader>* reader)
      : call_(address, Request(received, credit), kRawCallStuck), reader_(reader) {
    if (*reader_ != nullptr) decoder_.set_job_payload(reader_->get());
  }
  // Reads the next frame into *frames; false when the call ended. Answers the offer on the
  // first frame.
  bool Next(std::vector<StepFrame>* frames) {
    grpc::ByteBuffer bb;
    StepFrame frame;
    if (!call_.ReadFrame(&decoder_, &bb, &frame)) return false;
    if (const proto::ShmAccept* accept = decoder_.last_shm_accept()) {
      EXPECT_TRUE(accept->has_job_segment());
      if (*reader_ == nullptr) {
        const proto::JobShmAccept& job = accept->job_segment();
        *reader_ = std::make_shared<JobShmReader>(
            TakeHandedSegment(accept->socket_name(), job.token(), job.segment_bytes()),
            job.segment_id());
      }
      decoder_.set_job_payload(reader_->get());
      proto::ConsumerMessage m;
      m.mutable_credit()->set_shm_declined(true);
      m.mutable_credit()->set_job_shm_mapped(true);
      EXPECT_TRUE(call_.Send(m));
    }
    frames->push_back(std::move(frame));
    return true;
  }
  // Acknowledges `received` steps and reports the regions released, with `bytes` more credit;
  // returns how many regions it released.
  size_t Grant(int64_t bytes, int64_t received) {
    proto::ConsumerMessage m = CreditMessage(bytes, received);
    std::vector<uint64_t> released;
    if (*reader_ != nullptr) (*reader_)->TakeReleased(4096, &released);
    for (uint64_t offset : released) m.mutable_credit()->add_job_shm_released(offset);
    EXPECT_TRUE(call_.Send(m));
    return released.size();
  }
  void HalfClose() { call_.HalfClose(); }
  grpc::Status Finish() { return call_.Finish(); }

 private:
  static proto::StreamRequest Request(int64_t received, int64_t credit) {
    proto::StreamRequest r = ScalarStepsRequest(kConsumerId, received, credit, 1000 * kCost, "A");
    r.mutable_shm_offer()->set_boot_id(HostBootId());
    r.mutable_shm_offer()->set_consumer_key(kKey);
    return r;
  }

  RawStreamStepsCall call_;
  std::shared_ptr<JobShmReader>* reader_;
  StepFrameDecoder decoder_{nullptr, nullptr};
};

// The worker: shared memory on, frames sent at once.
struct Served {
  explicit Served(SharedTask* task) : server(task, Options()), address(server.address()) {}
  static WorkerServiceOptions Options() {
    WorkerServiceOptions options = ImmediateFrames(WorkerServiceOptions().max_frame_steps);
    options.shared_memory = true;
    return options;
  }
  TestStreamServer server;
  const std::string address;
};

int64_t Value(const StepFrame& frame) { return frame.steps[0].pieces[0][0].data<int64_t>()[0]; }

TEST(JobSegmentReconnectTest, FramesLostInBrokenCallsHoldNothingOnceTheConsumerCallsAgain) {
  if (HostBootId().empty()) GTEST_SKIP() << "no boot id: shared memory is off on this host";
  SharedTask task;
  Served served(&task);
  std::shared_ptr<JobShmReader> reader;
  std::vector<StepFrame> kept;  // frames whose tensors (views of the segment) the trainer keeps
  std::vector<int64_t> got;     // every step received, in order
  const int64_t freed = ProcessJobShmCounts().lost_frames_freed;
  constexpr int kBreaks = 5;
  int placed_frames_lost = 0;
  for (int call = 0; call < kBreaks; ++call) {
    // Credit for one step (the frame carrying the offer), then for 6: the call reads 2 of those
    // frames, keeps one of them, and breaks with the others sent and never read.
    Call c(served.address, static_cast<int64_t>(got.size()), kCost, &reader);
    std::vector<StepFrame> frames;
    ASSERT_TRUE(c.Next(&frames));  // the offer (and its inline steps)
    for (const StepFrame& f : frames) AppendScalars(f, &got);
    frames.clear();
    // The worker sends frames naming regions up to the credit: wait until it has placed them,
    // then read two.
    ASSERT_EQ(got.size(), static_cast<size_t>(3 * call + 1));
    const size_t held_before = task.segment()->held_by(kKey);
    const size_t released = c.Grant(6 * kCost, static_cast<int64_t>(got.size()));
    ASSERT_TRUE(task.WaitHeld(held_before - released + 6)) << task.segment()->held_by(kKey);
    for (int i = 0; i < 2; ++i) ASSERT_TRUE(c.Next(&frames));
    for (StepFrame& f : frames) {
      ASSERT_EQ(f.steps.size(), 1u);
      got.push_back(Value(f));
    }
    kept.push_back(std::move(frames[0]));  // frames[1] is dropped: released on a later grant
    placed_frames_lost += 4;
  }
  // The last call reads to the end, acknowledging and releasing as it goes.
  {
    Call c(served.address, static_cast<int64_t>(got.size()), 1000 * kCost, &reader);
    std::vector<StepFrame> frames;
    bool end = false;
    while (!end && c.Next(&frames)) {
      AppendScalars(frames.back(), &got);
      end = frames.back().end_of_task;
      frames.clear();  // the trainer drops its tensors
      c.Grant(0, static_cast<int64_t>(got.size()));
    }
    ASSERT_TRUE(end);
    c.Grant(0, static_cast<int64_t>(got.size()));  // the last releases
    c.HalfClose();
    EXPECT_TRUE(c.Finish().ok());
  }
  std::vector<int64_t> all;
  for (int64_t i = 0; i < kSteps; ++i) all.push_back(i);
  EXPECT_EQ(got, all) << "every step exactly once";
  const std::shared_ptr<JobShmSegment> segment = task.segment();
  ASSERT_NE(segment, nullptr);
  EXPECT_EQ(segment->lost_frames_freed(), placed_frames_lost);
  EXPECT_EQ(ProcessJobShmCounts().lost_frames_freed - freed, placed_frames_lost);
  // Held for the process: exactly the regions it still views.
  EXPECT_EQ(reader->held(), kept.size());
  EXPECT_EQ(segment->held_by(kKey), kept.size());
  for (size_t i = 0; i < kept.size(); ++i) {
    EXPECT_EQ(Value(kept[i]), got[static_cast<size_t>(1 + 2 * i + i)]) << "kept views intact";
  }
  // It drops them and says so on a new call's grant: nothing is held.
  kept.clear();
  {
    Call c(served.address, kSteps, 1000 * kCost, &reader);
    std::vector<StepFrame> frames;
    ASSERT_TRUE(c.Next(&frames));
    ASSERT_TRUE(frames.back().end_of_task);
    c.Grant(0, kSteps);
    c.HalfClose();
    EXPECT_TRUE(c.Finish().ok());
  }
  EXPECT_EQ(segment->held_by(kKey), 0u);
}

// A new call whose start_step lies before what the consumer acknowledged, or beyond what it was
// sent, is INVALID_ARGUMENT naming it, and the regions the process holds stay held.
TEST(JobSegmentReconnectTest, AHostileStartStepIsRefusedAndFreesNothing) {
  if (HostBootId().empty()) GTEST_SKIP() << "no boot id: shared memory is off on this host";
  SharedTask task;
  Served served(&task);
  std::shared_ptr<JobShmReader> reader;
  std::vector<StepFrame> frames;
  int64_t received = 0;
  {
    Call c(served.address, 0, kCost, &reader);
    ASSERT_TRUE(c.Next(&frames));
    for (const StepFrame& f : frames) received += static_cast<int64_t>(f.steps.size());
    ASSERT_EQ(received, 1);
    c.Grant(6 * kCost, received);
    ASSERT_TRUE(task.WaitHeld(6));
    for (int i = 0; i < 2; ++i) ASSERT_TRUE(c.Next(&frames));
    received += 2;
    c.Grant(0, received);  // acknowledged: `received`; sent: received + 4
    ASSERT_TRUE(task.WaitTrainerUnacked("A", 4));
  }
  for (int64_t bad : {received - 1, received + 5, std::numeric_limits<int64_t>::max()}) {
    Call c(served.address, bad, 6 * kCost, &reader);
    std::vector<StepFrame> none;
    if (c.Next(&none)) {
      ADD_FAILURE() << "start_step " << bad << " was served";
      continue;  // the call is cancelled
    }
    const grpc::Status s = c.Finish();
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << bad;
    EXPECT_NE(s.error_message().find(absl::StrCat("start_step ", bad)), std::string::npos)
        << s.error_message();
    EXPECT_EQ(task.segment()->held_by(kKey), 6u) << bad;
  }
  EXPECT_EQ(task.segment()->lost_frames_freed(), 0);
}

}  // namespace
}  // namespace sluice
