#include "core/rpc/step_frame.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <set>
#include <vector>

#include "core/tensor/host_memory.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/worker/step_frame_test_util.h"

namespace sluice {
namespace {

Tensor Filled(DType dtype, const Shape& shape) {
  Tensor t = Tensor::Allocate(dtype, shape);
  auto* p = static_cast<uint8_t*>(t.mutable_raw_data());
  for (size_t i = 0; i < t.byte_size(); ++i) p[i] = static_cast<uint8_t>(i * 7 + 3);
  return t;
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


// ---- Compact headers (StreamRequest.compact_headers) ----

// uint8 (16,) static, int32 (-1, 3) partly dynamic, string (2,) static shape, float32 (-1, -1).
std::shared_ptr<const CompactSpec> MixedSpec() {
  return std::make_shared<const CompactSpec>(CompactSpec::FromElementSpec(ElementSpec::Tuple(
      {ElementSpec(TensorSpec{DType::kUInt8, Shape({16})}),
       ElementSpec(TensorSpec{DType::kInt32, Shape({-1, 3})}),
       ElementSpec(TensorSpec{DType::kString, Shape({2})}),
       ElementSpec(TensorSpec{DType::kFloat32, Shape({-1, -1})})})));
}

std::vector<Tensor> MixedPiece(int64_t s) {
  return {Filled(DType::kUInt8, Shape({16})), Filled(DType::kInt32, Shape({s + 1, 3})),
          Tensor::FromStrings({std::string(static_cast<size_t>(s), 'x'), "tail"}, Shape({2})),
          Filled(DType::kFloat32, Shape({s % 3, 1100}))};  // >= 4 KiB for s % 3 > 0: zero-copy
}

StepFrame MixedFrame(int num_steps, int pieces) {
  StepFrame frame;
  for (int s = 0; s < num_steps; ++s) {
    WireStep step{100 + s, s % 2 == 0 ? -1 : 7 * s, pieces, {}};
    for (int p = 0; p < pieces; ++p) step.pieces.push_back(MixedPiece(s + p));
    frame.steps.push_back(std::move(step));
  }
  return frame;
}

proto::StepFrameHeader HeaderOf(const grpc::ByteBuffer& bb) {
  const std::string bytes = Flatten(bb);
  uint32_t n = 0;
  for (int i = 0; i < 4; ++i) n |= uint32_t{static_cast<uint8_t>(bytes[i])} << (8 * i);
  proto::StepFrameHeader h;
  EXPECT_TRUE(h.ParseFromString(bytes.substr(4, n)));
  return h;
}

TEST(StepFrameCompactTest, RoundTripsStaticPartlyDynamicAndStringTensorsSeveralStepsAFrame) {
  auto spec = MixedSpec();
  StepFrameEncoder encoder(spec);
  StepFrameDecoder decoder(nullptr, spec);
  // Several frames through the same encoder and decoder: their reused state carries nothing
  // from one frame to the next.
  for (int num_steps : {1, 5, 2, 16}) {
    StepFrame frame = MixedFrame(num_steps, 2);
    frame.end_of_task = num_steps == 16;
    grpc::ByteBuffer bb;
    ASSERT_TRUE(encoder.Encode(frame, &bb).ok());
    EXPECT_TRUE(encoder.last_compact());
    const proto::StepFrameHeader h = HeaderOf(bb);
    EXPECT_EQ(h.steps_size(), 0);
    EXPECT_EQ(h.compact_steps(), static_cast<uint32_t>(num_steps));
    StepFrame decoded;
    ASSERT_TRUE(decoder.Decode(bb, &decoded).ok()) << num_steps;
    ExpectSameFrame(frame, decoded);
    EXPECT_TRUE(decoded.status.ok());
  }
}

TEST(StepFrameCompactTest, CarriesOnlyTheOpenValues) {
  // The worked example of proto/worker.proto.
  auto spec = std::make_shared<const CompactSpec>(CompactSpec::FromElementSpec(
      ElementSpec::Tuple({ElementSpec(TensorSpec{DType::kUInt8, Shape({1024})}),
                          ElementSpec(TensorSpec{DType::kInt32, Shape({-1, 3})}),
                          ElementSpec(TensorSpec{DType::kString, Shape({2})})})));
  StepFrame frame;
  frame.steps.push_back(WireStep{7, -1, 1,
                                 {{Filled(DType::kUInt8, Shape({1024})),
                                   Filled(DType::kInt32, Shape({5, 3})),
                                   Tensor::FromStrings({"ab", "cde"}, Shape({2}))}}});
  StepFrameEncoder encoder(spec);
  grpc::ByteBuffer bb;
  ASSERT_TRUE(encoder.Encode(frame, &bb).ok());
  const proto::StepFrameHeader h = HeaderOf(bb);
  EXPECT_THAT(h.compact_values(), testing::ElementsAre(7, -1, 1, 1, 5, 2, 3));
  EXPECT_EQ(bb.Length(), 4 + h.ByteSizeLong() + 1024 + 60 + 5);
  // A static 1 KiB step: a few header bytes against ~20 for the full form.
  auto static_spec = std::make_shared<const CompactSpec>(
      CompactSpec::FromElementSpec(ElementSpec(TensorSpec{DType::kUInt8, Shape({1024})})));
  StepFrame one;
  one.steps.push_back(WireStep{3, -1, 1, {{Filled(DType::kUInt8, Shape({1024}))}}});
  StepFrameEncoder compact(static_spec);
  grpc::ByteBuffer a, b;
  ASSERT_TRUE(compact.Encode(one, &a).ok());
  ASSERT_TRUE(EncodeStepFrame(one, &b).ok());
  EXPECT_LE(HeaderOf(a).ByteSizeLong(), 8u);
  EXPECT_LT(HeaderOf(a).ByteSizeLong() + 10, HeaderOf(b).ByteSizeLong());
}

TEST(StepFrameCompactTest, FallsBackToFullHeadersWhenATensorDoesNotMatchTheSpec) {
  auto spec = MixedSpec();
  StepFrameEncoder encoder(spec);
  StepFrameDecoder decoder(nullptr, spec);
  for (int which = 0; which < 4; ++which) {
    StepFrame frame = MixedFrame(3, 1);
    std::vector<Tensor>& piece = frame.steps[1].pieces[0];
    switch (which) {
      case 0: piece[0] = Filled(DType::kUInt8, Shape({0})); break;    // a size-0 dummy
      case 1: piece[1] = Filled(DType::kInt64, Shape({2, 3})); break;  // another dtype
      case 2: piece[3] = Filled(DType::kFloat32, Shape({4})); break;   // another rank
      case 3: piece.pop_back(); break;                                 // a leaf missing
    }
    grpc::ByteBuffer bb;
    ASSERT_TRUE(encoder.Encode(frame, &bb).ok());
    EXPECT_FALSE(encoder.last_compact()) << which;
    EXPECT_EQ(HeaderOf(bb).steps_size(), 3);
    StepFrame decoded;
    ASSERT_TRUE(decoder.Decode(bb, &decoded).ok()) << which;
    ExpectSameFrame(frame, decoded);
  }
}

TEST(StepFrameCompactTest, WithoutASpecFramesAreFullAndACompactOneIsRefused) {
  StepFrame frame = MixedFrame(2, 1);
  StepFrameEncoder full;  // a consumer that did not ask
  grpc::ByteBuffer bb;
  ASSERT_TRUE(full.Encode(frame, &bb).ok());
  EXPECT_FALSE(full.last_compact());
  EXPECT_EQ(HeaderOf(bb).compact_steps(), 0u);
  EXPECT_EQ(HeaderOf(bb).steps_size(), 2);
  StepFrame decoded;
  ASSERT_TRUE(DecodeStepFrame(bb, nullptr, &decoded).ok());
  ExpectSameFrame(frame, decoded);

  StepFrameEncoder compact(MixedSpec());
  ASSERT_TRUE(compact.Encode(frame, &bb).ok());
  absl::Status s = DecodeStepFrame(bb, nullptr, &decoded);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(std::string(s.message()), testing::HasSubstr("did not ask"));
}

TEST(StepFrameCompactTest, SpecsRoundTripAndBadOnesAreRefused) {
  auto spec = MixedSpec();
  proto::StreamRequest request;
  spec->ToProto(request.mutable_compact_spec());
  absl::StatusOr<CompactSpec> back = CompactSpec::FromProto(request.compact_spec());
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->leaves(), spec->leaves());
  proto::StreamRequest bad = request;
  bad.mutable_compact_spec(1)->set_shape(0, -2);
  EXPECT_EQ(CompactSpec::FromProto(bad.compact_spec()).status().code(),
            absl::StatusCode::kInvalidArgument);
  bad = request;
  bad.mutable_compact_spec(2)->set_dtype(static_cast<proto::DataType>(42));
  absl::Status s = CompactSpec::FromProto(bad.compact_spec()).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), testing::HasSubstr("leaf 2"));
}

