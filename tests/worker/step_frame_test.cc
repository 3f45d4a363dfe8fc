#include "core/rpc/step_frame.h"

#include <cstring>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace sluice {
namespace {

Tensor Filled(DType dtype, const Shape& shape) {
  Tensor t = Tensor::Allocate(dtype, shape);
  auto* p = static_cast<uint8_t*>(t.mutable_raw_data());
  for (size_t i = 0; i < t.byte_size(); ++i) p[i] = static_cast<uint8_t>(i * 7 + 3);
  return t;
}

std::vector<grpc::Slice> SlicesOf(const grpc::ByteBuffer& bb) {
  std::vector<grpc::Slice> slices;
  EXPECT_TRUE(bb.Dump(&slices).ok());
  return slices;
}

std::string Flatten(const grpc::ByteBuffer& bb) {
  std::string out;
  for (const grpc::Slice& s : SlicesOf(bb)) out.append(reinterpret_cast<const char*>(s.begin()), s.size());
  return out;
}

grpc::ByteBuffer FromString(const std::string& bytes) {
  grpc::Slice s(bytes);
  return grpc::ByteBuffer(&s, 1);
}

void ExpectSameFrame(const StepFrame& a, const StepFrame& b) {
  ASSERT_EQ(a.steps.size(), b.steps.size());
  EXPECT_EQ(a.end_of_task, b.end_of_task);
  for (size_t s = 0; s < a.steps.size(); ++s) {
    EXPECT_EQ(a.steps[s].task_step, b.steps[s].task_step);
    EXPECT_EQ(a.steps[s].global_step, b.steps[s].global_step);
    EXPECT_EQ(a.steps[s].num_real_pieces, b.steps[s].num_real_pieces);
    ASSERT_EQ(a.steps[s].pieces.size(), b.steps[s].pieces.size());
    for (size_t p = 0; p < a.steps[s].pieces.size(); ++p) {
      ASSERT_EQ(a.steps[s].pieces[p].size(), b.steps[s].pieces[p].size());
      for (size_t i = 0; i < a.steps[s].pieces[p].size(); ++i) {
        EXPECT_TRUE(a.steps[s].pieces[p][i].Equals(b.steps[s].pieces[p][i]))
            << "step " << s << " piece " << p << " tensor " << i;
      }
    }
  }
}

TEST(StepFrameTest, RoundTripsEveryDTypeAndEmptyTensors) {
  StepFrame frame;
  WireStep step;
  step.task_step = 5;
  step.global_step = 11;
  step.num_real_pieces = 2;
  std::vector<Tensor> piece;
  for (int d = static_cast<int>(DType::kBool); d < static_cast<int>(DType::kString); ++d) {
    piece.push_back(Filled(static_cast<DType>(d), Shape({3, 2})));
    piece.push_back(Filled(static_cast<DType>(d), Shape({0, 4})));  // empty
  }
  piece.push_back(Tensor::Scalar<float>(2.5f));
  piece.push_back(Tensor::FromStrings({"", "a", std::string("nul\0byte", 8), "longer string"},
                                      Shape({2, 2})));
  piece.push_back(Tensor::FromStrings({}, Shape({0})));
  piece.push_back(Filled(DType::kFloat32, Shape({4096})));  // zero-copy path (16 KiB)
  step.pieces.push_back(piece);
  step.pieces.push_back({Filled(DType::kInt64, Shape({0})), Tensor::StringScalar("x")});
  frame.steps.push_back(step);
  frame.end_of_task = true;

  grpc::ByteBuffer bb;
  ASSERT_TRUE(EncodeStepFrame(frame, &bb).ok());
  StepFrame decoded;
  ASSERT_TRUE(DecodeStepFrame(bb, nullptr, &decoded).ok());
  ExpectSameFrame(frame, decoded);
  // The decoded numeric tensors do not alias the sender's buffers.
  EXPECT_NE(decoded.steps[0].pieces[0].back().raw_data(), nullptr);
  EXPECT_NE(decoded.steps[0].pieces[0].back().raw_data(), frame.steps[0].pieces[0].back().raw_data());
}

TEST(StepFrameTest, SeveralStepsPerFrameAndSlicedTensors) {
  Tensor big = Filled(DType::kInt32, Shape({4096, 2}));
  StepFrame frame;
  for (int s = 0; s < 5; ++s) {
    WireStep step;
    step.task_step = s;
    step.num_real_pieces = 2;
    // Views into one buffer at offsets, as rebatch produces them.
    step.pieces.push_back({big.Slice(s * 100, s * 100 + 700), Tensor::Scalar<int64_t>(s)});
    step.pieces.push_back({big.Slice(s, s + 1), Tensor::Scalar<int64_t>(-s)});
    frame.steps.push_back(step);
  }
  grpc::ByteBuffer bb;
  ASSERT_TRUE(EncodeStepFrame(frame, &bb).ok());
  // The large slices are sent from the tensor's own buffer.
  bool zero_copy = false;
  for (const grpc::Slice& s : SlicesOf(bb)) {
    if (s.begin() == static_cast<const uint8_t*>(frame.steps[1].pieces[0][0].raw_data())) {
      zero_copy = true;
    }
  }
  EXPECT_TRUE(zero_copy);
  StepFrame decoded;
  ASSERT_TRUE(DecodeStepFrame(bb, nullptr, &decoded).ok());
  ExpectSameFrame(frame, decoded);
}

TEST(StepFrameTest, ZeroCopySliceKeepsTensorAlive) {
  grpc::ByteBuffer bb;
  Tensor expected;
  {
    Tensor t = Filled(DType::kUInt8, Shape({1 << 16}));
    expected = Tensor::Allocate(DType::kUInt8, t.shape());
    std::memcpy(expected.mutable_raw_data(), t.raw_data(), t.byte_size());
    StepFrame frame;
    frame.steps.push_back(WireStep{0, -1, 1, {{t}}});
    ASSERT_TRUE(EncodeStepFrame(frame, &bb).ok());
  }  // the frame and `t` are gone; the ByteBuffer still holds the bytes
  StepFrame decoded;
  ASSERT_TRUE(DecodeStepFrame(bb, nullptr, &decoded).ok());
  EXPECT_TRUE(decoded.steps[0].pieces[0][0].Equals(expected));
}

TEST(StepFrameTest, DecodesFramesSplitAtArbitrarySliceBoundaries) {
  StepFrame frame;
  frame.steps.push_back(WireStep{3, -1, 1, {{Filled(DType::kFloat64, Shape({700})),
                                              Tensor::FromStrings({"ab", "cde"}, Shape({2}))}}});
  grpc::ByteBuffer bb;
  ASSERT_TRUE(EncodeStepFrame(frame, &bb).ok());
  const std::string bytes = Flatten(bb);
  for (size_t chunk : {1u, 3u, 7u, 1000u}) {
    std::vector<grpc::Slice> slices;
    for (size_t i = 0; i < bytes.size(); i += chunk) {
      slices.emplace_back(bytes.data() + i, std::min(chunk, bytes.size() - i));
    }
    grpc::ByteBuffer split(slices.data(), slices.size());
    StepFrame decoded;
    ASSERT_TRUE(DecodeStepFrame(split, nullptr, &decoded).ok()) << chunk;
    ExpectSameFrame(frame, decoded);
  }
}

TEST(StepFrameTest, UsesTheInjectedAllocator) {
  StepFrame frame;
  frame.steps.push_back(WireStep{0, -1, 1, {{Filled(DType::kInt16, Shape({10})),
                                              Filled(DType::kInt16, Shape({0}))}}});
  grpc::ByteBuffer bb;
  ASSERT_TRUE(EncodeStepFrame(frame, &bb).ok());
  std::vector<size_t> requests;
  TensorAllocator alloc = [&](size_t bytes) {
    requests.push_back(bytes);
    return AllocateUninitializedHost(bytes);
  };
  StepFrame decoded;
  ASSERT_TRUE(DecodeStepFrame(bb, alloc, &decoded).ok());
  EXPECT_THAT(requests, ::testing::ElementsAre(20u));  // empty tensors need no buffer
  ExpectSameFrame(frame, decoded);

  TensorAllocator failing = [](size_t) { return std::shared_ptr<TensorBuffer>(); };
  EXPECT_EQ(DecodeStepFrame(bb, failing, &decoded).code(), absl::StatusCode::kResourceExhausted);
}

// A frame of several steps and tensors is decoded into one buffer: one allocation of the
// numeric payload at 64-byte aligned offsets, every tensor a view of it.
TEST(StepFrameTest, DecodesAFrameIntoOneBufferWithTensorsAsViews) {
  StepFrame frame;
  for (int64_t s = 0; s < 3; ++s) {
    frame.steps.push_back(WireStep{s, -1, 2, {{Filled(DType::kInt32, Shape({5})),
                                               Tensor::FromStrings({"ab", "c"}, Shape({2}))},
                                              {Filled(DType::kFloat64, Shape({3}))}}});
  }
  grpc::ByteBuffer bb;
  ASSERT_TRUE(EncodeStepFrame(frame, &bb).ok());
  std::vector<size_t> requests;
  TensorAllocator alloc = [&](size_t bytes) {
    requests.push_back(bytes);
    return AllocateUninitializedHost(bytes);
  };
  StepFrame decoded;
  ASSERT_TRUE(DecodeStepFrame(bb, alloc, &decoded).ok());
  // Per step: 20 bytes at offset 0 (mod 64) and 24 at the next 64-byte boundary.
  EXPECT_THAT(requests, ::testing::ElementsAre(64u * 5 + 24u));
  ExpectSameFrame(frame, decoded);
  const std::shared_ptr<TensorBuffer>& buffer = decoded.steps[0].pieces[0][0].buffer();
  size_t expected_offset = 0;
  for (const WireStep& step : decoded.steps) {
    EXPECT_EQ(step.pieces[0][0].buffer(), buffer);
    EXPECT_EQ(step.pieces[0][0].buffer_offset(), expected_offset);
    EXPECT_EQ(step.pieces[1][0].buffer(), buffer);
    EXPECT_EQ(step.pieces[1][0].buffer_offset(), expected_offset + 64);
    expected_offset += 128;
  }
}

TEST(StepFrameTest, ShortAndPaddedFramesAreDataLoss) {
  StepFrame frame;
  frame.steps.push_back(WireStep{0, -1, 1, {{Filled(DType::kInt32, Shape({64}))}}});
  grpc::ByteBuffer bb;
  ASSERT_TRUE(EncodeStepFrame(frame, &bb).ok());
  const std::string bytes = Flatten(bb);
  StepFrame decoded;
  // Every truncation fails cleanly.
  for (size_t n = 0; n < bytes.size(); ++n) {
    absl::Status s = DecodeStepFrame(FromString(bytes.substr(0, n)), nullptr, &decoded);
    EXPECT_FALSE(s.ok()) << n;
    EXPECT_TRUE(s.code() == absl::StatusCode::kDataLoss ||
                s.code() == absl::StatusCode::kInvalidArgument)
        << n << ": " << s;
  }
  EXPECT_EQ(DecodeStepFrame(FromString(bytes.substr(0, bytes.size() - 1)), nullptr, &decoded).code(),
            absl::StatusCode::kDataLoss);
  EXPECT_EQ(DecodeStepFrame(FromString(bytes + "x"), nullptr, &decoded).code(),
            absl::StatusCode::kDataLoss);
  EXPECT_EQ(DecodeStepFrame(grpc::ByteBuffer(), nullptr, &decoded).code(),
            absl::StatusCode::kDataLoss);
}

TEST(StepFrameTest, CorruptHeadersAreInvalidArgument) {
  auto frame_with = [](const proto::StepFrameHeader& h, const std::string& payload) {
    std::string header = h.SerializeAsString();
    std::string bytes(4, '\0');
    const uint32_t n = static_cast<uint32_t>(header.size());
    for (int i = 0; i < 4; ++i) bytes[i] = static_cast<char>((n >> (8 * i)) & 0xff);
    return FromString(bytes + header + payload);
  };
  StepFrame decoded;
  proto::StepFrameHeader h;
  proto::TensorHeader* t = h.add_steps()->add_pieces()->add_tensors();
  t->set_dtype(proto::DT_INT32);
  t->add_shape(2);
  t->set_byte_size(8);
  ASSERT_TRUE(DecodeStepFrame(frame_with(h, std::string(8, 'a')), nullptr, &decoded).ok());

  proto::StepFrameHeader bad = h;
  bad.mutable_steps(0)->mutable_pieces(0)->mutable_tensors(0)->set_byte_size(7);
  EXPECT_EQ(DecodeStepFrame(frame_with(bad, std::string(7, 'a')), nullptr, &decoded).code(),
            absl::StatusCode::kInvalidArgument);
  bad = h;
  bad.mutable_steps(0)->mutable_pieces(0)->mutable_tensors(0)->set_dtype(
      static_cast<proto::DataType>(99));
  EXPECT_EQ(DecodeStepFrame(frame_with(bad, std::string(8, 'a')), nullptr, &decoded).code(),
            absl::StatusCode::kInvalidArgument);
  bad = h;
  bad.mutable_steps(0)->mutable_pieces(0)->mutable_tensors(0)->set_shape(0, -2);
  EXPECT_EQ(DecodeStepFrame(frame_with(bad, std::string(8, 'a')), nullptr, &decoded).code(),
            absl::StatusCode::kInvalidArgument);
  bad = h;  // a huge tensor the frame does not carry: refused before allocating
  bad.mutable_steps(0)->mutable_pieces(0)->mutable_tensors(0)->set_shape(0, int64_t{1} << 40);
  bad.mutable_steps(0)->mutable_pieces(0)->mutable_tensors(0)->set_byte_size(uint64_t{4} << 40);
  EXPECT_EQ(DecodeStepFrame(frame_with(bad, std::string(8, 'a')), nullptr, &decoded).code(),
            absl::StatusCode::kDataLoss);
  bad = h;  // string lengths that do not add up
  auto* st = bad.mutable_steps(0)->mutable_pieces(0)->mutable_tensors(0);
  st->set_dtype(proto::DT_STRING);
  st->add_string_lengths(3);
  EXPECT_EQ(DecodeStepFrame(frame_with(bad, std::string(8, 'a')), nullptr, &decoded).code(),
            absl::StatusCode::kInvalidArgument);
  // Garbage where the header should be.
  std::string garbage = std::string("\x05\x00\x00\x00", 4) + "\xff\xff\xff\xff\xff";
  EXPECT_EQ(DecodeStepFrame(FromString(garbage), nullptr, &decoded).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(StepFrameTest, ErrorStatusRoundTrips) {
  StepFrame frame;
  frame.steps.push_back(WireStep{0, -1, 1, {{Tensor::Scalar<int32_t>(1)}}});
  frame.status = absl::NotFoundError("input.txt: no such file");
  grpc::ByteBuffer bb;
  ASSERT_TRUE(EncodeStepFrame(frame, &bb).ok());
  StepFrame decoded;
  ASSERT_TRUE(DecodeStepFrame(bb, nullptr, &decoded).ok());
  EXPECT_EQ(decoded.status, frame.status);
  ExpectSameFrame(frame, decoded);
}

TEST(StepFrameTest, ConsumerMessagesRoundTrip) {
  proto::ConsumerMessage m;
  m.mutable_request()->set_job_id(3);
  m.mutable_request()->set_task_id(4);
  m.mutable_request()->set_start_step(9);
  proto::ConsumerMessage back;
  ASSERT_TRUE(DecodeConsumerMessage(EncodeConsumerMessage(m), &back).ok());
  EXPECT_EQ(back.request().task_id(), 4);
  EXPECT_EQ(back.request().start_step(), 9);
  const std::string bytes = Flatten(EncodeConsumerMessage(m));
  EXPECT_EQ(DecodeConsumerMessage(FromString(bytes.substr(0, 3)), &back).code(),
            absl::StatusCode::kDataLoss);
  EXPECT_EQ(DecodeConsumerMessage(FromString(bytes + "zz"), &back).code(),
            absl::StatusCode::kDataLoss);
}

}  // namespace
}  // namespace sluice
