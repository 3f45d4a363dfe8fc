// StepFrameDecoder with view_received_slices (core/rpc/step_frame.h): a numeric tensor that lies
// inside one received slice, aligned to its dtype, is a view of that slice (kept alive by the
// tensor); one that straddles slices, is misaligned or small is copied; a trainer writing into
// a decoded tensor changes that tensor only.
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "core/rpc/step_frame.h"
#include "gtest/gtest.h"
#include "tests/worker/step_frame_test_util.h"

namespace sluice {
namespace {

Tensor Filled(DType dtype, const Shape& shape, uint8_t seed) {
  Tensor t = Tensor::Allocate(dtype, shape);
  auto* p = static_cast<uint8_t*>(t.mutable_raw_data());
  for (size_t i = 0; i < t.byte_size(); ++i) p[i] = static_cast<uint8_t>(i * 13 + seed);
  return t;
}

// Counts the received slices gRPC would free: a view must keep its slice alive.
int g_freed = 0;

struct OwnedBytes {
  void* block;
};
void FreeBytes(void* p) {
  auto* o = static_cast<OwnedBytes*>(p);
  std::free(o->block);
  delete o;
  ++g_freed;
}

// A slice holding `bytes` at an address that is `misalign` bytes past a 64-byte boundary, as
// gRPC's read buffers put a message anywhere.
grpc::Slice SliceAt(const std::string& bytes, size_t misalign) {
  void* block = std::aligned_alloc(64, (bytes.size() + misalign + 63) / 64 * 64 + 64);
  char* data = static_cast<char*>(block) + misalign;
  std::memcpy(data, bytes.data(), bytes.size());
  return grpc::Slice(data, bytes.size(), &FreeBytes, new OwnedBytes{block});
}

// The frame's bytes cut at `cuts` (offsets into the frame), each piece at `misalign`.
grpc::ByteBuffer Cut(const std::string& frame, std::vector<size_t> cuts, size_t misalign) {
  std::vector<grpc::Slice> slices;
  size_t at = 0;
  cuts.push_back(frame.size());
  for (size_t c : cuts) {
    slices.push_back(SliceAt(frame.substr(at, c - at), misalign));
    at = c;
  }
  return grpc::ByteBuffer(slices.data(), slices.size());
}

// One step, one piece: a float tensor of 16 KiB and a uint8 tensor of 5000 bytes.
StepFrame TwoTensors() {
  StepFrame f;
  WireStep s;
  s.task_step = 3;
  s.num_real_pieces = 1;
  s.pieces.push_back({Filled(DType::kFloat32, Shape({4096}), 1),
                      Filled(DType::kUInt8, Shape({5000}), 2)});
  f.steps.push_back(std::move(s));
  return f;
}

// The bytes of `frame` encoded with full headers.
std::string Encoded(const StepFrame& frame) {
  grpc::ByteBuffer bb;
  EXPECT_TRUE(EncodeStepFrame(frame, &bb).ok());
  return Flatten(bb);
}

// Where the payload starts in an encoded frame: after [fixed32 L][L header bytes].
size_t PayloadStart(const std::string& frame) {
  uint32_t len = 0;
  std::memcpy(&len, frame.data(), 4);
  return 4 + len;
}

bool Inside(const Tensor& t, const void* begin, size_t size) {
  const char* p = static_cast<const char*>(t.raw_data());
  return p >= static_cast<const char*>(begin) && p + t.byte_size() <= static_cast<const char*>(begin) + size;
}

TEST(StepFrameViewsTest, TensorsInsideOneAlignedSliceAreViewsThatKeepTheSliceAlive) {
  const StepFrame sent = TwoTensors();
  const std::string frame = Encoded(sent);
  const size_t payload = PayloadStart(frame);
  StepFrame got;
  {
    // The header in one slice, the whole payload in another at a 64-byte boundary.
    grpc::ByteBuffer bb = Cut(frame, {payload}, 0);
    StepFrameDecoder decoder(nullptr, nullptr, /*view_received_slices=*/true);
    g_freed = 0;
    ASSERT_TRUE(decoder.Decode(bb, &got).ok());
    EXPECT_EQ(decoder.stats().viewed_tensors, 2u);
    EXPECT_EQ(decoder.stats().viewed_bytes, 16384u + 5000u);
    EXPECT_EQ(decoder.stats().copied_tensors, 0u);
    // Both tensors are views of the one payload slice.
    std::vector<grpc::Slice> slices;
    ASSERT_TRUE(bb.Dump(&slices).ok());
    ASSERT_EQ(slices.size(), 2u);
    EXPECT_TRUE(Inside(got.steps[0].pieces[0][0], slices[1].begin(), slices[1].size()));
    EXPECT_TRUE(Inside(got.steps[0].pieces[0][1], slices[1].begin(), slices[1].size()));
  }
  // The buffer and the decoder are gone; the header slice is freed, the payload slice is not.
  EXPECT_EQ(g_freed, 1);
  ASSERT_EQ(got.steps.size(), 1u);
  EXPECT_TRUE(got.steps[0].pieces[0][0].Equals(sent.steps[0].pieces[0][0]));
  EXPECT_TRUE(got.steps[0].pieces[0][1].Equals(sent.steps[0].pieces[0][1]));
  Tensor kept = got.steps[0].pieces[0][1];
  got.steps.clear();
  EXPECT_EQ(g_freed, 1);  // `kept` still views it
  kept = Tensor();
  EXPECT_EQ(g_freed, 2);
}

TEST(StepFrameViewsTest, StraddlingMisalignedAndSmallTensorsAreCopied) {
  const StepFrame sent = TwoTensors();
  const std::string frame = Encoded(sent);
  const size_t payload = PayloadStart(frame);

  // Cut inside the float tensor: it straddles two slices (copied); the uint8 one lies in the
  // second slice (viewed).
  {
    StepFrameDecoder decoder(nullptr, nullptr, true);
    StepFrame got;
    ASSERT_TRUE(decoder.Decode(Cut(frame, {payload, payload + 1000}, 0), &got).ok());
    EXPECT_EQ(decoder.stats().copied_tensors, 1u);
    EXPECT_EQ(decoder.stats().copied_bytes, 16384u);
    EXPECT_EQ(decoder.stats().viewed_tensors, 1u);
    EXPECT_TRUE(got.steps[0].pieces[0][0].Equals(sent.steps[0].pieces[0][0]));
    EXPECT_TRUE(got.steps[0].pieces[0][1].Equals(sent.steps[0].pieces[0][1]));
    EXPECT_EQ(reinterpret_cast<uintptr_t>(got.steps[0].pieces[0][0].raw_data()) %
                  TensorBuffer::kAlignment,
              0u);
  }
  // The payload at an odd address: the float tensor is misaligned for its dtype (copied into
  // aligned memory); bytes have no alignment to keep (viewed).
  {
    StepFrameDecoder decoder(nullptr, nullptr, true);
    StepFrame got;
    ASSERT_TRUE(decoder.Decode(Cut(frame, {payload}, 1), &got).ok());
    EXPECT_EQ(decoder.stats().copied_tensors, 1u);
    EXPECT_EQ(decoder.stats().viewed_tensors, 1u);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(got.steps[0].pieces[0][0].raw_data()) % 4, 0u);
    EXPECT_TRUE(got.steps[0].pieces[0][0].Equals(sent.steps[0].pieces[0][0]));
    EXPECT_TRUE(got.steps[0].pieces[0][1].Equals(sent.steps[0].pieces[0][1]));
  }
  // Small tensors are always copied, however they lie.
  {
    StepFrame small;
    WireStep s;
    s.pieces.push_back({Filled(DType::kInt64, Shape({16}), 5)});
    small.steps.push_back(std::move(s));
    const std::string f = Encoded(small);
    StepFrameDecoder decoder(nullptr, nullptr, true);
    StepFrame got;
    ASSERT_TRUE(decoder.Decode(Cut(f, {PayloadStart(f)}, 0), &got).ok());
    EXPECT_EQ(decoder.stats().viewed_tensors, 0u);
    EXPECT_EQ(decoder.stats().copied_tensors, 1u);
    EXPECT_TRUE(got.steps[0].pieces[0][0].Equals(small.steps[0].pieces[0][0]));
  }
}

TEST(StepFrameViewsTest, WithoutTheOptionEveryTensorIsCopied) {
  const StepFrame sent = TwoTensors();
  const std::string frame = Encoded(sent);
  StepFrameDecoder decoder(nullptr, nullptr);
  StepFrame got;
  ASSERT_TRUE(decoder.Decode(Cut(frame, {PayloadStart(frame)}, 0), &got).ok());
  EXPECT_EQ(decoder.stats().viewed_tensors, 0u);
  EXPECT_EQ(decoder.stats().copied_tensors, 2u);
}

// What a trainer receives is its own: writing into one decoded step's tensors (views) changes
// neither the other tensors of its frame nor any later frame decoded by the same decoder.
TEST(StepFrameViewsTest, WritingAViewChangesThatTensorOnly) {
  const StepFrame sent = TwoTensors();
  const std::string frame = Encoded(sent);
  const size_t payload = PayloadStart(frame);
  StepFrameDecoder decoder(nullptr, nullptr, true);
  StepFrame first;
  ASSERT_TRUE(decoder.Decode(Cut(frame, {payload}, 0), &first).ok());
  ASSERT_EQ(decoder.stats().viewed_tensors, 2u);
  Tensor a = first.steps[0].pieces[0][0];
  Tensor b = first.steps[0].pieces[0][1];
  std::memset(a.mutable_raw_data(), 0xff, a.byte_size());
  EXPECT_TRUE(b.Equals(sent.steps[0].pieces[0][1]));
  for (int i = 0; i < 3; ++i) {
    StepFrame next;
    ASSERT_TRUE(decoder.Decode(Cut(frame, {payload}, 0), &next).ok());
    EXPECT_TRUE(next.steps[0].pieces[0][0].Equals(sent.steps[0].pieces[0][0])) << i;
    std::memset(next.steps[0].pieces[0][1].mutable_raw_data(), 0, 5000);
  }
  EXPECT_TRUE(b.Equals(sent.steps[0].pieces[0][1]));
  const auto* bytes = static_cast<const uint8_t*>(a.raw_data());
  EXPECT_EQ(bytes[0], 0xff);
  EXPECT_EQ(bytes[a.byte_size() - 1], 0xff);
}

}  // namespace
}  // namespace sluice