grpc::ByteBuffer FrameWith(const proto::StepFrameHeader& h, const std::string& payload) {
  std::string header = h.SerializeAsString();
  std::string bytes(4, '\0');
  const uint32_t n = static_cast<uint32_t>(header.size());
  for (int i = 0; i < 4; ++i) bytes[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  return FromString(bytes + header + payload);
}

TEST(StepFrameCompactTest, MalformedCompactHeadersAreInvalidArgumentNamingTheTensor) {
  // Spec: int32 (-1, 2) and string (2,). A good frame: step 9, one piece, dims 3, "ab" "c".
  auto spec = std::make_shared<const CompactSpec>(CompactSpec::FromElementSpec(
      ElementSpec::Tuple({ElementSpec(TensorSpec{DType::kInt32, Shape({-1, 2})}),
                          ElementSpec(TensorSpec{DType::kString, Shape({2})})})));
  StepFrameDecoder decoder(nullptr, spec);
  auto header = [](std::vector<int64_t> values, uint32_t steps = 1) {
    proto::StepFrameHeader h;
    h.set_compact_steps(steps);
    for (int64_t v : values) h.add_compact_values(v);
    return h;
  };
  const std::string payload(24 + 3, 'p');
  StepFrame decoded;
  ASSERT_TRUE(decoder.Decode(FrameWith(header({9, -1, 1, 1, 3, 2, 1}), payload), &decoded).ok());
  ASSERT_EQ(decoded.steps.size(), 1u);
  EXPECT_EQ(decoded.steps[0].pieces[0][0].shape(), Shape({3, 2}));
  EXPECT_EQ(decoded.steps[0].pieces[0][1].string_at(0), "pp");

  struct Case {
    proto::StepFrameHeader h;
    std::string payload;
    std::string message;  // a part of the error's text
  };
  std::vector<Case> cases = {
      {header({9, -1, 1, 1, 3, 2}), payload, "step 9 piece 0 tensor 1"},     // a length missing
      {header({9, -1, 1, 1}), payload, "step 9 piece 0 tensor 0"},           // a dim missing
      {header({9, -1, 1, 1, 3, 2, 1, 5}), payload, "1 value(s) left over"},  // one too many
      {header({9, -1, 1, 1, -3, 2, 1}), payload, "step 9 piece 0 tensor 0: negative dimension"},
      {header({9, -1, 1, 1, 3, -2, 1}), payload, "step 9 piece 0 tensor 1: bad string length"},
      {header({9, -1, 1, -1}), payload, "step 9 has -1 pieces"},
      {header({9, -1, 1, int64_t{1} << 40}), payload, "pieces"},
      {header({9, -1, 1, 1, int64_t{1} << 62, 2, 1}), payload, "shape too large"},
      {header({9, -1, 1, 1, 3, 2, 1}, 2), payload, "2 steps has only 7 values"},
      {header({9, -1, 1, 1, 3, 2, 1, 10, -1, 1}, 2), payload, "ends inside"},
      {header({}, 0), payload, "left over"},  // no values at all but a payload: see below
  };
  cases.back().h.add_compact_values(4);
  for (size_t i = 0; i < cases.size(); ++i) {
    absl::Status s = decoder.Decode(FrameWith(cases[i].h, cases[i].payload), &decoded);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << i << ": " << s;
    EXPECT_THAT(std::string(s.message()), testing::HasSubstr(cases[i].message)) << i;
  }
  // Both forms at once.
  proto::StepFrameHeader both = header({9, -1, 1, 1, 3, 2, 1});
  both.add_steps();
  EXPECT_EQ(decoder.Decode(FrameWith(both, payload), &decoded).code(),
            absl::StatusCode::kInvalidArgument);
  // Byte sizes the payload does not match: a short or padded frame, or a huge dimension the
  // frame does not carry (refused before allocating).
  EXPECT_EQ(decoder.Decode(FrameWith(header({9, -1, 1, 1, 3, 2, 1}), payload + "x"), &decoded)
                .code(),
            absl::StatusCode::kDataLoss);
  EXPECT_EQ(decoder.Decode(FrameWith(header({9, -1, 1, 1, 4, 2, 1}), payload), &decoded).code(),
            absl::StatusCode::kDataLoss);
  EXPECT_EQ(
      decoder.Decode(FrameWith(header({9, -1, 1, 1, int64_t{1} << 30, 2, 1}), payload), &decoded)
          .code(),
      absl::StatusCode::kDataLoss);
  // The decoder still decodes after all that.
  ASSERT_TRUE(decoder.Decode(FrameWith(header({9, -1, 1, 1, 3, 2, 1}), payload), &decoded).ok());
}

// Fuzz-style: every truncation and many byte corruptions of compact frames fail cleanly or
// decode into something consistent; none crashes (the ASan/UBSan build runs this too).
TEST(StepFrameCompactTest, CorruptedCompactFramesNeverCrash) {
  auto spec = MixedSpec();
  StepFrameEncoder encoder(spec);
  StepFrameDecoder decoder(nullptr, spec);
  StepFrame frame = MixedFrame(4, 2);
  grpc::ByteBuffer bb;
  ASSERT_TRUE(encoder.Encode(frame, &bb).ok());
  ASSERT_TRUE(encoder.last_compact());
  const std::string bytes = Flatten(bb);
  const size_t header_end = 4 + HeaderOf(bb).ByteSizeLong();
  StepFrame decoded;
  for (size_t n = 0; n < bytes.size(); n += (n < header_end + 64 ? 1 : 97)) {
    absl::Status s = decoder.Decode(FromString(bytes.substr(0, n)), &decoded);
    EXPECT_TRUE(s.code() == absl::StatusCode::kDataLoss ||
                s.code() == absl::StatusCode::kInvalidArgument)
        << n << ": " << s;
  }
  uint64_t rng = 12345;
  auto next = [&rng] {
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return rng >> 33;
  };
  int ok = 0;
  for (int i = 0; i < 20000; ++i) {
    std::string m = bytes;
    const int flips = 1 + static_cast<int>(next() % 4);
    for (int f = 0; f < flips; ++f) {
      // Mostly the header (where the structure is), sometimes the length prefix.
      const size_t at = next() % header_end;
      m[at] = static_cast<char>(next() & 0xff);
    }
    absl::Status s = decoder.Decode(FromString(m), &decoded);
    if (s.ok()) {
      ++ok;
      for (const WireStep& w : decoded.steps) {
        for (const auto& piece : w.pieces) {
          for (const Tensor& t : piece) EXPECT_TRUE(t.valid());
        }
      }
    }
  }
  // Some corruptions only change values (a step number), which decode.
  EXPECT_GT(ok, 0);
  ASSERT_TRUE(decoder.Decode(bb, &decoded).ok());
  ExpectSameFrame(frame, decoded);
}

// ---- Buffer reuse ----

TEST(StepFrameReuseTest, PooledHostAllocatorReusesReleasedBuffers) {
  TensorAllocator alloc = PooledHostAllocator(/*max_idle_bytes=*/64 << 10);
  ASSERT_TRUE(alloc);
  void* first;
  {
    std::shared_ptr<TensorBuffer> a = alloc(5000);  // size class 8 KiB
    ASSERT_NE(a, nullptr);
    EXPECT_EQ(a->size(), 5000u);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(a->data()) % TensorBuffer::kAlignment, 0u);
    first = a->data();
  }
  std::shared_ptr<TensorBuffer> b = alloc(8000);  // the same class: the same memory again
  EXPECT_EQ(b->data(), first);
  std::shared_ptr<TensorBuffer> c = alloc(8000);  // b is in use: another one
  EXPECT_NE(c->data(), first);
  // Past the idle bound buffers are freed (not observable here beyond not crashing).
  std::vector<std::shared_ptr<TensorBuffer>> many;
  for (int i = 0; i < 4; ++i) many.push_back(alloc(32 << 10));
  many.erase(many.begin() + 1, many.end());
  alloc = nullptr;  // buffers outlive the allocator
  std::memset(many[0]->data(), 1, 32 << 10);
}

