// The worker batching straight into a consumer's shared-memory ring (worker/step_placement.h,
// ShmRingWriter::Allocate / InPlace): a step built or placed in the ring is sent as its header
// alone and the consumer's tensors are views of the very bytes the worker wrote; a region is
// reused only once the consumer released it and the worker dropped it; a frame that is not in
// ring order is copied; a consumer cannot release what was not sent.
#include <atomic>
#include <cstring>
#include <memory>
#include <vector>

#include "core/rpc/shm_ring.h"
#include "core/rpc/shm_segment.h"
#include "core/rpc/step_frame.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "core/tensor/step_output_allocator.h"
#include "core/util/streaming_copy.h"
#include "worker/step_placement.h"
#include "tests/worker/task_step_test_util.h"
#include "worker/task_runner.h"

namespace sluice {
namespace {

constexpr size_t kPage = 4096;

Tensor InRing(const std::shared_ptr<TensorBuffer>& buffer, size_t bytes, uint8_t fill) {
  std::memset(buffer->data(), fill, bytes);
  return *Tensor::Wrap(DType::kUInt8, Shape({static_cast<int64_t>(bytes)}), buffer);
}

// Makes `step` number `task_step`: 1000 bytes of its number, built in the ring of the placement
// attached to the producing runner (AllocateStepOutput) when there is one with room, else in
// ordinary memory.
void MakeFilledStep(int64_t task_step, TaskStep* step) {
  std::shared_ptr<TensorBuffer> b = AllocateStepOutput(1000);
  if (b == nullptr) b = TensorBuffer::AllocateHost(1000);
  step->task_step = task_step;
  step->num_real_pieces = 1;
  step->pieces = {{InRing(b, 1000, static_cast<uint8_t>(task_step))}};
  step->bytes = 1000;
}

bool InSegment(const Tensor& t, const ShmSegment& segment) {
  const auto* p = static_cast<const uint8_t*>(t.raw_data());
  return p >= segment.data() && p + t.byte_size() <= segment.data() + segment.size();
}

// Encodes `steps` (one piece each) with `writer` as the frame's sink.
grpc::ByteBuffer Encode(StepFrameEncoder* encoder, const std::vector<TaskStep>& steps) {
  std::vector<WireStepView> views;
  for (const TaskStep& s : steps) {
    views.push_back(WireStepView{s.task_step, -1, 1, &s.pieces[0], 1});
  }
  grpc::ByteBuffer bb;
  EXPECT_TRUE(encoder->Encode(views, false, absl::OkStatus(), &bb).ok());
  return bb;
}

TEST(StepPlacementTest, StepsBuiltInTheRingAreSentAsTheirHeaderAlone) {
  auto segment = ShmSegment::Create(size_t{1} << 20);
  ASSERT_TRUE(segment.ok());
  auto writer = std::make_shared<ShmRingWriter>(*segment);
  ShmRingReader reader(*segment);  // the same mapping stands in for the consumer's
  StepPlacement placement(writer);
  std::vector<TaskStep> steps(2);
  {
    StepOutputAllocator::Scope scope(&placement);
    EXPECT_EQ(StepOutputAllocator::Current(), &placement);
    // Step 0: the producer builds its uint8 and int32 tensors in one ring buffer, laid out
    // as a frame wants them; step 1: in ordinary memory (placed: copied once). Both carry
    // strings, which stay where they are and travel inline.
    for (int s = 0; s < 2; ++s) {
      Tensor bytes, ints;
      if (s == 0) {
        std::shared_ptr<TensorBuffer> b = AllocateStepOutput(5056 + 12);
        ASSERT_NE(b, nullptr);
        bytes = InRing(b, 5000, 1);
        ints = *Tensor::Wrap(DType::kInt32, Shape({3}), b, 5056);
      } else {
        bytes = Tensor::Allocate(DType::kUInt8, Shape({5000}));
        std::memset(bytes.mutable_raw_data(), 2, 5000);
        ints = Tensor::Allocate(DType::kInt32, Shape({3}));
      }
      for (int i = 0; i < 3; ++i) ints.mutable_data<int32_t>()[i] = s * 10 + i;
      const void* built_at = bytes.raw_data();
      steps[s].task_step = s;
      steps[s].pieces = {{bytes, ints, Tensor::FromStrings({"ab", "cde"}, Shape({2}))}};
      placement.Place(&steps[s]);
      EXPECT_EQ(steps[s].pieces[0][0].raw_data() == built_at, s == 0) << "step " << s;
      EXPECT_TRUE(InSegment(steps[s].pieces[0][0], **segment));
      EXPECT_TRUE(InSegment(steps[s].pieces[0][1], **segment)) << "step " << s;
      EXPECT_EQ(steps[s].pieces[0][1].data<int32_t>()[2], s * 10 + 2);
    }
  }
  EXPECT_EQ(StepOutputAllocator::Current(), nullptr);
  EXPECT_EQ(AllocateStepOutput(64), nullptr);  // outside a scope: ordinary memory

  const ShmRingCounts before = ProcessShmRingCounts();
  StepFrameEncoder encoder;
  encoder.set_shared_payload(writer.get());
  grpc::ByteBuffer bb = Encode(&encoder, steps);
  EXPECT_TRUE(encoder.last_in_place());
  EXPECT_LT(bb.Length(), 200u);  // the header and the strings' 10 bytes
  EXPECT_EQ(ProcessShmRingCounts().frames_in_place - before.frames_in_place, 1);

  StepFrameDecoder decoder(nullptr, nullptr);
  decoder.set_shared_payload(&reader);
  StepFrame out;
  ASSERT_TRUE(decoder.Decode(bb, &out).ok());
  ASSERT_EQ(out.steps.size(), 2u);
  for (int s = 0; s < 2; ++s) {
    const std::vector<Tensor>& got = out.steps[s].pieces[0];
    // No copy anywhere: the consumer's tensors are the bytes the worker's producer wrote.
    EXPECT_EQ(got[0].raw_data(), steps[s].pieces[0][0].raw_data());
    EXPECT_EQ(got[1].raw_data(), steps[s].pieces[0][1].raw_data());
    EXPECT_EQ(static_cast<const uint8_t*>(got[0].raw_data())[4999], s + 1);
    EXPECT_EQ(got[1].data<int32_t>()[2], s * 10 + 2);
    EXPECT_EQ(got[2].string_at(1), "cde");
  }
}

TEST(StepPlacementTest, RegionIsReusedOnlyOnceReleasedAndDropped) {
  auto segment = ShmSegment::Create(kPage);
  ASSERT_TRUE(segment.ok());
  auto writer = std::make_shared<ShmRingWriter>(*segment);
  std::vector<TaskStep> a(1), b(1);
  std::shared_ptr<TensorBuffer> ba = writer->Allocate(2000);
  std::shared_ptr<TensorBuffer> bb_ = writer->Allocate(2000);
  ASSERT_NE(ba, nullptr);
  ASSERT_NE(bb_, nullptr);
  a[0].pieces = {{InRing(ba, 2000, 1)}};
  b[0].pieces = {{InRing(bb_, 2000, 2)}};
  ba.reset();
  bb_.reset();
  EXPECT_EQ(writer->live_buffers(), 2u);
  EXPECT_EQ(writer->Allocate(64), nullptr);  // full: [0, 2048) and [2048, 4096)

  StepFrameEncoder encoder;
  encoder.set_shared_payload(writer.get());
  Encode(&encoder, a);
  ASSERT_TRUE(encoder.last_in_place());
  // A hostile consumer cannot release b: allocated, never sent.
  EXPECT_EQ(writer->Release(4096).code(), absl::StatusCode::kInvalidArgument);
  // The consumer released a, but the worker still holds it (unacknowledged): not reused.
  ASSERT_TRUE(writer->Release(2048).ok());
  EXPECT_EQ(writer->Allocate(64), nullptr);
  a.clear();  // acknowledged: the worker drops it
  EXPECT_EQ(writer->live_buffers(), 1u);
  std::shared_ptr<TensorBuffer> c = writer->Allocate(64);
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->data(), (*segment)->data());  // a's region, and only now

