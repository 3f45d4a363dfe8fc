// step_frame_bench: the step-frame codec alone (core/rpc/step_frame.h), full against compact
// headers, on one thread: per step, the CPU time (this thread's, so that other processes on a
// loaded machine count less) of encoding a frame and decoding it again, and the header bytes.
//
//   build/bench/step_frame_bench [--bytes=1024] [--steps_per_frame=64] [--frames=20000]
//
// Each step is one uint8 tensor of --bytes bytes (a static spec), as in client_path_bench.
//
// Then two more tables (issue 28):
//  - receive views: a frame of --steps_per_frame steps cut into 64 KiB slices at addresses 8
//    past a 64-byte boundary, as gRPC 1.51's TCP reads hand them over, decoded with
//    view_received_slices off (every tensor copied) and on; decode CPU ns per step and the
//    share of bytes viewed;
//  - wire compression: per codec and kind of data (random bytes; "tokens", int32 values below
//    50,000; "ramp", a float32 ramp), the compressor's and the decompressor's CPU seconds per
//    GB of raw payload and the ratio, for frames of --steps_per_frame steps.
#include <time.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "bench/bench_flags.h"
#include "absl/strings/numbers.h"
#include "core/rpc/step_frame.h"
#include "core/rpc/wire_compression.h"

