// The shared-memory transport's pieces (core/rpc/shm_segment.h, shm_fd_passing.h, shm_ring.h)
// and the step-frame codec over a ring: what a hostile peer may send is checked, a segment is
// handed over once, regions are reused only once released, decoded tensors are views of the
// segment with the bytes that were encoded.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <cstdio>
#include <deque>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "core/rpc/shm_fd_passing.h"
#include "core/rpc/shm_ring.h"
#include "core/rpc/shm_segment.h"
#include "core/rpc/step_frame.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace sluice {
namespace {

using ::testing::HasSubstr;

// Segments small enough to fill: one page.
constexpr size_t kPage = 4096;

// `frame` encoded with `sink` taking its numeric bytes and decoded with `source` into *out:
// the decoder's status.
absl::Status RoundTrip(const StepFrame& frame, SharedPayloadSink* sink,
                       SharedPayloadSource* source, StepFrame* out) {
  StepFrameEncoder encoder;
  encoder.set_shared_payload(sink);
  grpc::ByteBuffer bb;
  if (absl::Status s = encoder.Encode(frame, &bb); !s.ok()) return s;
  StepFrameDecoder decoder(nullptr, nullptr);
  decoder.set_shared_payload(source);
  return decoder.Decode(bb, out);
}

TEST(ShmSegmentTest, HandedOverOnceAndSharesBytes) {
  auto server = ShmFdServer::Create();
  ASSERT_TRUE(server.ok()) << server.status();
  auto segment = ShmSegment::Create(3 * kPage);
  ASSERT_TRUE(segment.ok()) << segment.status();
  const std::string token = (*server)->Offer(*segment);
  auto fd = ReceiveShmFd((*server)->name(), token, absl::Seconds(10));
  ASSERT_TRUE(fd.ok()) << fd.status();
  auto mapped = ShmSegment::Map(*std::move(fd), (*segment)->size());
  ASSERT_TRUE(mapped.ok()) << mapped.status();
  std::memcpy((*segment)->data() + 100, "hello", 5);
  EXPECT_EQ(std::string(reinterpret_cast<char*>((*mapped)->data()) + 100, 5), "hello");
  EXPECT_NE((*mapped)->data(), (*segment)->data());  // two mappings of one memory
  // The token is spent: asking again gets nothing.
  auto again = ReceiveShmFd((*server)->name(), token, absl::Seconds(10));
  EXPECT_FALSE(again.ok());
  EXPECT_EQ((*server)->pending(), 0u);
}

TEST(ShmSegmentTest, UnknownTokenGetsNoDescriptor) {
  auto server = ShmFdServer::Create();
  ASSERT_TRUE(server.ok());
  auto segment = ShmSegment::Create(kPage);
  ASSERT_TRUE(segment.ok());
  (*server)->Offer(*segment);
  auto fd = ReceiveShmFd((*server)->name(), std::string(kShmTokenBytes, 'x'), absl::Seconds(10));
  ASSERT_FALSE(fd.ok());
  EXPECT_EQ((*server)->pending(), 1u);  // the real offer still waits
}

TEST(ShmSegmentTest, ReceiverRefusesForeignSocketsAndBadTokens) {
  auto a = ReceiveShmFd("some-other-service", std::string(kShmTokenBytes, 'x'), absl::Seconds(1));
  EXPECT_EQ(a.status().code(), absl::StatusCode::kInvalidArgument);
  auto b = ReceiveShmFd(std::string(kShmSocketPrefix) + "1", "short", absl::Seconds(1));
  EXPECT_EQ(b.status().code(), absl::StatusCode::kInvalidArgument);
  // A name of the protocol that nobody serves (a worker gone, another namespace).
  auto c = ReceiveShmFd(std::string(kShmSocketPrefix) + "nobody-serves-this",
                        std::string(kShmTokenBytes, 'x'), absl::Seconds(1));
  EXPECT_EQ(c.status().code(), absl::StatusCode::kUnavailable);
}

TEST(ShmSegmentTest, MapRefusesUnsealedWrongSizeAndNonFiles) {
  // A memfd a hostile worker could shrink under the consumer's mapping (SIGBUS on read).
  UniqueFd unsealed(memfd_create("test", MFD_CLOEXEC | MFD_ALLOW_SEALING));
  ASSERT_GE(unsealed.get(), 0);
  ASSERT_EQ(ftruncate(unsealed.get(), kPage), 0);
  auto m = ShmSegment::Map(std::move(unsealed), kPage);
  EXPECT_EQ(m.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(m.status().message()), HasSubstr("sealed"));

  auto segment = ShmSegment::Create(kPage);
  ASSERT_TRUE(segment.ok());
  UniqueFd dup_fd(dup((*segment)->fd()));
  auto wrong = ShmSegment::Map(std::move(dup_fd), 2 * kPage);
  EXPECT_EQ(wrong.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(wrong.status().message()), HasSubstr("announced"));

  int pipe_fds[2];
  ASSERT_EQ(pipe(pipe_fds), 0);
  close(pipe_fds[1]);
  auto not_file = ShmSegment::Map(UniqueFd(pipe_fds[0]), kPage);
  EXPECT_EQ(not_file.status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(ShmRingWriterTest, ReusesOnlyReleasedRegionsAndRefusesBadReleases) {
  auto segment = ShmSegment::Create(kPage);
  ASSERT_TRUE(segment.ok());
  ShmRingWriter ring(*segment);
  proto::ShmPayload a, b, c;
  // The worked example of shm_ring.h.
  ASSERT_NE(ring.Reserve(1000, &a), nullptr);
  ASSERT_NE(ring.Reserve(2000, &b), nullptr);
  EXPECT_EQ(a.offset(), 0u);
  EXPECT_EQ(a.ring_end(), 1024u);
  EXPECT_EQ(b.offset(), 1024u);
  EXPECT_EQ(b.ring_end(), 3072u);
  EXPECT_EQ(ring.Reserve(1500, &c), nullptr);  // would overwrite region a
  EXPECT_EQ(ring.Reserve(kPage + 1, &c), nullptr);  // never fits
  // A consumer cannot release what was not written, nor go back.
  EXPECT_EQ(ring.Release(3073).code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(ring.Release(1024).ok());
  EXPECT_EQ(ring.Release(1000).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ring.Reserve(1500, &c), nullptr);  // still needs [4096, 5632): 1536 released
  ASSERT_TRUE(ring.Release(3072).ok());
  uint8_t* p = ring.Reserve(1500, &c);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(c.offset(), 0u);
  EXPECT_EQ(c.ring_end(), 4096u + 1536u);
  EXPECT_EQ(p, (*segment)->data());
}

TEST(ShmRingReaderTest, RefusesRegionsOutsideOrOutOfOrder) {
  auto segment = ShmSegment::Create(kPage);
  ASSERT_TRUE(segment.ok());
  ShmRingReader ring(*segment);
  auto payload = [](uint64_t offset, uint64_t bytes, uint64_t end) {
    proto::ShmPayload p;
    p.set_offset(offset);
    p.set_bytes(bytes);
    p.set_ring_end(end);
    return p;
  };
  EXPECT_EQ(ring.Resolve(payload(kPage - 64, 128, kPage + 64)).status().code(),
            absl::StatusCode::kDataLoss);  // past the end
  EXPECT_EQ(ring.Resolve(payload(8, 64, 128)).status().code(),
            absl::StatusCode::kDataLoss);  // unaligned
  EXPECT_EQ(ring.Resolve(payload(1ull << 63, 64, 64)).status().code(),
            absl::StatusCode::kDataLoss);  // offset overflow
  EXPECT_EQ(ring.Resolve(payload(0, ~0ull, 64)).status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(ring.Resolve(payload(0, 64, 128)).status().code(),
            absl::StatusCode::kDataLoss);  // ring_end disagrees with the offset
  auto first = ring.Resolve(payload(0, 1000, 1024));
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(ring.Resolve(payload(0, 1000, 1024)).status().code(),
            absl::StatusCode::kDataLoss);  // the same region again
  // A region that wraps onto the one still held.
  EXPECT_EQ(ring.Resolve(payload(0, 1000, kPage + 1024)).status().code(),
            absl::StatusCode::kDataLoss);
  auto second = ring.Resolve(payload(1024, 2000, 3072));
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(ring.held(), 2u);
  // Released out of order: the position moves only over a released prefix.
  second->reset();
  EXPECT_EQ(ring.released(), 0u);
  first->reset();
  EXPECT_EQ(ring.released(), 3072u);
  EXPECT_EQ(ring.held(), 0u);
}

// One frame of a uint8 tensor, an int32 tensor and a string tensor, through a ring.
TEST(ShmStepFrameTest, DecodedTensorsAreViewsOfTheSegmentWithTheEncodedBytes) {
  auto segment = ShmSegment::Create(size_t{1} << 20);
  ASSERT_TRUE(segment.ok());
  ShmRingWriter writer(*segment);
  ShmRingReader reader(*segment);  // the same mapping stands in for the consumer's
  Tensor bytes = Tensor::Allocate(DType::kUInt8, Shape({5000}));
  for (int i = 0; i < 5000; ++i) static_cast<uint8_t*>(bytes.mutable_raw_data())[i] = i * 7;
  Tensor ints = Tensor::Allocate(DType::kInt32, Shape({3}));
  for (int i = 0; i < 3; ++i) static_cast<int32_t*>(ints.mutable_raw_data())[i] = -i - 1;
  Tensor strings = Tensor::Allocate(DType::kString, Shape({2}));
  *strings.mutable_string(0) = "ab";
  *strings.mutable_string(1) = "cde";
  StepFrame frame;
  frame.steps.push_back(WireStep{4, -1, 1, {{bytes, ints, strings}}});

  StepFrameEncoder encoder;
  encoder.set_shared_payload(&writer);
  grpc::ByteBuffer bb;
  ASSERT_TRUE(encoder.Encode(frame, &bb).ok());
  EXPECT_GT(encoder.last_shared_bytes(), 5000u);
  EXPECT_LT(bb.Length(), 200u);  // header and the 5 string bytes only

  // Without a source the frame cannot be read.
  StepFrameDecoder plain(nullptr, nullptr);
  StepFrame out;
  EXPECT_EQ(plain.Decode(bb, &out).code(), absl::StatusCode::kDataLoss);

  StepFrameDecoder decoder(nullptr, nullptr);
  decoder.set_shared_payload(&reader);
  ASSERT_TRUE(decoder.Decode(bb, &out).ok());
  ASSERT_EQ(out.steps.size(), 1u);
  const std::vector<Tensor>& piece = out.steps[0].pieces[0];
  ASSERT_EQ(piece.size(), 3u);
  EXPECT_EQ(std::memcmp(piece[0].raw_data(), bytes.raw_data(), 5000), 0);
  EXPECT_EQ(std::memcmp(piece[1].raw_data(), ints.raw_data(), 12), 0);
  EXPECT_EQ(piece[2].string_at(1), "cde");
  const uint8_t* seg = (*segment)->data();
  for (int i = 0; i < 2; ++i) {
    const uint8_t* p = static_cast<const uint8_t*>(piece[i].raw_data());
    EXPECT_TRUE(p >= seg && p < seg + (*segment)->size()) << "tensor " << i << " copied";
  }
  EXPECT_EQ(reader.held(), 1u);
  out.steps.clear();  // the trainer drops the step
  EXPECT_EQ(reader.held(), 0u);
  EXPECT_EQ(reader.released(), writer.written());
}

TEST(ShmStepFrameTest, FrameThatDoesNotFitGoesInline) {
  auto segment = ShmSegment::Create(kPage);
  ASSERT_TRUE(segment.ok());
  ShmRingWriter writer(*segment);
  Tensor big = Tensor::Allocate(DType::kUInt8, Shape({2 * static_cast<int64_t>(kPage)}));
  StepFrame frame;
  frame.steps.push_back(WireStep{0, -1, 1, {{big}}});
  StepFrameEncoder encoder;
  encoder.set_shared_payload(&writer);
  grpc::ByteBuffer bb;
  ASSERT_TRUE(encoder.Encode(frame, &bb).ok());
  EXPECT_EQ(encoder.last_shared_bytes(), 0u);
  StepFrameDecoder decoder(nullptr, nullptr);  // no segment needed
  StepFrame out;
  ASSERT_TRUE(decoder.Decode(bb, &out).ok());
  EXPECT_EQ(out.steps[0].pieces[0][0].byte_size(), 2 * kPage);
}

TEST(ShmStepFrameTest, HeaderDisagreeingWithTheRegionIsDataLoss) {
  auto segment = ShmSegment::Create(size_t{1} << 16);
  ASSERT_TRUE(segment.ok());
  // A worker that announces more shared bytes than its header's tensors take.
  class ShortSink : public SharedPayloadSink {
   public:
    explicit ShortSink(ShmRingWriter* w) : w_(w) {}
    uint8_t* Reserve(size_t bytes, proto::ShmPayload* out) override {
      uint8_t* p = w_->Reserve(bytes, out);
      out->set_bytes(bytes + 8);
      return p;
    }
    ShmRingWriter* w_;
  };
  ShmRingWriter writer(*segment);
  ShortSink sink(&writer);
  ShmRingReader reader(*segment);
  Tensor t = Tensor::Allocate(DType::kInt64, Shape({100}));
  StepFrame frame;
  frame.steps.push_back(WireStep{0, -1, 1, {{t}}});
  StepFrame out;
  absl::Status s = RoundTrip(frame, &sink, &reader, &out);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(s.message()), HasSubstr("shared-memory region has"));
}

// A stream of batched frames (3 steps each, one region of ~15 KB) over many laps of a 64 KiB
// ring, whose consumer holds 1 to 4 of the latest frames (seed-free: the pattern is fixed):
// a frame goes through the ring when there is room and inline when not, its steps in one
// region in frame order, and no byte a trainer holds is ever overwritten.
TEST(ShmRingWriterTest, BatchedFramesOverManyLapsNeverOverwriteWhatIsHeld) {
  constexpr size_t kSegment = size_t{64} << 10;
  constexpr int kFrames = 300;
  constexpr int64_t kStepBytes = 5000;
  auto segment = ShmSegment::Create(kSegment);
  ASSERT_TRUE(segment.ok());
  ShmRingWriter writer(*segment);
  ShmRingReader reader(*segment);
  StepFrameEncoder encoder;
  encoder.set_shared_payload(&writer);
  StepFrameDecoder decoder(nullptr, nullptr);
  decoder.set_shared_payload(&reader);
  std::deque<std::pair<int, StepFrame>> held;  // what the trainer still holds, by frame
  auto fill = [](int frame, int step) { return static_cast<uint8_t>(frame * 3 + step); };
  int in_ring = 0, inline_frames = 0;
  for (int f = 0; f < kFrames; ++f) {
    StepFrame frame;
    for (int s = 0; s < 3; ++s) {
      Tensor t = Tensor::Allocate(DType::kUInt8, Shape({kStepBytes}));
      std::memset(t.mutable_raw_data(), fill(f, s), kStepBytes);
      frame.steps.push_back(WireStep{3 * f + s, -1, 1, {{t}}});
    }
    grpc::ByteBuffer bb;
    ASSERT_TRUE(encoder.Encode(frame, &bb).ok());
    ++(encoder.last_shared_bytes() > 0 ? in_ring : inline_frames);
    StepFrame out;
    ASSERT_TRUE(decoder.Decode(bb, &out).ok()) << "frame " << f;
    ASSERT_EQ(out.steps.size(), 3u);
    const auto* first = static_cast<const uint8_t*>(out.steps[0].pieces[0][0].raw_data());
    const auto* last = static_cast<const uint8_t*>(out.steps[2].pieces[0][0].raw_data());
    EXPECT_LT(first, last);  // in frame order
    held.emplace_back(f, std::move(out));
    while (held.size() > static_cast<size_t>(1 + f % 4)) held.pop_front();
    // Every step held still has its own bytes.
    for (const auto& [index, h] : held) {
      for (int s = 0; s < 3; ++s) {
        const auto* b = static_cast<const uint8_t*>(h.steps[s].pieces[0][0].raw_data());
        ASSERT_EQ(b[0], fill(index, s)) << "frame " << index << " overwritten";
        ASSERT_EQ(b[kStepBytes - 1], fill(index, s)) << "frame " << index << " overwritten";
      }
    }
    ASSERT_TRUE(writer.Release(reader.released()).ok());
  }
  EXPECT_GT(in_ring, kFrames / 2);
  EXPECT_GT(inline_frames, 0);                 // no room while 4 frames were held
  EXPECT_GT(writer.written(), 20 * kSegment);  // it lapped, many times
}

// A batch (one frame of 3 steps, one region) whose steps the trainer drops out of order: the
// region is released only with its last step, and the worker reuses it only then.
TEST(ShmRingWriterTest, PartOfABatchReleasedKeepsItsRegionHeld) {
  auto segment = ShmSegment::Create(4 * kPage);
  ASSERT_TRUE(segment.ok());
  ShmRingWriter writer(*segment);
  ShmRingReader reader(*segment);
  StepFrame frame;
  for (int s = 0; s < 3; ++s) {
    Tensor t = Tensor::Allocate(DType::kUInt8, Shape({4000}));
    std::memset(t.mutable_raw_data(), s + 1, 4000);
    frame.steps.push_back(WireStep{s, -1, 1, {{t}}});
  }
  StepFrame out;
  ASSERT_TRUE(RoundTrip(frame, &writer, &reader, &out).ok());
  ASSERT_EQ(out.steps.size(), 3u);
  std::vector<Tensor> middle = out.steps[1].pieces[0];
  out.steps.clear();  // steps 0 and 2 dropped, step 1 still held
  EXPECT_EQ(reader.held(), 1u);
  EXPECT_EQ(reader.released(), 0u);
  ASSERT_TRUE(writer.Release(reader.released()).ok());
  proto::ShmPayload p;
  EXPECT_EQ(writer.Reserve(5000, &p), nullptr);  // it would need the frame's region
  EXPECT_EQ(static_cast<const uint8_t*>(middle[0].raw_data())[3999], 2);
  middle.clear();
  EXPECT_EQ(reader.released(), writer.written());
  ASSERT_TRUE(writer.Release(reader.released()).ok());
  EXPECT_NE(writer.Reserve(5000, &p), nullptr);
}

// The worker's step buffers in the ring (Allocate) die in any order: a pipeline drops steps
// out of order, and a long-lived oldest one holds every region behind it. Each dead one is
// found among thousands (a binary search: a scan made each free cost the ring's length), and
// the region of one still alive is never reused, whatever died around it.
TEST(ShmRingWriterTest, StepBuffersFreedInAnyOrderKeepOnlyTheLiveOnesHeld) {
  constexpr size_t kRegions = 4096;
  constexpr size_t kRegion = 64;
  auto segment = ShmSegment::Create(kRegions * kRegion);
  ASSERT_TRUE(segment.ok());
  ShmRingWriter writer(*segment);
  std::vector<std::shared_ptr<TensorBuffer>> buffers;
  for (size_t i = 0; i < kRegions; ++i) {
    std::shared_ptr<TensorBuffer> b = writer.Allocate(kRegion);
    ASSERT_NE(b, nullptr) << i;
    // Sent in place and released by the consumer: only the worker's buffers hold them now.
    absl::StatusOr<Tensor> t = Tensor::Wrap(DType::kUInt8, Shape({kRegion}), b, 0);
    ASSERT_TRUE(t.ok());
    const Tensor* tensors[] = {&*t};
    const size_t at[] = {0};
    proto::ShmPayload p;
    ASSERT_TRUE(writer.InPlace(tensors, at, kRegion, &p)) << i;
    buffers.push_back(std::move(b));
  }
  ASSERT_TRUE(writer.Release(writer.written()).ok());
  EXPECT_EQ(writer.Allocate(kRegion), nullptr);  // full
  const size_t kept = 1234;  // stays alive to the end
  std::vector<size_t> order;
  for (size_t i = 1; i < kRegions; ++i) {
    if (i != kept) order.push_back(i);
  }
  const uint32_t seed = 28;
  std::printf("seed %u\n", seed);
  std::mt19937 rng(seed);
  std::shuffle(order.begin(), order.end(), rng);
  for (size_t i : order) buffers[i].reset();
  EXPECT_EQ(writer.live_buffers(), 2u);
  EXPECT_EQ(writer.Allocate(kRegion), nullptr) << "the oldest buffer's region was reused";
  buffers[0].reset();  // the regions up to the kept one become free, and only those
  EXPECT_EQ(writer.live_buffers(), 1u);
  std::shared_ptr<TensorBuffer> room = writer.Allocate(kept * kRegion);
  ASSERT_NE(room, nullptr) << "the regions before the kept buffer stayed held";
  EXPECT_EQ(writer.Allocate(kRegion), nullptr) << "the kept buffer's region was reused";
  EXPECT_EQ(static_cast<uint8_t*>(room->data()), (*segment)->data());
  room.reset();
  buffers[kept].reset();
  EXPECT_EQ(writer.live_buffers(), 0u);
  EXPECT_NE(writer.Allocate((kRegions - kept) * kRegion), nullptr);  // up to the lap end
}

// The early wrap: with the consumer releasing each region at once, the writer goes back to
// the segment's start as soon as it is a wrap span into it (here 16 KiB of a 1 MiB segment),
// lap after lap, so that its writes stay in that stretch. While the region at a lap's start is
// held, the writer has no more room than the last lap's length (positions only grow: it cannot
// pass that region going round, and the skipped rest of the last lap counts as held until it
// is released), and never writes over it. Once released, the writer goes back to the start
// only when the lap is kLapHeld times the most it held in it, then in laps of the span again.
// The consumer's checks accept every region (Resolve).
TEST(ShmRingWriterTest, WrapsEarlyOnceTheStartIsFreeAndNeverOverAHeldRegion) {
  constexpr size_t kSegment = size_t{1} << 20;
  constexpr size_t kSpan = size_t{16} << 10;
  constexpr size_t kBytes = 200;           // regions of 256 bytes: a lap of 64 is the span
  constexpr int kLap = kSpan / 256;        // 64
  constexpr int kHoldAt = 16 * kLap;       // a lap's start
  auto segment = ShmSegment::Create(kSegment);
  ASSERT_TRUE(segment.ok());
  ShmRingWriter writer(*segment, kSpan);
  ShmRingReader reader(*segment);
  std::vector<uint64_t> offsets;  // of each region written
  std::shared_ptr<TensorBuffer> held;
  int refused_at = -1;
  for (int i = 0; static_cast<int>(offsets.size()) < 2000 && i < 4000; ++i) {
    const int k = static_cast<int>(offsets.size());
    proto::ShmPayload p;
    uint8_t* at = writer.Reserve(kBytes, &p);
    if (at == nullptr) {
      // No room while the lap's first region is held: only past the last lap's length.
      ASSERT_NE(held, nullptr) << "region " << k;
      refused_at = k;
      EXPECT_EQ(static_cast<const uint8_t*>(held->data())[kBytes - 1],
                static_cast<uint8_t>(kHoldAt % 251));
      held.reset();
      ASSERT_TRUE(writer.Release(reader.released()).ok());
      continue;
    }
    std::memset(at, static_cast<uint8_t>(k % 251), kBytes);
    absl::StatusOr<std::shared_ptr<TensorBuffer>> region = reader.Resolve(p);
    ASSERT_TRUE(region.ok()) << "region " << k << ": " << region.status();
    offsets.push_back(p.offset());
    if (k == kHoldAt) {
      ASSERT_EQ(p.offset(), 0u) << "regions of 256 bytes make laps of 64";
      held = *std::move(region);
    }
    region = nullptr;  // the consumer dropped it
    ASSERT_TRUE(writer.Release(reader.released()).ok());
  }
  ASSERT_EQ(offsets.size(), 2000u);
  for (int k = 0; k < kHoldAt; ++k) EXPECT_EQ(offsets[k], (k % kLap) * 256u) << "region " << k;
  EXPECT_EQ(refused_at, kHoldAt + kLap);
  // It held a lap's length at most: back at the start kLapHeld laps' length further.
  const int back_at = kHoldAt + static_cast<int>(ShmRingWriter::kLapHeld) * kLap;
  for (int k = kHoldAt; k < back_at; ++k) {
    EXPECT_EQ(offsets[k], (k - kHoldAt) * 256u) << "region " << k;
  }
  for (int k = back_at; k < 2000; ++k) {
    EXPECT_EQ(offsets[k], ((k - back_at) % kLap) * 256u) << "region " << k;
  }
  EXPECT_GT(writer.written(), 27 * kSegment);  // 28 laps: positions skip the rest of each
}


// A consumer's release is its word (CreditGrant.shm_released): Release accepts any position
// between what it released before and what was sent, also one inside the rest of a lap the
// writer skipped when it wrapped early, which no region's end is. Such a release must not
// make the writer count more bytes held than the positions after it span (an unsigned
// underflow there had made the most held "2^64" and turned the early wrap off for the ring's
// life): the writer goes on wrapping at the span, and never writes over what is held.
TEST(ShmRingWriterTest, AReleaseInsideASkippedRestKeepsTheEarlyWrap) {
  constexpr size_t kSegment = size_t{1} << 20;
  constexpr size_t kSpan = size_t{16} << 10;
  constexpr size_t kBytes = 200;     // regions of 256 bytes: a lap of 64 is the span
  constexpr int kLap = kSpan / 256;  // 64
  auto segment = ShmSegment::Create(kSegment);
  ASSERT_TRUE(segment.ok());
  ShmRingWriter writer(*segment, kSpan);
  ShmRingReader reader(*segment);
  std::vector<uint64_t> offsets;
  for (int k = 0; k < 6 * kLap; ++k) {
    proto::ShmPayload p;
    uint8_t* at = writer.Reserve(kBytes, &p);
    ASSERT_NE(at, nullptr) << "region " << k;
    std::memset(at, static_cast<uint8_t>(k % 251), kBytes);
    absl::StatusOr<std::shared_ptr<TensorBuffer>> region = reader.Resolve(p);
    ASSERT_TRUE(region.ok()) << "region " << k << ": " << region.status();
    offsets.push_back(p.offset());
    region = nullptr;  // the consumer dropped it
    if (k == kLap) {
      // The first region of the second lap: released up to a position in the first lap's
      // skipped rest (past its last region's end at kSpan, before the segment's end).
      ASSERT_EQ(p.offset(), 0u);
      ASSERT_TRUE(writer.Release(kSpan + 4096).ok());
      continue;
    }
    ASSERT_TRUE(writer.Release(reader.released()).ok());
  }
  for (int k = 0; k < 6 * kLap; ++k) {
    EXPECT_EQ(offsets[k], (k % kLap) * 256u) << "region " << k;
  }
}

}  // namespace
}  // namespace sluice