  // b, dropped by the worker unsent: its region comes back only once the consumer releases
  // a region sent after it.
  b.clear();
  c.reset();
  EXPECT_EQ(writer->live_buffers(), 0u);
  EXPECT_EQ(writer->Allocate(kPage - 64), nullptr);  // [2048, 4096) is b's, unreleased
}

TEST(StepPlacementTest, FrameOutOfRingOrderIsCopiedAndTheConsumerAcceptsBoth) {
  auto segment = ShmSegment::Create(size_t{1} << 16);
  ASSERT_TRUE(segment.ok());
  auto writer = std::make_shared<ShmRingWriter>(*segment);
  ShmRingReader reader(*segment);
  std::vector<TaskStep> first(1), second(1);
  first[0].pieces = {{InRing(writer->Allocate(1000), 1000, 1)}};
  first[0].task_step = 0;
  second[0].pieces = {{InRing(writer->Allocate(1000), 1000, 2)}};
  second[0].task_step = 1;
  StepFrameEncoder encoder;
  encoder.set_shared_payload(writer.get());
  StepFrameDecoder decoder(nullptr, nullptr);
  decoder.set_shared_payload(&reader);
  // The second step goes first (in place); the first, behind it in the ring, is then copied
  // to a region after it, which the consumer's ring-order check accepts.
  grpc::ByteBuffer b2 = Encode(&encoder, second);
  EXPECT_TRUE(encoder.last_in_place());
  grpc::ByteBuffer b1 = Encode(&encoder, first);
  EXPECT_FALSE(encoder.last_in_place());
  EXPECT_EQ(encoder.last_shared_bytes(), 1000u);
  StepFrame out2, out1;
  ASSERT_TRUE(decoder.Decode(b2, &out2).ok());
  ASSERT_TRUE(decoder.Decode(b1, &out1).ok());
  EXPECT_EQ(static_cast<const uint8_t*>(out2.steps[0].pieces[0][0].raw_data())[999], 2);
  EXPECT_EQ(static_cast<const uint8_t*>(out1.steps[0].pieces[0][0].raw_data())[999], 1);
  EXPECT_NE(out1.steps[0].pieces[0][0].raw_data(), first[0].pieces[0][0].raw_data());
}

// A frame built elsewhere while a step built in the ring waits to be sent goes inline: a copy
// into the ring would go past the waiting step, which could then only be copied too.
TEST(StepPlacementTest, FrameBuiltElsewhereGoesInlineWhileAPlacedStepWaits) {
  auto segment = ShmSegment::Create(size_t{1} << 16);
  ASSERT_TRUE(segment.ok());
  auto writer = std::make_shared<ShmRingWriter>(*segment);
  std::vector<TaskStep> placed(1), heap(1);
  placed[0].pieces = {{InRing(writer->Allocate(1000), 1000, 1)}};
  heap[0].pieces = {{Tensor::Allocate(DType::kUInt8, Shape({1000}))}};
  StepFrameEncoder encoder;
  encoder.set_shared_payload(writer.get());
  Encode(&encoder, heap);
  EXPECT_EQ(encoder.last_shared_bytes(), 0u);  // inline
  Encode(&encoder, placed);
  EXPECT_TRUE(encoder.last_in_place());
  Encode(&encoder, heap);
  EXPECT_EQ(encoder.last_shared_bytes(), 1000u);  // nothing waits now: copied into the ring
  EXPECT_FALSE(encoder.last_in_place());
}

// Steps large enough for StreamingCopy's non-temporal stores (core/util/streaming_copy.h),
// built in ordinary memory: placed by the worker (StepPlacement::Place), or copied into the
// ring by the stream's encoder (no placement); either way the consumer's views hold exactly
// the bytes built, up to the last odd byte, and the tensor after them is intact.
TEST(StepPlacementTest, LargeStepsCopiedIntoTheRingArriveByteForByte) {
  const size_t big = kStreamingCopyMinBytes + 4099;  // not a multiple of a cache line
#if defined(__x86_64__)
  ASSERT_TRUE(StreamingCopyBypassesCache(big));  // the non-temporal path is the one tested
#endif
  auto segment = ShmSegment::Create(size_t{4} << 20);
  ASSERT_TRUE(segment.ok());
  auto writer = std::make_shared<ShmRingWriter>(*segment);
  ShmRingReader reader(*segment);
  StepPlacement placement(writer);
  auto built = [&](int64_t s) {
    TaskStep step;
    step.task_step = s;
    Tensor bytes = Tensor::Allocate(DType::kUInt8, Shape({static_cast<int64_t>(big)}));
    auto* p = static_cast<uint8_t*>(bytes.mutable_raw_data());
    for (size_t i = 0; i < big; ++i) p[i] = static_cast<uint8_t>((i * 131 + s * 7) % 251);
    Tensor ints = Tensor::Allocate(DType::kInt32, Shape({3}));
    for (int i = 0; i < 3; ++i) {
      ints.mutable_data<int32_t>()[i] = static_cast<int32_t>(s * 10 + i);
    }
    step.pieces = {{bytes, ints}};
    return step;
  };
  std::vector<TaskStep> placed = {built(0)}, copied = {built(1)};
  const std::vector<TaskStep> want = {built(0), built(1)};
  placement.Place(&placed[0]);
  ASSERT_TRUE(InSegment(placed[0].pieces[0][0], **segment));
  StepFrameEncoder encoder;
  encoder.set_shared_payload(writer.get());
  StepFrameDecoder decoder(nullptr, nullptr);
  decoder.set_shared_payload(&reader);
  grpc::ByteBuffer b0 = Encode(&encoder, placed);
  EXPECT_TRUE(encoder.last_in_place());
  grpc::ByteBuffer b1 = Encode(&encoder, copied);
  EXPECT_FALSE(encoder.last_in_place());
  EXPECT_GT(encoder.last_shared_bytes(), big);  // the encoder's copy into the ring
  StepFrame out0, out1;
  ASSERT_TRUE(decoder.Decode(b0, &out0).ok());
  ASSERT_TRUE(decoder.Decode(b1, &out1).ok());
  int s = 0;
  for (const StepFrame* out : {&out0, &out1}) {
    const std::vector<Tensor>& got = out->steps[0].pieces[0];
    const std::vector<Tensor>& expected = want[s].pieces[0];
    EXPECT_TRUE(InSegment(got[0], **segment)) << "step " << s;
    ASSERT_EQ(got[0].byte_size(), big);
    EXPECT_EQ(std::memcmp(got[0].raw_data(), expected[0].raw_data(), big), 0) << "step " << s;
    EXPECT_EQ(got[1].data<int32_t>()[2], s * 10 + 2) << "step " << s;
    ++s;
  }
}

TEST(StepPlacementTest, StepThatDoesNotFitStaysInOrdinaryMemory) {
  auto segment = ShmSegment::Create(kPage);
  ASSERT_TRUE(segment.ok());
  auto writer = std::make_shared<ShmRingWriter>(*segment);
  StepPlacement placement(writer);
  TaskStep step;
  Tensor big = Tensor::Allocate(DType::kUInt8, Shape({2 * static_cast<int64_t>(kPage)}));
  step.pieces = {{big}};
  placement.Place(&step);
  EXPECT_EQ(step.pieces[0][0].raw_data(), big.raw_data());  // left alone
  EXPECT_EQ(writer->live_buffers(), 0u);
}

TEST(StepPlacementTest, UnplacedCopiesOnlyStepsInTheRing) {
  auto segment = ShmSegment::Create(kPage);
  ASSERT_TRUE(segment.ok());
  auto writer = std::make_shared<ShmRingWriter>(*segment);
  StepPlacement placement(writer);
  auto plain = std::make_shared<TaskStep>();
  plain->pieces = {{Tensor::FromVector<int32_t>({1, 2})}};
  EXPECT_EQ(placement.Unplaced(plain), plain);
  auto placed = std::make_shared<TaskStep>();
  placed->task_step = 7;
  placed->pieces = {{InRing(writer->Allocate(1000), 1000, 9), Tensor::FromStrings({"x"}, Shape({1}))}};
  std::shared_ptr<const TaskStep> moved = placement.Unplaced(placed);
  ASSERT_NE(moved, placed);
  EXPECT_EQ(moved->task_step, 7);
  EXPECT_FALSE(InSegment(moved->pieces[0][0], **segment));
  EXPECT_EQ(static_cast<const uint8_t*>(moved->pieces[0][0].raw_data())[999], 9);
  EXPECT_EQ(moved->pieces[0][1].string_at(0), "x");
  placed.reset();
  EXPECT_EQ(writer->live_buffers(), 0u);  // the copy holds nothing of the ring
}

// A runner with a placement attached builds its steps in the ring; once detached, the steps it
// still holds (queued, and handed out but unacknowledged) move to ordinary memory, so that
// nothing of the worker's but a frame being written keeps the segment.
TEST(StepPlacementTest, RunnerBuildsInTheRingAndLetsGoOfItWhenDetached) {
  auto segment = ShmSegment::Create(size_t{1} << 20);
  ASSERT_TRUE(segment.ok());
  auto writer = std::make_shared<ShmRingWriter>(*segment);
  auto placement = std::make_shared<StepPlacement>(writer);
  const proto::TaskDef task = OneConsumerTask();
  TaskRunnerOptions options;
  options.buffer_bytes = 8 * 1000;  // the producer stays ahead by a few steps
  auto attached = std::make_shared<absl::Notification>();
  auto produced = std::make_shared<int64_t>(0);
  constexpr int64_t kSteps = 40;
  std::shared_ptr<TaskRunner> runner =
      TaskRunner::StartWith(task, options, [=](TaskStep* step, bool* end) {
        // The first step waits (bounded) until the placement is attached.
        attached->WaitForNotificationWithTimeout(absl::Seconds(60));
        if (*produced == kSteps) {
          *end = true;
          return absl::OkStatus();
        }
        MakeFilledStep((*produced)++, step);
        *end = false;
        return absl::OkStatus();
      });
  ASSERT_TRUE(runner->AttachPlacement(placement));
  EXPECT_FALSE(runner->AttachPlacement(std::make_shared<StepPlacement>(writer)));  // one at a time
  attached->Notify();
  auto reader = runner->OpenReader(0, 0);
  ASSERT_TRUE(reader.ok()) << reader.status();
  std::vector<std::shared_ptr<const TaskStep>> taken;
  bool end = false;
  const absl::Time first_deadline = absl::Now() + absl::Seconds(60);
  while (taken.size() < 3 && !end && absl::Now() < first_deadline) {
    std::vector<std::shared_ptr<const TaskStep>> more;
    ASSERT_TRUE(
        (*reader)->Next(3 - taken.size(), size_t{1} << 20, first_deadline, &more, &end).ok());
    taken.insert(taken.end(), more.begin(), more.end());
  }
  ASSERT_EQ(taken.size(), 3u);
  // Step 0's slice read the placement before it was attached (it then waited for `attached`);
  // every later step is built in the ring.
  for (const auto& step : taken) {
    if (step->task_step > 0) {
      EXPECT_TRUE(writer->Holds(step->pieces[0][0])) << step->task_step;
    }
  }

  runner->DetachPlacement(placement.get());
  placement.reset();
  // The runner's pool moves what the task holds (queued, kept for a reconnect, being produced
  // now) out of the ring; once `taken` (a frame being written) is gone too, nothing of the
  // worker's views the ring.
  taken.clear();
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  while (writer->live_buffers() > 0 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  EXPECT_EQ(writer->live_buffers(), 0u);
  // Every step still arrives, with its bytes, from ordinary memory.
  int64_t next = 0;
  (*reader).reset();  // the stream broke: the consumer attaches again at step 0
  auto again = runner->OpenReader(0, 0);
  ASSERT_TRUE(again.ok()) << again.status();
  while (!end && absl::Now() < deadline) {
    std::vector<std::shared_ptr<const TaskStep>> steps;
    ASSERT_TRUE((*again)->Next(8, size_t{1} << 20, deadline, &steps, &end).ok());
    for (const auto& step : steps) {
      EXPECT_EQ(step->task_step, next);
      EXPECT_FALSE(writer->Holds(step->pieces[0][0])) << step->task_step;
      EXPECT_EQ(static_cast<const uint8_t*>(step->pieces[0][0].raw_data())[999],
                static_cast<uint8_t>(next));
      ++next;
    }
  }
  EXPECT_TRUE(end);
  EXPECT_EQ(next, kSteps);
}

// Steps the task made in ordinary memory before a stream's ring attached (the producer runs
// ahead of any consumer) go into the ring first, in task step order, ahead of the steps made
// after: a ring region goes in place only after every region sent before it, so the steps made
// in the ring at once used to lie ahead of them and they went inline (bench/RESULTS.md,
// shmstart: a 16 MiB step over gRPC per stream). Every step then lies in the ring, at
// increasing positions, with its bytes.
TEST(StepPlacementTest, StepsMadeBeforeTheRingAttachedGoIntoItFirstInOrder) {
  auto segment = ShmSegment::Create(size_t{1} << 20);
  ASSERT_TRUE(segment.ok());
  auto writer = std::make_shared<ShmRingWriter>(*segment);
  auto placement = std::make_shared<StepPlacement>(writer);
  TaskRunnerOptions options;
  options.buffer_bytes = 8 * 1000;
  auto attached = std::make_shared<absl::Notification>();
  auto produced = std::make_shared<int64_t>(0);
  auto made = std::make_shared<std::atomic<int64_t>>(0);  // produced, as the test sees it
  constexpr int64_t kSteps = 20;
  constexpr int64_t kMadeBefore = 3;
  std::shared_ptr<TaskRunner> runner =
      TaskRunner::StartWith(OneConsumerTask(), options, [=](TaskStep* step, bool* end) {
        // Steps 0-2 are made before the ring is there; step 3 waits (bounded) for it.
        if (*produced == kMadeBefore) attached->WaitForNotificationWithTimeout(absl::Seconds(60));
        if (*produced == kSteps) {
          *end = true;
          return absl::OkStatus();
        }
        MakeFilledStep((*produced)++, step);
        made->store(*produced);
        *end = false;
        return absl::OkStatus();
      });
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  while (made->load() < kMadeBefore && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  ASSERT_EQ(made->load(), kMadeBefore);
  ASSERT_TRUE(runner->AttachPlacement(placement));
  attached->Notify();
  // The buffer fills (8 steps): the block after the ring attached has placed the earlier ones.
  while (runner->buffer()->stats().steps < 8 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  auto reader = runner->OpenReader(0, 0);
  ASSERT_TRUE(reader.ok()) << reader.status();
  std::vector<std::shared_ptr<const TaskStep>> taken;  // held: no region is reused
  bool end = false;
  while (!end && absl::Now() < deadline) {
    std::vector<std::shared_ptr<const TaskStep>> more;
    ASSERT_TRUE((*reader)->Next(8, size_t{1} << 20, deadline, &more, &end).ok());
    taken.insert(taken.end(), more.begin(), more.end());
  }
  ASSERT_TRUE(end);
  ASSERT_EQ(taken.size(), static_cast<size_t>(kSteps));
  const uint8_t* last = nullptr;
  for (const auto& step : taken) {
    const Tensor& t = step->pieces[0][0];
    // Step 3, made while the ring attached (its block began before), is placed by copy too.
    EXPECT_TRUE(writer->Holds(t)) << "task step " << step->task_step;
    const auto* p = static_cast<const uint8_t*>(t.raw_data());
    EXPECT_TRUE(last == nullptr || p > last) << "task step " << step->task_step;
    last = p;
    EXPECT_EQ(p[999], static_cast<uint8_t>(step->task_step));
  }
  runner->DetachPlacement(placement.get());
}

// StepRingResidence, the walk both Unplaced and the stream's frame split ask: a step with no
// numeric bytes (strings, an empty tensor) says so; one with a numeric tensor in the ring is in
// it even when another is not (built there in part), and Unplaced copies that one out; one
// with none there is outside. Unplaced returns a step with nothing in the ring as it is.
TEST(StepPlacementTest, StepRingResidenceSaysWhereAStepsNumericBytesAre) {
  auto segment = ShmSegment::Create(size_t{1} << 16);
  ASSERT_TRUE(segment.ok());
  auto writer = std::make_shared<ShmRingWriter>(*segment);
  StepPlacement placement(writer);
  auto step_of = [](std::vector<Tensor> tensors) {
    auto step = std::make_shared<TaskStep>();
    step->pieces = {std::move(tensors)};
    return step;
  };
  const Tensor strings = Tensor::FromStrings({"ab"}, Shape({1}));
  const Tensor empty = Tensor::Allocate(DType::kFloat32, Shape({0}));
  Tensor heap = Tensor::Allocate(DType::kUInt8, Shape({100}));
  std::memset(heap.mutable_raw_data(), 7, 100);
  std::shared_ptr<TensorBuffer> b = writer->Allocate(100);
  ASSERT_NE(b, nullptr);
  const Tensor ring = InRing(b, 100, 9);

  auto none = step_of({strings, empty});
  EXPECT_EQ(StepRingResidence(*writer, *none), RingResidence::kNoNumericBytes);
  EXPECT_EQ(placement.Unplaced(none), none);
  auto outside = step_of({strings, heap});
  EXPECT_EQ(StepRingResidence(*writer, *outside), RingResidence::kOutsideRing);
  EXPECT_EQ(placement.Unplaced(outside), outside);
  auto whole = step_of({ring, strings});
  EXPECT_EQ(StepRingResidence(*writer, *whole), RingResidence::kInRing);
  auto part = step_of({heap, empty, ring});  // its first numeric tensor is not in the ring
  EXPECT_EQ(StepRingResidence(*writer, *part), RingResidence::kInRing);
  std::shared_ptr<const TaskStep> out = placement.Unplaced(part);
  ASSERT_NE(out, part);
  EXPECT_EQ(StepRingResidence(*writer, *out), RingResidence::kOutsideRing);
  EXPECT_FALSE(InSegment(out->pieces[0][2], **segment));
  EXPECT_EQ(static_cast<const uint8_t*>(out->pieces[0][2].raw_data())[99], 9);
  // Another ring's buffers are not this one's.
  auto other_segment = ShmSegment::Create(size_t{1} << 16);
  ASSERT_TRUE(other_segment.ok());
  ShmRingWriter other(*other_segment);
  EXPECT_EQ(StepRingResidence(other, *whole), RingResidence::kOutsideRing);
}

}  // namespace
}  // namespace sluice