// With a total bound (a consumer's receive budget), the pool keeps every buffer that fits in
// it with those still out, beyond the idle bound: a stream of steps a quarter of the budget
// each reuses all of its buffers instead of freeing and faulting in all but one per round.
// Observed through their contents: a buffer kept idle comes back with the bytes it was
// released with, while freed ones are taken by the allocations made in between.
TEST(StepFrameReuseTest, PooledHostAllocatorKeepsWhatFitsInTheTotalBound) {
  constexpr size_t kStep = 256 << 10;
  TensorAllocator alloc = PooledHostAllocator(/*max_idle_bytes=*/kStep,
                                              /*max_total_bytes=*/4 * kStep);
  std::vector<std::shared_ptr<TensorBuffer>> out;
  for (int i = 0; i < 4; ++i) {
    out.push_back(alloc(kStep));
    ASSERT_NE(out.back(), nullptr);
    std::memset(out.back()->data(), 0x5a, kStep);
  }
  std::set<void*> released;
  for (const auto& b : out) released.insert(b->data());
  out.clear();
  // Memory of the same size, written: it reuses whatever the pool freed.
  std::vector<void*> between;
  for (int i = 0; i < 4; ++i) {
    between.push_back(std::aligned_alloc(TensorBuffer::kAlignment, kStep));
    ASSERT_NE(between.back(), nullptr);
    std::memset(between.back(), 0, kStep);
  }
  for (int i = 0; i < 4; ++i) {
    out.push_back(alloc(kStep));
    ASSERT_NE(out.back(), nullptr);
    EXPECT_EQ(released.count(out.back()->data()), 1u) << "buffer " << i << " was not kept";
    EXPECT_EQ(static_cast<const unsigned char*>(out.back()->data())[kStep / 2], 0x5a);
  }
  for (void* p : between) std::free(p);
}

