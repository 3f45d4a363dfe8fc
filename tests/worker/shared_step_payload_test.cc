// SharedStepPayload (core/rpc/shared_step_payload.h): a step of a job shared across trainers is
// encoded once, and every stream's frame carries the same slices, byte for byte what a frame
// encoded on its own carries.
#include "core/rpc/shared_step_payload.h"

#include <memory>
#include <string>
#include <vector>

#include "core/rpc/shm_ring.h"
#include "core/rpc/shm_segment.h"
#include "core/rpc/step_frame.h"
#include "core/tensor/host_memory.h"
#include "gtest/gtest.h"
#include "tests/worker/step_frame_test_util.h"
#include "tests/worker/task_step_test_util.h"
#include "worker/consumer_frame.h"

namespace sluice {
namespace {

constexpr size_t kImageBytes = 3072;

// A step like the TFRecord parse pipeline's (issue 29's benchmark): a batch of image strings, a
// small label tensor, and a numeric tensor large enough to go zero-copy.
std::shared_ptr<TaskStep> ImageStep(int64_t task_step, int64_t batch) {
  auto step = std::make_shared<TaskStep>();
  step->task_step = task_step;
  step->num_real_pieces = 1;
  std::vector<std::string> images;
  for (int64_t i = 0; i < batch; ++i) {
    images.push_back(std::string(kImageBytes, static_cast<char>('a' + (task_step + i) % 26)));
  }
  Tensor labels = Tensor::Allocate(DType::kInt64, Shape({batch}));
  for (int64_t i = 0; i < batch; ++i) labels.mutable_data<int64_t>()[i] = task_step * 100 + i;
  Tensor features = Tensor::Allocate(DType::kFloat32, Shape({batch, 64}));
  for (int64_t i = 0; i < batch * 64; ++i) features.mutable_data<float>()[i] = 0.5f * i;
  step->pieces.push_back({Tensor::FromStrings(std::move(images), Shape({batch})), labels,
                          features});
  step->shared_payload = std::make_shared<const SharedStepPayload>();
  return step;
}

// The same views without the shared payload: what a stream encodes on its own.
std::vector<WireStepView> Unshared(std::vector<WireStepView> views) {
  for (WireStepView& v : views) v.shared_payload = nullptr;
  return views;
}

// The slice of `bb` of exactly `size` bytes (the step's copied strings), or null.
const uint8_t* SliceOfSize(const grpc::ByteBuffer& bb, size_t size) {
  for (const grpc::Slice& s : SlicesOf(bb)) {
    if (s.size() == size) return s.begin();
  }
  return nullptr;
}

TEST(SharedStepPayloadTest, FramesCarryTheBytesOfAFrameEncodedOnItsOwn) {
  std::vector<std::shared_ptr<const TaskStep>> steps = {ImageStep(0, 8), ImageStep(1, 8)};
  const std::vector<WireStepView> views = WholeStepViews(steps);
  ASSERT_NE(views[0].shared_payload, nullptr);
  // Full headers and compact ones (the header differs per stream; the payload is shared).
  auto spec = std::make_shared<const CompactSpec>(CompactSpec::FromElementSpec(ElementSpec::Tuple(
      {ElementSpec(TensorSpec{DType::kString, Shape({-1})}),
       ElementSpec(TensorSpec{DType::kInt64, Shape({-1})}),
       ElementSpec(TensorSpec{DType::kFloat32, Shape({-1, 64})})})));
  for (std::shared_ptr<const CompactSpec> s : {std::shared_ptr<const CompactSpec>(), spec}) {
    StepFrameEncoder shared_encoder(s), own_encoder(s);
    grpc::ByteBuffer shared_bb, own_bb;
    ASSERT_TRUE(shared_encoder.Encode(views, true, absl::OkStatus(), &shared_bb).ok());
    ASSERT_TRUE(own_encoder.Encode(Unshared(views), true, absl::OkStatus(), &own_bb).ok());
    EXPECT_EQ(Flatten(shared_bb), Flatten(own_bb)) << "compact " << (s != nullptr);
    StepFrameDecoder decoder(nullptr, s);
    StepFrame decoded;
    ASSERT_TRUE(decoder.Decode(shared_bb, &decoded).ok());
    ASSERT_EQ(decoded.steps.size(), 2u);
    for (size_t i = 0; i < 2; ++i) {
      ASSERT_EQ(decoded.steps[i].pieces.size(), 1u);
      for (size_t t = 0; t < 3; ++t) {
        EXPECT_TRUE(decoded.steps[i].pieces[0][t].Equals(steps[i]->pieces[0][t]))
            << "step " << i << " tensor " << t;
      }
    }
  }
}

TEST(SharedStepPayloadTest, EveryStreamSendsTheSameCopyOfAStep) {
  constexpr int64_t kBatch = 16;
  std::vector<std::shared_ptr<const TaskStep>> steps = {ImageStep(0, kBatch), ImageStep(1, kBatch)};
  // Four trainers' streams, coalescing differently: [0], [0, 1], [1], [0].
  StepFrameEncoder a, b, c, d;
  grpc::ByteBuffer fa, fb, fc, fd;
  ASSERT_TRUE(a.Encode(WholeStepViews({steps[0]}), false, absl::OkStatus(), &fa).ok());
  ASSERT_TRUE(b.Encode(WholeStepViews(steps), false, absl::OkStatus(), &fb).ok());
  ASSERT_TRUE(c.Encode(WholeStepViews({steps[1]}), false, absl::OkStatus(), &fc).ok());
  ASSERT_TRUE(d.Encode(WholeStepViews({steps[0]}), false, absl::OkStatus(), &fd).ok());
  // A step's strings and labels, copied once: one buffer per step, referenced by every frame.
  const size_t copied = kBatch * kImageBytes + kBatch * sizeof(int64_t);
  const uint8_t* step0 = SliceOfSize(fa, copied);
  ASSERT_NE(step0, nullptr);
  EXPECT_EQ(SliceOfSize(fd, copied), step0);
  std::vector<grpc::Slice> slices_b = SlicesOf(fb);
  int found = 0;
  for (const grpc::Slice& s : slices_b) {
    if (s.size() == copied) {
      EXPECT_EQ(s.begin(), found == 0 ? step0 : SliceOfSize(fc, copied));
      ++found;
    }
  }
  EXPECT_EQ(found, 2);
  for (const auto& step : steps) {
    EXPECT_EQ(step->shared_payload->builds(), 1);
    EXPECT_EQ(step->shared_payload->copied_bytes(), copied);
  }
  // The large numeric tensor stays zero-copy: its slice is the tensor's own buffer.
  bool zero_copy = false;
  for (const grpc::Slice& s : SlicesOf(fa)) {
    zero_copy |= s.begin() == steps[0]->pieces[0][2].raw_data();
  }
  EXPECT_TRUE(zero_copy);
}

TEST(SharedStepPayloadTest, ASharedMemoryFrameTakesOnlyTheStringsFromTheSharedCopy) {
  std::vector<std::shared_ptr<const TaskStep>> steps = {ImageStep(0, 8)};
  const std::vector<WireStepView> views = WholeStepViews(steps);
  auto segment = ShmSegment::Create(size_t{1} << 20);
  ASSERT_TRUE(segment.ok());
  ShmRingWriter writer(*segment);
  ShmRingReader reader(*segment);
  StepFrameEncoder encoder;
  encoder.set_shared_payload(&writer);
  grpc::ByteBuffer bb;
  ASSERT_TRUE(encoder.Encode(views, false, absl::OkStatus(), &bb).ok());
  ASSERT_GT(encoder.last_shared_bytes(), 0u);  // the numeric tensors went to the ring
  EXPECT_EQ(steps[0]->shared_payload->copied_bytes(), 8 * kImageBytes);  // strings only
  StepFrameDecoder decoder(nullptr, nullptr);
  decoder.set_shared_payload(&reader);
  StepFrame decoded;
  ASSERT_TRUE(decoder.Decode(bb, &decoded).ok());
  for (size_t t = 0; t < 3; ++t) {
    EXPECT_TRUE(decoded.steps[0].pieces[0][t].Equals(steps[0]->pieces[0][t])) << "tensor " << t;
  }
  // The same step to a TCP stream: the whole form, built once more (the other form).
  StepFrameEncoder tcp;
  grpc::ByteBuffer tcp_bb;
  ASSERT_TRUE(tcp.Encode(views, false, absl::OkStatus(), &tcp_bb).ok());
  EXPECT_EQ(steps[0]->shared_payload->builds(), 2);
  StepFrame tcp_decoded;
  ASSERT_TRUE(DecodeStepFrame(tcp_bb, nullptr, &tcp_decoded).ok());
  EXPECT_TRUE(tcp_decoded.steps[0].pieces[0][1].Equals(steps[0]->pieces[0][1]));
}

TEST(SharedStepPayloadTest, CompressedFramesAndPartialStepsEncodeTheirOwn) {
  std::vector<std::shared_ptr<const TaskStep>> steps = {ImageStep(0, 8)};
  StepFrameEncoder compressed(nullptr, WireCompression::kLz4);
  grpc::ByteBuffer bb;
  ASSERT_TRUE(compressed.Encode(WholeStepViews(steps), false, absl::OkStatus(), &bb).ok());
  EXPECT_EQ(compressed.compression_stats().frames_compressed, 1u);
  EXPECT_EQ(steps[0]->shared_payload->builds(), 0);
  StepFrame decoded;
  StepFrameDecoder decoder(nullptr, nullptr);
  ASSERT_TRUE(decoder.Decode(bb, &decoded).ok());
  EXPECT_TRUE(decoded.steps[0].pieces[0][0].Equals(steps[0]->pieces[0][0]));
  // A coordinated consumer's share of a step of two pieces is not the whole step.
  auto two = std::make_shared<TaskStep>(*steps[0]);
  two->pieces.push_back(two->pieces[0]);
  std::vector<WireStepView> views;
  ConsumerFrameViews({two}, /*coordinated=*/true, 1, 1, &views);
  EXPECT_EQ(views[0].shared_payload, nullptr);
  ConsumerFrameViews({two}, /*coordinated=*/false, 0, 1, &views);
  EXPECT_NE(views[0].shared_payload, nullptr);
}

TEST(SharedStepPayloadTest, TheSharedCopyIsChargedToTheMemoryBudgetWhileTheStepLives) {
  MemoryBudget& budget = ProcessMemoryBudget();
  const int64_t before = budget.in_use();
  size_t copied = 0;
  {
    std::vector<std::shared_ptr<const TaskStep>> steps = {ImageStep(0, 64)};
    const int64_t with_step = budget.in_use();
    StepFrameEncoder a(nullptr), b(nullptr);
    grpc::ByteBuffer bb_a, bb_b;
    ASSERT_TRUE(a.Encode(WholeStepViews(steps), false, absl::OkStatus(), &bb_a).ok());
    ASSERT_TRUE(b.Encode(WholeStepViews(steps), false, absl::OkStatus(), &bb_b).ok());
    copied = steps[0]->shared_payload->copied_bytes();
    ASSERT_GE(copied, 64 * kImageBytes);
    // One copy for both streams, counted once.
    EXPECT_EQ(budget.in_use() - with_step, static_cast<int64_t>(copied));
  }  // the step, its shared copy and the frames are gone
  EXPECT_EQ(budget.in_use(), before);
}

}  // namespace
}  // namespace sluice
