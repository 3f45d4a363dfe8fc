// Opportunistic coalescing on the bulk data channel (worker/step_stream.cc WaitForBulkSender,
// BulkSender::NotifyWhenNoneWaiting; docs/SERVICE.md "Bulk data channel"): while a frame
// waits in the socket's sender behind the one being written, the stream cuts no frame, and
// the steps produced meanwhile go out in one frame (one header, one writev) when the sender
// starts on the waiting one; a stream whose sender has nothing waiting sends each step as it
// comes, never waiting for one that is not there.
// A real gRPC server on port 0 with a task whose producer the test releases step by step, and
// a raw consumer of the StreamSteps call that takes the bulk channel and reads its socket only
// when the test says. Synchronization is on the step buffer's cursor and the producer's count,
// never on time; the producer's bytes say which step they are.
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "core/rpc/bulk_channel.h"
#include "core/rpc/step_frame.h"
#include "gtest/gtest.h"
#include "tests/worker/gated_stream_task.h"
#include "worker/grpc_worker_service.h"

namespace sluice {
namespace {

// Liveness bound only: every wait below is for an event, this long at most.
constexpr absl::Duration kStuck = absl::Seconds(60);
constexpr size_t kStepBytes = size_t{64} << 10;  // >= bulk_min_bytes and coalesce_bytes

// A gated task (gated_stream_task.h) of uint8 steps filled with (step & 0xff), of
// size_of(step) bytes.
class GatedBytesTask : public GatedTask {
 public:
  GatedBytesTask(int64_t total, std::function<size_t(int64_t)> size_of)
      : GatedTask(
            total,
            [size_of = std::move(size_of)](int64_t s, TaskStep* step) {
              const size_t bytes = size_of(s);
              Tensor t = Tensor::Allocate(DType::kUInt8, Shape({static_cast<int64_t>(bytes)}));
              std::memset(t.mutable_data<uint8_t>(), static_cast<int>(s & 0xff), bytes);
              step->num_real_pieces = 1;
              step->pieces = {{std::move(t)}};
              step->bytes = static_cast<int64_t>(bytes);
            },
            kStuck) {}
};

// Coalescing by time is made so long (an hour) that a stream waiting for a step that is not
// there would never send: the consumer's reads would fail at kStuck instead.
WorkerServiceOptions Options() {
  WorkerServiceOptions o;
  o.coalesce_wait = absl::Hours(1);
  return o;
}

// A raw consumer that offers the bulk channel, takes it after the first frame, and reads each
// frame's socket bytes as it decodes the frame (Next), so that a test holds the socket unread
// by not calling Next.
class BulkConsumer {
 public:
  BulkConsumer(const std::string& address, int64_t credit)
      : address_(address), call_(address, Request(credit), kStuck), decoder_(nullptr, nullptr) {}

  // Reads the next frame (its bytes from the socket once it is up): the task steps it held,
  // each checked against its bytes, and whether it ended the task. False when the call ended.
  bool Next(std::vector<int64_t>* steps, bool* end) {
    steps->clear();
    *end = false;
    grpc::ByteBuffer bb;
    StepFrame frame;
    if (!call_.ReadFrame(&decoder_, &bb, &frame)) return false;
    EXPECT_TRUE(frame.status.ok()) << frame.status;
    for (const WireStep& w : frame.steps) {
      steps->push_back(w.task_step);
      const Tensor& t = w.pieces[0][0];
      const uint8_t want = static_cast<uint8_t>(w.task_step & 0xff);
      EXPECT_TRUE(t.byte_size() > 0 && t.data<uint8_t>()[0] == want &&
                  t.data<uint8_t>()[t.byte_size() - 1] == want)
          << "step " << w.task_step << ": bytes of another step";
    }
    *end = frame.end_of_task;
    return true;
  }

  // After the first frame (Next): connects the socket its BulkAccept names and tells the
  // worker it is up. False (with a failure) when there was no offer or the connect failed.
  bool TakeBulkChannel() {
    const proto::BulkAccept* accept = decoder_.last_bulk_accept();
    EXPECT_NE(accept, nullptr) << "the first frame offered no bulk channel";
    if (accept == nullptr) return false;
    absl::StatusOr<std::unique_ptr<BulkReceiver>> r =
        BulkReceiver::Connect(address_, accept->port(), accept->token(), kStuck, kStuck);
    EXPECT_TRUE(r.ok()) << r.status();
    if (!r.ok()) return false;
    receiver_ = *std::move(r);
    decoder_.set_bulk_payload(receiver_.get());
    proto::ConsumerMessage m;
    m.mutable_credit()->set_bytes(0);
    m.mutable_credit()->set_bulk_ready(true);
    return call_.Send(m);
  }

  // Frames whose bytes came over the socket.
  uint64_t bulk_frames() const { return decoder_.stats().bulk_frames; }

 private:
  // The call's first message: `credit`, and the bulk channel offered.
  static proto::StreamRequest Request(int64_t credit) {
    proto::StreamRequest r = GatedTaskRequest(credit);
    r.mutable_bulk_offer()->set_enabled(true);
    return r;
  }

