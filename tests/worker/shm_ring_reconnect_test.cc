// Frames lost in broken calls of a co-located consumer's own shared-memory ring
// (core/rpc/shm_ring.h, docs/SERVICE.md "Shared memory"): a real GrpcWorkerService on port 0
// serves a task of one consumer, and a raw consumer of the StreamSteps call maps each call's
// ring and reads its steps as views of it. Its calls break again and again with frames in
// flight (written into the ring, never read); each new call says how many steps it received.
// A lost frame holds no ring room after the reconnect: every call's segment is freed on the
// worker (its memory back in the budget) once the call broke, before its steps are delivered
// again, while the consumer still views some of them; every step arrives exactly once.
// Synchronization on the process's ring counts, never on time.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/data/memory_budget.h"
#include "core/rpc/shm_ring.h"
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
constexpr uint64_t kConsumerId = 78;

// One StreamSteps call of the consumer that has received `received` steps, with credit for
// `credit` bytes (in a window of 1000 steps). Its first frame offers a segment: it maps it and
// reads the ring from then on.
class Call {
 public:
  Call(const std::string& address, int64_t received, int64_t credit)
      : call_(address, Request(received, credit), kRawCallStuck) {}
  // Reads the next frame into *frames; false when the call ended. Maps the segment offered.
  bool Next(std::vector<StepFrame>* frames) {
    grpc::ByteBuffer bb;
    StepFrame frame;
    if (!call_.ReadFrame(&decoder_, &bb, &frame)) return false;
    if (const proto::ShmAccept* accept = decoder_.last_shm_accept()) {
      ring_ = std::make_shared<ShmRingReader>(
          TakeHandedSegment(accept->socket_name(), accept->token(), accept->segment_bytes()));
      decoder_.set_shared_payload(ring_.get());
      proto::ConsumerMessage m;
      m.mutable_credit()->set_shm_ready(true);
      EXPECT_TRUE(call_.Send(m));
    }
    frames->push_back(std::move(frame));
    return true;
  }
  // Acknowledges `received` steps and releases the ring up to what it no longer views, with
  // `bytes` more credit.
  void Grant(int64_t bytes, int64_t received) {
    proto::ConsumerMessage m = CreditMessage(bytes, received);
    if (ring_ != nullptr) m.mutable_credit()->set_shm_released(ring_->released());
    EXPECT_TRUE(call_.Send(m));
  }
  void HalfClose() { call_.HalfClose(); }
  grpc::Status Finish() { return call_.Finish(); }

 private:
  static proto::StreamRequest Request(int64_t received, int64_t credit) {
    proto::StreamRequest r = ScalarStepsRequest(kConsumerId, received, credit, 1000 * kCost);
    r.mutable_shm_offer()->set_boot_id(HostBootId());
    r.mutable_shm_offer()->set_consumer_key("ring-consumer-process");
    return r;
  }

  RawStreamStepsCall call_;
  std::shared_ptr<ShmRingReader> ring_;
  StepFrameDecoder decoder_{nullptr, nullptr};
};

TEST(ShmRingReconnectTest, FramesLostInBrokenCallsHoldNoRingRoomAfterTheReconnect) {
  if (HostBootId().empty()) GTEST_SKIP() << "no boot id: shared memory is off on this host";
  ScalarStepsTask task(kSteps, /*cross_trainer=*/false);
  WorkerServiceOptions options = ImmediateFrames(/*max_frame_steps=*/1);
  options.shared_memory = true;
  options.shm_pool_bytes = 0;  // no segment kept between streams: each call's goes or stays
  TestStreamServer served(&task, options);
  ASSERT_TRUE(task.WaitQueued(kSteps));
  const int64_t charged_before = ProcessMemoryBudget().in_use();
  const int64_t writers_before = ProcessShmRingCounts().writers_alive;
  std::vector<StepFrame> kept;  // views of the earlier calls' rings the trainer keeps
  std::vector<int64_t> got;
  constexpr int kBreaks = 5;
  for (int call = 0; call < kBreaks; ++call) {
    {
      // Credit for one step (the frame carrying the offer), then for 6 in the ring: the call
      // reads 2 of those, keeps one, and breaks with the other 4 written and never read.
      Call c(served.address(), static_cast<int64_t>(got.size()), kCost);
      std::vector<StepFrame> frames;
      ASSERT_TRUE(c.Next(&frames));
      AppendScalars(frames[0], &got);
      frames.clear();
      const int64_t written = ProcessShmRingCounts().frames_written;
      c.Grant(6 * kCost, static_cast<int64_t>(got.size()));
      ASSERT_TRUE(ScalarStepsTask::WaitFor(
          [&] { return ProcessShmRingCounts().frames_written - written >= 6; }));
      for (int i = 0; i < 2; ++i) ASSERT_TRUE(c.Next(&frames));
      for (const StepFrame& f : frames) AppendScalars(f, &got);
      kept.push_back(std::move(frames[0]));
    }
    // The call broke with 4 frames in its ring never read, while the trainer views a step of
    // it: the worker's side of the call ends on its own time (gRPC tells it of the cancel
    // asynchronously), and with it its ring; the lost frames do not keep it.
    ASSERT_TRUE(ScalarStepsTask::WaitFor(
        [&] { return ProcessShmRingCounts().writers_alive == writers_before; }))
        << "call " << call << "'s ring still lives on the worker after the call broke";
  }
  {
    Call c(served.address(), static_cast<int64_t>(got.size()), 1000 * kCost);
    std::vector<StepFrame> frames;
    bool end = false;
    while (!end && c.Next(&frames)) {
      AppendScalars(frames.back(), &got);
      end = frames.back().end_of_task;
      frames.clear();
      c.Grant(0, static_cast<int64_t>(got.size()));
      // Only this call's ring lives on the worker: the broken calls' went with their streams,
      // and the steps they placed (sent again on this call) were copied out of them.
      EXPECT_LE(ProcessShmRingCounts().writers_alive - writers_before, 1);
    }
    ASSERT_TRUE(end);
    c.HalfClose();
    EXPECT_TRUE(c.Finish().ok());
  }
  std::vector<int64_t> all;
  for (int64_t i = 0; i < kSteps; ++i) all.push_back(i);
  EXPECT_EQ(got, all) << "every step exactly once";
  // The trainer still views a step of each broken call's ring, yet the worker holds none of
  // those segments: their memory is back in the budget (each was at least 8 MiB).
  ASSERT_EQ(kept.size(), static_cast<size_t>(kBreaks));
  EXPECT_TRUE(ScalarStepsTask::WaitFor([&] {
    return ProcessShmRingCounts().writers_alive == writers_before &&
           ProcessMemoryBudget().in_use() - charged_before < (int64_t{1} << 20);
  })) << "charged " << ProcessMemoryBudget().in_use() - charged_before << " bytes more, "
      << ProcessShmRingCounts().writers_alive - writers_before << " rings alive";
  for (size_t i = 0; i < kept.size(); ++i) {
    std::vector<int64_t> value;
    AppendScalars(kept[i], &value);
    EXPECT_EQ(value, std::vector<int64_t>{got[3 * i + 1]}) << "kept views intact";
  }
}

}  // namespace
}  // namespace sluice
