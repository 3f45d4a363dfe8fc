// Hostile compressed step frames (issue 28, item 4; label `adversarial`): a worker, or anything
// on the path, sends the consumer's decoder random, truncated, oversized and bit-flipped LZ4 and
// zstd frames. None may crash it, make it allocate more than the credit it granted, or decode
// into anything but an error or a frame within that credit; and the decoder keeps decoding good
// frames afterwards. Seeded (SLUICE_ADVERSARIAL_SEED, printed); every case is reproducible.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "core/rpc/step_frame.h"
#include "core/rpc/wire_compression.h"
#include "gtest/gtest.h"
#include "tests/seeded_rng.h"
#include "tests/worker/step_frame_test_util.h"

namespace sluice {
namespace {

constexpr uint64_t kDefaultSeed = 28;
constexpr int kCases = 6000;
// What the consumer granted: no frame may make it allocate more (alignment slack aside).
constexpr int64_t kCredit = int64_t{1} << 20;

uint64_t Seed() {
  const char* v = std::getenv("SLUICE_ADVERSARIAL_SEED");
  return v != nullptr ? std::strtoull(v, nullptr, 10) : kDefaultSeed;
}

// A frame of 1 to 4 steps of compressible tensors (a ramp, a constant, strings), and sometimes a
// step of zeros larger than the credit, compressed.
std::string GoodFrame(SeededRng* rng, WireCompression codec, bool beyond_credit_ok = true) {
  StepFrame f;
  const int steps = static_cast<int>(rng->In(1, 4));
  for (int s = 0; s < steps; ++s) {
    WireStep step;
    step.task_step = s;
    step.num_real_pieces = 1;
    const int64_t n = rng->In(1, 8192);
    Tensor x = Tensor::Allocate(DType::kFloat32, Shape({n}));
    for (int64_t i = 0; i < n; ++i) x.mutable_data<float>()[i] = static_cast<float>(i % 17);
    Tensor y = Tensor::Allocate(DType::kInt64, Shape({rng->In(0, 300)}));
    Tensor z = Tensor::FromStrings({std::string(static_cast<size_t>(rng->In(0, 500)), 'q'), "r"},
                                   Shape({2}));
    step.pieces.push_back({x, y, z});
    f.steps.push_back(std::move(step));
  }
  if (beyond_credit_ok && rng->Chance(10)) {
    // A step of zeros beyond the credit: a few KiB on the wire, megabytes once decompressed.
    WireStep big;
    big.task_step = steps;
    big.num_real_pieces = 1;
    big.pieces.push_back({Tensor::Allocate(DType::kFloat32, Shape({rng->In(kCredit / 4, kCredit)})),
                          Tensor::Allocate(DType::kInt64, Shape({0})),
                          Tensor::FromStrings({"", ""}, Shape({2}))});
    f.steps.push_back(std::move(big));
  }
  StepFrameEncoder encoder(nullptr, codec);
  grpc::ByteBuffer bb;
  EXPECT_TRUE(encoder.Encode(f, &bb).ok());
  return Flatten(bb);
}

// Splits a frame into its header and payload, and joins them back.
struct Parts {
  proto::StepFrameHeader header;
  std::string payload;
};
bool Split(const std::string& frame, Parts* out) {
  if (frame.size() < 4) return false;
  uint32_t len = 0;
  std::memcpy(&len, frame.data(), 4);
  if (len > frame.size() - 4) return false;
  if (!out->header.ParseFromArray(frame.data() + 4, static_cast<int>(len))) return false;
  out->payload = frame.substr(4 + len);
  return true;
}
std::string Join(const Parts& p) {
  const std::string h = p.header.SerializeAsString();
  const uint32_t n = static_cast<uint32_t>(h.size());
  return std::string(reinterpret_cast<const char*>(&n), 4) + h + p.payload;
}

uint64_t HostileSize(SeededRng* rng, uint64_t near) {
  switch (rng->In(0, 4)) {
    case 0:
      return rng->Next();  // anything
    case 1:
      return uint64_t{1} << rng->In(20, 63);  // huge
    case 2:
      return near + static_cast<uint64_t>(rng->In(-3, 3));
    case 3:
      return near * static_cast<uint64_t>(rng->In(2, 300));
    default:
      return static_cast<uint64_t>(rng->In(0, 64));
  }
}

// One hostile variant of a good frame.
std::string Mutate(SeededRng* rng, const std::string& good) {
  std::string bad = good;
  Parts p;
  switch (rng->In(0, 6)) {
    case 0:  // flip bytes anywhere
      for (int64_t k = rng->In(1, 8); k > 0; --k) {
        const size_t i = static_cast<size_t>(rng->In(0, static_cast<int64_t>(bad.size()) - 1));
        bad[i] = static_cast<char>(bad[i] ^ static_cast<char>(rng->In(1, 255)));
      }
      return bad;
    case 1:  // truncate anywhere
      bad.resize(static_cast<size_t>(rng->In(0, static_cast<int64_t>(bad.size()) - 1)));
      return bad;
    case 2:  // a raw size of anything
      if (!Split(good, &p)) return bad;
      p.header.set_raw_payload_bytes(HostileSize(rng, p.header.raw_payload_bytes()));
      return Join(p);
    case 3:  // a compressed size of anything
      if (!Split(good, &p)) return bad;
      p.header.set_compressed_bytes(HostileSize(rng, p.header.compressed_bytes()));
      return Join(p);
    case 4:  // a payload truncated with the sizes adjusted, or garbage appended
      if (!Split(good, &p)) return bad;
      if (rng->Chance(50) && !p.payload.empty()) {
        p.payload.resize(static_cast<size_t>(rng->In(0, static_cast<int64_t>(p.payload.size()) - 1)));
      } else {
        p.payload.append(static_cast<size_t>(rng->In(1, 64)), static_cast<char>(rng->Next()));
      }
      p.header.set_compressed_bytes(p.payload.size());
      return Join(p);
    case 5:  // the other codec, or an unknown one
      if (!Split(good, &p)) return bad;
      p.header.set_compression(static_cast<proto::WireCompression>(rng->In(0, 5)));
      return Join(p);
    default:  // random payload bytes under a valid header
      if (!Split(good, &p)) return bad;
      for (char& c : p.payload) c = static_cast<char>(rng->Next());
      return Join(p);
  }
}

TEST(CompressedFrameAdversarialTest, HostileFramesAreErrorsWithinTheCredit) {
  const uint64_t seed = Seed();
  std::cout << "compressed frames: seed " << seed << " (SLUICE_ADVERSARIAL_SEED to change), "
            << kCases << " cases\n";
  SeededRng rng(seed);
  size_t largest_request = 0;
  TensorAllocator watched = [&largest_request](size_t bytes) {
    largest_request = std::max(largest_request, bytes);
    return AllocateUninitializedHost(bytes);
  };
  StepFrameDecoder decoder(watched, nullptr, /*view_received_slices=*/true);
  const FrameCreditLimit limit{kCredit, int64_t{1} << 40};
  int errors = 0;
  for (int i = 0; i < kCases; ++i) {
    const WireCompression codec = rng.Chance(50) ? WireCompression::kLz4 : WireCompression::kZstd;
    const std::string good = GoodFrame(&rng, codec);
    const std::string bad = Mutate(&rng, good);
    grpc::Slice slice(bad);
    StepFrame got;
    absl::Status s = decoder.Decode(grpc::ByteBuffer(&slice, 1), &got, limit);
    if (!s.ok()) {
      ++errors;
      EXPECT_FALSE(s.message().empty()) << "case " << i;
      continue;
    }
    size_t bytes = 0;
    for (const WireStep& w : got.steps) bytes += StepCreditBytes(w);
    EXPECT_LE(bytes, static_cast<size_t>(kCredit)) << "case " << i << " (seed " << seed << ")";
  }
  EXPECT_LE(largest_request, static_cast<size_t>(kCredit)) << "seed " << seed;
  EXPECT_GT(errors, kCases / 2) << "seed " << seed;  // the mutations mostly break frames
  // Still decodes good frames.
  SeededRng again(seed + 1);
  for (WireCompression codec : {WireCompression::kLz4, WireCompression::kZstd}) {
    const std::string good = GoodFrame(&again, codec, /*beyond_credit_ok=*/false);
    grpc::Slice slice(good);
    StepFrame got;
    EXPECT_TRUE(decoder.Decode(grpc::ByteBuffer(&slice, 1), &got, limit).ok());
  }
}

}  // namespace
}  // namespace sluice