  const std::string address_;
  RawStreamStepsCall call_;
  StepFrameDecoder decoder_;
  std::unique_ptr<BulkReceiver> receiver_;
};

// Reads frames until the end: each frame's steps, in order (an end frame alone adds none).
std::vector<std::vector<int64_t>> ReadToTheEnd(BulkConsumer* consumer) {
  std::vector<std::vector<int64_t>> frames;
  std::vector<int64_t> steps;
  bool end = false;
  while (!end && consumer->Next(&steps, &end)) {
    if (!steps.empty()) frames.push_back(steps);
  }
  EXPECT_TRUE(end) << "the call ended before the end of the task";
  return frames;
}

// The producer runs ahead of the socket: step 1 (32 MiB) fills the socket the consumer does
// not read yet, step 2's frame waits behind it in the sender, and steps 3.., produced one by
// one meanwhile, are cut as frames up to the bulk frame cap (bulk_max_frame_bytes: with 1 MiB,
// 15 steps of 64 KiB and their credit overhead; with 2 MiB, 31: past the frame size on gRPC,
// max_frame_bytes, so the cap is the bulk one) once the sender starts on step 2's, the rest
// when it starts on that one. Without the rule each of them was its own frame (the stream cut
// one whenever a step arrived).
void ExpectStepsProducedWhileTheSocketIsBusyShareFramesUpTo(size_t cap) {
  SCOPED_TRACE(cap);
  const int64_t per_frame = static_cast<int64_t>(cap / (kStepBytes + kStepCreditOverheadBytes));
  const int64_t total = 3 + per_frame + 3;
  GatedBytesTask task(total, [](int64_t s) { return s == 1 ? size_t{32} << 20 : kStepBytes; });
  WorkerServiceOptions options = Options();
  options.bulk_max_frame_bytes = cap;
  TestStreamServer server(&task, options);
  BulkConsumer consumer(server.address(), int64_t{256} << 20);
  task.Release(1);
  std::vector<int64_t> steps;
  bool end = false;
  ASSERT_TRUE(consumer.Next(&steps, &end));  // inline, with the offer
  ASSERT_EQ(steps, std::vector<int64_t>{0});
  ASSERT_TRUE(consumer.TakeBulkChannel());
  const BulkChannelCounts before = ProcessBulkChannelCounts();
  task.Release(1);
  ASSERT_TRUE(task.WaitTaken(2));  // step 1's frame: the sender writes it, the socket fills
  task.Release(1);
  ASSERT_TRUE(task.WaitTaken(3));  // step 2's frame: waits behind step 1's in the sender
  for (int64_t s = 3; s < total; ++s) {
    task.Release(1);
    ASSERT_TRUE(task.WaitProduced(s + 1));
  }
  // The setup held: the 32 MiB frame is not written yet (the consumer read nothing), so
  // steps 3.. were all produced while a frame waited in the sender.
  ASSERT_EQ(ProcessBulkChannelCounts().frames_sent, before.frames_sent)
      << "the socket took step 1's 32 MiB unread: the test's premise does not hold here";
  const std::vector<std::vector<int64_t>> frames = ReadToTheEnd(&consumer);
  std::vector<std::vector<int64_t>> want = {{1}, {2}, {}, {}};
  for (int64_t s = 3; s < total; ++s) want[s < 3 + per_frame ? 2 : 3].push_back(s);
  EXPECT_EQ(frames, want);
  EXPECT_EQ(consumer.bulk_frames(), 4u) << "frames whose bytes came over the bulk socket";
}

TEST(StreamBulkCoalescingTest, StepsProducedWhileTheSocketIsBusyShareFramesUpToTheCap) {
  ASSERT_EQ(WorkerServiceOptions().max_frame_bytes, size_t{1} << 20);
  for (size_t cap : {size_t{1} << 20, size_t{2} << 20}) {
    ExpectStepsProducedWhileTheSocketIsBusyShareFramesUpTo(cap);
  }
}

// A paced producer: each step is released only once the consumer has read the one before
// from the socket, so the sender has nothing waiting; every step is sent at once, alone in
// its frame, while the next one is not produced yet (coalescing by time is an hour, so a
// stream that waited for a second step would not send within kStuck).
TEST(StreamBulkCoalescingTest, APacedProducersStepIsSentAtOnce) {
  constexpr int64_t kTotal = 12;
  GatedBytesTask task(kTotal, [](int64_t) { return 2 * kStepBytes; });
  TestStreamServer server(&task, Options());
  BulkConsumer consumer(server.address(), int64_t{64} << 20);
  task.Release(1);
  std::vector<int64_t> steps;
  bool end = false;
  ASSERT_TRUE(consumer.Next(&steps, &end));
  ASSERT_EQ(steps, std::vector<int64_t>{0});
  ASSERT_TRUE(consumer.TakeBulkChannel());
  for (int64_t s = 1; s < kTotal; ++s) {
    task.Release(1);
    ASSERT_TRUE(consumer.Next(&steps, &end)) << "step " << s << " was not sent";
    EXPECT_EQ(steps, std::vector<int64_t>{s});
    EXPECT_EQ(task.produced(), s + 1) << "step " << s << " arrived after the next was made";
    EXPECT_EQ(consumer.bulk_frames(), static_cast<uint64_t>(s)) << "step " << s;
  }
  while (!end && consumer.Next(&steps, &end)) EXPECT_TRUE(steps.empty());
  EXPECT_TRUE(end);
}

}  // namespace
}  // namespace sluice