// An allocation the system refuses (a size the budget allows but no address space holds)
// leaves nothing counted as held: afterwards the pool keeps as many buffers as before, and
// the budget is given back.
TEST(StepFrameReuseTest, PooledHostAllocatorForgetsAnAllocationTheSystemRefused) {
  constexpr size_t kStep = 256 << 10;
  TensorAllocator alloc = PooledHostAllocator(/*max_idle_bytes=*/kStep,
                                              /*max_total_bytes=*/4 * kStep);
  MemoryBudget& budget = ProcessMemoryBudget();
  const MemoryLimits saved = budget.limits();
  const int64_t in_use = budget.in_use();
  budget.SetLimits({.process_bytes = int64_t{1} << 62, .element_bytes = int64_t{1} << 62});
  EXPECT_EQ(alloc(size_t{1} << 50), nullptr);  // 1 PiB: more than the address space
  budget.SetLimits(saved);
  EXPECT_EQ(budget.in_use(), in_use);
  std::vector<std::shared_ptr<TensorBuffer>> out;
  for (int i = 0; i < 4; ++i) out.push_back(alloc(kStep));
  std::set<void*> released;
  for (const auto& b : out) released.insert(b->data());
  out.clear();  // all four fit in the total bound with nothing held: all kept
  std::vector<void*> between;  // takes whatever the pool freed
  for (int i = 0; i < 4; ++i) {
    between.push_back(std::aligned_alloc(TensorBuffer::kAlignment, kStep));
    ASSERT_NE(between.back(), nullptr);
  }
  for (int i = 0; i < 4; ++i) {
    out.push_back(alloc(kStep));
    ASSERT_NE(out.back(), nullptr);
    EXPECT_EQ(released.count(out.back()->data()), 1u) << "buffer " << i << " was not kept";
  }
  for (void* p : between) std::free(p);
}

// One encoder over many frames reuses its send buffers; a frame's bytes stay valid after the
// encoder is gone (gRPC may still be sending them).
TEST(StepFrameReuseTest, EncoderFramesOutliveTheEncoderAndStayIntact) {
  auto spec = MixedSpec();
  std::vector<grpc::ByteBuffer> sent;
  std::vector<StepFrame> frames;
  {
    StepFrameEncoder encoder(spec);
    for (int i = 0; i < 20; ++i) {
      frames.push_back(MixedFrame(1 + i % 5, 1 + i % 2));
      grpc::ByteBuffer bb;
      ASSERT_TRUE(encoder.Encode(frames.back(), &bb).ok());
      if (i % 3 == 0) {
        sent.push_back(bb);  // kept: its strings are not reused while held
      }
    }
  }
  StepFrameDecoder decoder(nullptr, spec);
  for (size_t i = 0; i < sent.size(); ++i) {
    StepFrame decoded;
    ASSERT_TRUE(decoder.Decode(sent[i], &decoded).ok()) << i;
    ExpectSameFrame(frames[i * 3], decoded);
  }
}

}  // namespace
}  // namespace sluice