namespace sluice {
namespace {

double ThreadSeconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

void FreeBlock(void* p) { std::free(p); }

// `bytes` cut into 64 KiB slices, each at an address 8 past a 64-byte boundary.
grpc::ByteBuffer AsReceived(const std::string& bytes) {
  std::vector<grpc::Slice> slices;
  for (size_t at = 0; at < bytes.size(); at += 65536) {
    const size_t n = std::min<size_t>(65536, bytes.size() - at);
    char* block = static_cast<char*>(std::aligned_alloc(64, (n + 8 + 63) / 64 * 64));
    std::memcpy(block + 8, bytes.data() + at, n);
    slices.emplace_back(block + 8, n, &FreeBlock, block);
  }
  return grpc::ByteBuffer(slices.data(), slices.size());
}

void ViewsTable(const StepFrame& frame, int64_t frames) {
  grpc::ByteBuffer encoded;
  if (!EncodeStepFrame(frame, &encoded).ok()) return;
  std::vector<grpc::Slice> parts;
  (void)encoded.Dump(&parts);
  std::string flat;
  for (const grpc::Slice& p : parts) flat.append(reinterpret_cast<const char*>(p.begin()), p.size());
  const grpc::ByteBuffer received = AsReceived(flat);
  const size_t steps = frame.steps.size();
  std::printf("\n| receive | bytes/step | steps/frame | decode ns/step | bytes viewed |\n");
  std::printf("|---|---|---|---|---|\n");
  for (bool views : {false, true}) {
    StepFrameDecoder decoder(nullptr, nullptr, views);
    StepFrame decoded;
    const double start = ThreadSeconds();
    for (int64_t f = 0; f < frames; ++f) {
      if (!decoder.Decode(received, &decoded).ok()) return;
    }
    const double seconds = ThreadSeconds() - start;
    const StepFrameDecoder::Stats& st = decoder.stats();
    const double total = static_cast<double>(st.viewed_bytes + st.copied_bytes);
    std::printf("| %s | %zu | %zu | %.0f | %.0f%% |\n", views ? "views" : "copy",
                frame.steps[0].pieces[0][0].byte_size(), steps,
                1e9 * seconds / static_cast<double>(frames * static_cast<int64_t>(steps)),
                total > 0 ? 100.0 * static_cast<double>(st.viewed_bytes) / total : 0.0);
  }
}

// One step's tensor of `bytes` bytes of the named kind of data.
Tensor DataOf(const std::string& kind, int64_t bytes, std::mt19937* rng) {
  if (kind == "tokens") {
    Tensor t = Tensor::Allocate(DType::kInt32, Shape({std::max<int64_t>(bytes / 4, 1)}));
    for (int64_t i = 0; i < t.num_elements(); ++i) t.mutable_data<int32_t>()[i] = (*rng)() % 50000;
    return t;
  }
  if (kind == "ramp") {
    Tensor t = Tensor::Allocate(DType::kFloat32, Shape({std::max<int64_t>(bytes / 4, 1)}));
    for (int64_t i = 0; i < t.num_elements(); ++i) {
      t.mutable_data<float>()[i] = static_cast<float>(i % 1000) * 0.5f;
    }
    return t;
  }
  Tensor t = Tensor::Allocate(DType::kUInt8, Shape({bytes}));
  for (int64_t i = 0; i < bytes; ++i) t.mutable_data<uint8_t>()[i] = static_cast<uint8_t>((*rng)());
  return t;
}

void CodecTable(int64_t bytes, int64_t per_frame, int64_t frames) {
  std::printf("\n| codec | data | bytes/step | steps/frame | ratio | compress CPU s/GB | "
              "decompress CPU s/GB |\n");
  std::printf("|---|---|---|---|---|---|---|\n");
  std::mt19937 rng(28);
  // Enough frames for a stable figure, at most about 1 GB of payload.
  const int64_t n = std::max<int64_t>(
      1, std::min<int64_t>(frames, (int64_t{1} << 30) / std::max<int64_t>(bytes * per_frame, 1)));
  for (const char* kind : {"random", "tokens", "ramp"}) {
    StepFrame frame;
    for (int64_t s = 0; s < per_frame; ++s) {
      frame.steps.push_back(WireStep{s, -1, 1, {{DataOf(kind, bytes, &rng)}}});
    }
    for (WireCompression codec : {WireCompression::kLz4, WireCompression::kZstd}) {
      StepFrameEncoder encoder(nullptr, codec);
      StepFrameDecoder decoder(nullptr, nullptr, true);
      StepFrame decoded;
      double encode_s = 0, decode_s = 0;
      for (int64_t f = 0; f < n; ++f) {
        grpc::ByteBuffer bb;
        double t0 = ThreadSeconds();
        if (!encoder.Encode(frame, &bb).ok()) return;
        double t1 = ThreadSeconds();
        if (!decoder.Decode(bb, &decoded).ok()) return;
        encode_s += t1 - t0;
        decode_s += ThreadSeconds() - t1;
      }
      const StepFrameEncoder::CompressionStats& c = encoder.compression_stats();
      const double gb = static_cast<double>(c.raw_bytes) / 1e9;
      std::printf("| %s | %s | %lld | %lld | %.2f | %.2f | %.2f |\n",
                  std::string(WireCompressionName(codec)).c_str(), kind,
                  static_cast<long long>(bytes), static_cast<long long>(per_frame),
                  static_cast<double>(c.raw_bytes) / static_cast<double>(std::max<uint64_t>(c.sent_bytes, 1)),
                  encode_s / gb, decode_s / gb);
    }
  }
}

int Main(int argc, char** argv) {
  int64_t bytes = 0, per_frame = 0, frames = 0;
  if (!absl::SimpleAtoi(Flag(argc, argv, "bytes", "1024"), &bytes) ||
      !absl::SimpleAtoi(Flag(argc, argv, "steps_per_frame", "64"), &per_frame) ||
      !absl::SimpleAtoi(Flag(argc, argv, "frames", "20000"), &frames) || bytes < 0 ||
      per_frame < 1 || frames < 1) {
    std::fprintf(stderr, "bad flags\n");
    return 2;
  }
  const TensorSpec leaf{DType::kUInt8, Shape({bytes})};
  Tensor piece = Tensor::Allocate(DType::kUInt8, Shape({bytes}));
  StepFrame frame;
  for (int64_t s = 0; s < per_frame; ++s) {
    frame.steps.push_back(WireStep{1000 + s, -1, 1, {{piece}}});
  }
  std::printf("| header | bytes/step | steps/frame | encode+decode ns/step | header bytes/step |\n");
  std::printf("|---|---|---|---|---|\n");
  // "full, per call": EncodeStepFrame / DecodeStepFrame, a fresh header message, scratch and
  // receive buffer every frame (the codec before StepFrameEncoder / StepFrameDecoder).
  for (int mode = 0; mode < 3; ++mode) {
    const bool per_call = mode == 0;
    const bool compact = mode == 2;
    auto spec = compact ? std::make_shared<const CompactSpec>(
                              CompactSpec::FromElementSpec(ElementSpec(leaf)))
                        : nullptr;
    StepFrameEncoder encoder(spec);
    StepFrameDecoder decoder(nullptr, spec);
    StepFrame decoded;
    size_t total = 0;
    const double start = ThreadSeconds();
    for (int64_t f = 0; f < frames; ++f) {
      for (int64_t s = 0; s < per_frame; ++s) frame.steps[s].task_step = f * per_frame + s;
      grpc::ByteBuffer bb;
      const bool ok = per_call ? EncodeStepFrame(frame, &bb).ok() &&
                                     DecodeStepFrame(bb, nullptr, &decoded).ok()
                               : encoder.Encode(frame, &bb).ok() && decoder.Decode(bb, &decoded).ok();
      if (!ok) {
        std::fprintf(stderr, "codec failed\n");
        return 1;
      }
      total += bb.Length();
    }
    const double seconds = ThreadSeconds() - start;
    const double steps = static_cast<double>(frames * per_frame);
    const double header = (static_cast<double>(total) - steps * static_cast<double>(bytes)) / steps;
    std::printf("| %s | %lld | %lld | %.0f | %.1f |\n", compact ? "compact" : per_call ? "full, per call" : "full",
                static_cast<long long>(bytes), static_cast<long long>(per_frame),
                1e9 * seconds / steps, header);
  }
  ViewsTable(frame, frames);
  CodecTable(bytes, per_frame, frames);
  return 0;
}

}  // namespace
}  // namespace sluice

int main(int argc, char** argv) { return sluice::Main(argc, argv); }
