// Wire compression of step frames (core/rpc/wire_compression.h, core/rpc/step_frame.h): frames
// round-trip through LZ4 and zstd in both header forms, a payload that does not shrink goes
// raw, the codec is chosen only for a consumer that accepts it and is remote (unless forced),
// and the sizes a compressed header claims are checked before anything is allocated.
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/rpc/step_frame.h"
#include "core/rpc/wire_compression.h"
#include "gtest/gtest.h"
#include "tests/worker/step_frame_test_util.h"

namespace sluice {
namespace {

proto::StepFrameHeader HeaderOf(const std::string& frame) {
  uint32_t len = 0;
  std::memcpy(&len, frame.data(), 4);
  proto::StepFrameHeader h;
  EXPECT_TRUE(h.ParseFromArray(frame.data() + 4, static_cast<int>(len)));
  return h;
}

// Replaces the header of `frame` by `h`, keeping the payload.
std::string WithHeader(const std::string& frame, const proto::StepFrameHeader& h) {
  uint32_t len = 0;
  std::memcpy(&len, frame.data(), 4);
  const std::string header = h.SerializeAsString();
  const uint32_t n = static_cast<uint32_t>(header.size());
  std::string out(reinterpret_cast<const char*>(&n), 4);
  return out + header + frame.substr(4 + len);
}

// Two steps of compressible tensors: a float ramp, repeated int32 rows and strings.
StepFrame Compressible() {
  StepFrame f;
  for (int s = 0; s < 2; ++s) {
    WireStep step;
    step.task_step = s;
    step.num_real_pieces = 1;
    Tensor x = Tensor::Allocate(DType::kFloat32, Shape({64, 128}));
    for (int i = 0; i < 64 * 128; ++i) x.mutable_data<float>()[i] = static_cast<float>(i % 128);
    Tensor y = Tensor::Allocate(DType::kInt32, Shape({100}));
    for (int i = 0; i < 100; ++i) y.mutable_data<int32_t>()[i] = 7;
    Tensor z = Tensor::FromStrings({"abcabcabc", "", "abcabcabcabc"}, Shape({3}));
    step.pieces.push_back({x, y, z});
    f.steps.push_back(std::move(step));
  }
  f.end_of_task = true;
  return f;
}

// The bytes of `frame` encoded with `codec` (full headers).
std::string CompressedWith(WireCompression codec, const StepFrame& frame) {
  StepFrameEncoder encoder(nullptr, codec);
  grpc::ByteBuffer bb;
  EXPECT_TRUE(encoder.Encode(frame, &bb).ok());
  return Flatten(bb);
}

class CodecTest : public ::testing::TestWithParam<WireCompression> {};

TEST_P(CodecTest, FramesRoundTripCompressedInBothHeaderForms) {
  const StepFrame sent = Compressible();
  auto spec = std::make_shared<const CompactSpec>(CompactSpec::FromElementSpec(ElementSpec::Tuple(
      {ElementSpec(TensorSpec{DType::kFloat32, Shape({64, 128})}),
       ElementSpec(TensorSpec{DType::kInt32, Shape({-1})}),
       ElementSpec(TensorSpec{DType::kString, Shape({3})})})));
  for (bool compact : {false, true}) {
    StepFrameEncoder encoder(compact ? spec : nullptr, GetParam());
    StepFrameDecoder decoder(nullptr, compact ? spec : nullptr);
    for (int round = 0; round < 3; ++round) {  // reused state carries nothing over
      grpc::ByteBuffer bb;
      ASSERT_TRUE(encoder.Encode(sent, &bb).ok());
      const std::string wire = Flatten(bb);
      const proto::StepFrameHeader h = HeaderOf(wire);
      EXPECT_EQ(static_cast<int>(h.compression()), static_cast<int>(GetParam()));
      const size_t raw = 2 * (64 * 128 * 4 + 400 + 21);
      EXPECT_EQ(h.raw_payload_bytes(), raw);
      EXPECT_LT(h.compressed_bytes(), raw / 4) << WireCompressionName(GetParam());
      EXPECT_EQ(encoder.last_compact(), compact);
      StepFrame got;
      ASSERT_TRUE(decoder.Decode(FromString(wire), &got).ok());
      ExpectSameFrame(sent, got);
    }
    EXPECT_EQ(encoder.compression_stats().frames_compressed, 3u);
    EXPECT_EQ(decoder.stats().compressed_frames, 3u);
    EXPECT_EQ(decoder.stats().decompressed_bytes, 3 * 2 * (64u * 128 * 4 + 400 + 21));
  }
}

TEST_P(CodecTest, APayloadThatDoesNotShrinkGoesRaw) {
  std::mt19937 rng(28);  // seed printed by the failure message's frame contents
  Tensor noise = Tensor::Allocate(DType::kUInt8, Shape({65536}));
  for (int i = 0; i < 65536; ++i) noise.mutable_data<uint8_t>()[i] = static_cast<uint8_t>(rng());
  StepFrame sent;
  WireStep step;
  step.pieces.push_back({noise});
  sent.steps.push_back(step);
  StepFrameEncoder encoder(nullptr, GetParam());
  grpc::ByteBuffer bb;
  ASSERT_TRUE(encoder.Encode(sent, &bb).ok());
  const std::string wire = Flatten(bb);
  EXPECT_EQ(HeaderOf(wire).compression(), proto::WIRE_COMPRESSION_NONE);
  EXPECT_EQ(encoder.compression_stats().frames_raw, 1u);
  StepFrame got;
  ASSERT_TRUE(StepFrameDecoder(nullptr, nullptr).Decode(FromString(wire), &got).ok());
  ExpectSameFrame(sent, got);
  // A frame without steps (the end, an error) has nothing to compress.
  StepFrame end;
  end.end_of_task = true;
  ASSERT_TRUE(encoder.Encode(end, &bb).ok());
  EXPECT_EQ(HeaderOf(Flatten(bb)).compression(), proto::WIRE_COMPRESSION_NONE);
}

TEST_P(CodecTest, SizesAHeaderClaimsAreCheckedBeforeAllocating) {
  const StepFrame sent = Compressible();
  const std::string wire = CompressedWith(GetParam(), sent);
  const proto::StepFrameHeader good = HeaderOf(wire);
  int allocations = 0;
  TensorAllocator counting = [&allocations](size_t bytes) {
    ++allocations;
    return AllocateUninitializedHost(bytes);
  };
  StepFrameDecoder decoder(counting, nullptr);
  StepFrame got;

  // compressed_bytes other than what follows.
  proto::StepFrameHeader h = good;
  h.set_compressed_bytes(good.compressed_bytes() + 1);
  absl::Status s = decoder.Decode(FromString(WithHeader(wire, h)), &got);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_NE(s.message().find("compressed bytes"), std::string::npos) << s;
  // A raw size no codec makes of these bytes (a hostile "decompression bomb" claim).
  h = good;
  h.set_raw_payload_bytes(uint64_t{1} << 50);
  s = decoder.Decode(FromString(WithHeader(wire, h)), &got);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_NE(s.message().find("cannot decompress"), std::string::npos) << s;
  // A raw size the tensors do not describe.
  h = good;
  h.set_raw_payload_bytes(good.raw_payload_bytes() - 1);
  s = decoder.Decode(FromString(WithHeader(wire, h)), &got);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  // More than the credit granted.
  s = decoder.Decode(FromString(wire), &got, FrameCreditLimit{1000, 1 << 30});
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_EQ(allocations, 0);
  // An unknown codec.
  h = good;
  h.set_compression(static_cast<proto::WireCompression>(9));
  s = decoder.Decode(FromString(WithHeader(wire, h)), &got);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  // A refused allocation: RESOURCE_EXHAUSTED, nothing decompressed.
  StepFrameDecoder refused([](size_t) { return nullptr; }, nullptr);
  s = refused.Decode(FromString(wire), &got);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  // The decoder still decodes after all that.
  ASSERT_TRUE(decoder.Decode(FromString(wire), &got).ok());
  ExpectSameFrame(sent, got);
}

TEST_P(CodecTest, CorruptOrTruncatedDataIsDataLoss) {
  const StepFrame sent = Compressible();
  const std::string wire = CompressedWith(GetParam(), sent);
  const proto::StepFrameHeader good = HeaderOf(wire);
  const size_t payload_at = wire.size() - good.compressed_bytes();
  StepFrameDecoder decoder(nullptr, nullptr);
  StepFrame got;
  // Every byte of the compressed payload flipped in turn: DATA_LOSS (the frames' checksums
  // catch what the format does not), or, where the change still decodes to the very same
  // bytes (a match offset moved by a multiple of the data's period), the frame that was sent;
  // never different data.
  int refused = 0;
  for (size_t i = payload_at; i < wire.size(); ++i) {
    std::string bad = wire;
    bad[i] = static_cast<char>(bad[i] ^ 0x5a);
    absl::Status s = decoder.Decode(FromString(bad), &got);
    if (s.ok()) {
      ExpectSameFrame(sent, got);
      continue;
    }
    ASSERT_EQ(s.code(), absl::StatusCode::kDataLoss) << "byte " << i << ": " << s;
    ++refused;
  }
  EXPECT_GT(refused, static_cast<int>(good.compressed_bytes()) * 9 / 10);
  // Truncated: the header's compressed size adjusted to what is left, so only the codec
  // can tell.
  for (size_t keep : {size_t{0}, size_t{1}, good.compressed_bytes() / 2,
                      static_cast<size_t>(good.compressed_bytes() - 1)}) {
    proto::StepFrameHeader h = good;
    h.set_compressed_bytes(keep);
    std::string bad = WithHeader(wire, h);
    bad.resize(bad.size() - (good.compressed_bytes() - keep));
    absl::Status s = decoder.Decode(FromString(bad), &got);
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << keep << ": " << s;
  }
  ASSERT_TRUE(decoder.Decode(FromString(wire), &got).ok());
  ExpectSameFrame(sent, got);
}

INSTANTIATE_TEST_SUITE_P(Codecs, CodecTest,
                         ::testing::Values(WireCompression::kLz4, WireCompression::kZstd),
                         [](const auto& info) { return std::string(WireCompressionName(info.param)); });

TEST(WireCompressionTest, TheJobsCodecOnlyForAConsumerThatAcceptsItAndIsRemote) {
  proto::JobOptions job;
  job.set_compression(proto::WIRE_COMPRESSION_ZSTD);
  google::protobuf::RepeatedField<int> both;
  both.Add(proto::WIRE_COMPRESSION_LZ4);
  both.Add(proto::WIRE_COMPRESSION_ZSTD);
  google::protobuf::RepeatedField<int> lz4_only;
  lz4_only.Add(proto::WIRE_COMPRESSION_LZ4);
  const google::protobuf::RepeatedField<int> none;
  EXPECT_EQ(ChooseWireCompression(job, both, "ipv4:10.1.2.3:5000"), WireCompression::kZstd);
  EXPECT_EQ(ChooseWireCompression(job, both, "ipv6:[2001:db8::1]:5000"), WireCompression::kZstd);
  EXPECT_EQ(ChooseWireCompression(job, lz4_only, "ipv4:10.1.2.3:5000"), WireCompression::kNone);
  EXPECT_EQ(ChooseWireCompression(job, none, "ipv4:10.1.2.3:5000"), WireCompression::kNone);
  // Loopback: raw unless forced.
  for (const char* local : {"ipv4:127.0.0.1:4000", "ipv6:[::1]:4000", "ipv6:%5B::1%5D:4000",
                            "unix:/tmp/sock"}) {
    EXPECT_EQ(ChooseWireCompression(job, both, local), WireCompression::kNone) << local;
  }
  job.set_force_compression(true);
  EXPECT_EQ(ChooseWireCompression(job, both, "ipv4:127.0.0.1:4000"), WireCompression::kZstd);
  job.set_compression(proto::WIRE_COMPRESSION_NONE);
  EXPECT_EQ(ChooseWireCompression(job, both, "ipv4:10.1.2.3:5000"), WireCompression::kNone);
}

TEST(WireCompressionTest, NamesParse) {
  for (WireCompression c : {WireCompression::kNone, WireCompression::kLz4, WireCompression::kZstd}) {
    absl::StatusOr<WireCompression> parsed = ParseWireCompression(WireCompressionName(c));
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, c);
  }
  EXPECT_EQ(ParseWireCompression("gzip").status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace sluice
