// step_frame_bench: the step-frame codec alone (core/rpc/step_frame.h), full against compact
// headers, on one thread: per step, the CPU time (this thread's, so that other processes on a
// loaded machine count less) of encoding a frame and decoding it again, and the header bytes.
//
//   build/bench/step_frame_bench [--bytes=1024] [--steps_per_frame=64] [--frames=20000]
//
// Each step is one uint8 tensor of --bytes bytes (a static spec), as in client_path_bench.
#include <time.h>

#include <cstdio>
#include <string>

#include "bench/bench_flags.h"
#include "absl/strings/numbers.h"
#include "core/rpc/step_frame.h"

namespace sluice {
namespace {

double ThreadSeconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
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
  return 0;
}

}  // namespace
}  // namespace sluice

int main(int argc, char** argv) { return sluice::Main(argc, argv); }
