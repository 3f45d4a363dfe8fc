// streaming_copy_bench: what a step's copy into a shared-memory ring costs with memcpy and with
// StreamingCopy (core/util/streaming_copy.h), and what a consumer reading each step then pays.
//
//   build/bench/streaming_copy_bench [--sizes=262144,1048576,4194304,16777216]
//                                    [--bytes=2147483648] [--lags=0,2]
//
// A producer thread copies one source step after another into a warm 128 MiB memfd mapping used
// as a ring (as a worker writes a consumer's segment); a consumer thread reads every byte of
// each step (a sum of 64-bit words, as stream_bench --read=1) `lag` steps behind the producer.
// Reports the CPU time of each thread inside its copy and inside its read, per GB (thread CPU
// clocks: less swayed by a loaded machine than wall time). The threads hand steps over by
// spinning on atomics, whose CPU is not counted.
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "bench/bench_flags.h"
#include "core/util/streaming_copy.h"

namespace sluice {
namespace {

double ThreadCpuSeconds() {
  timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

std::vector<int64_t> Numbers(const std::string& list) {
  std::vector<int64_t> out;
  for (absl::string_view s : absl::StrSplit(list, ',')) {
    int64_t v = 0;
    if (absl::SimpleAtoi(s, &v) && v >= 0) out.push_back(v);
  }
  return out;
}

struct Cost {
  double write = 0, read = 0;  // CPU-s per GB
};

// `steps` steps of `size` bytes through `ring` (slots of `size`), read `lag` steps behind.
Cost Run(uint8_t* ring, size_t ring_bytes, size_t size, int64_t steps, int64_t lag,
         bool streaming) {
  const std::vector<uint8_t> src(size, 7);
  const int64_t slots = static_cast<int64_t>(ring_bytes / size);
  std::atomic<int64_t> produced{0}, consumed{0};
  double read_cpu = 0;
  uint64_t sum = 0;
  std::thread consumer([&] {
    for (int64_t i = 0; i < steps; ++i) {
      while (produced.load(std::memory_order_acquire) < std::min(steps, i + 1 + lag)) {
      }
      const uint8_t* p = ring + (i % slots) * static_cast<int64_t>(size);
      const double start = ThreadCpuSeconds();
      uint64_t s = 0;
      for (size_t k = 0; k + 8 <= size; k += 8) {
        uint64_t w;
        std::memcpy(&w, p + k, 8);
        s += w;
      }
      read_cpu += ThreadCpuSeconds() - start;
      sum += s;
      consumed.store(i + 1, std::memory_order_release);
    }
  });
  double write_cpu = 0;
  for (int64_t i = 0; i < steps; ++i) {
    while (i - consumed.load(std::memory_order_acquire) >= slots - 1) {
    }
    uint8_t* to = ring + (i % slots) * static_cast<int64_t>(size);
    const double start = ThreadCpuSeconds();
    if (streaming) {
      StreamingCopy(to, src.data(), size);
    } else {
      std::memcpy(to, src.data(), size);
    }
    write_cpu += ThreadCpuSeconds() - start;
    produced.store(i + 1, std::memory_order_release);
  }
  consumer.join();
  if (sum == 42) std::printf(" ");  // keeps the reads
  const double gb = static_cast<double>(steps) * static_cast<double>(size) / 1e9;
  return Cost{write_cpu / gb, read_cpu / gb};
}

int Main(int argc, char** argv) {
  const std::vector<int64_t> sizes =
      Numbers(Flag(argc, argv, "sizes", "262144,1048576,4194304,16777216"));
  const std::vector<int64_t> lags = Numbers(Flag(argc, argv, "lags", "0,2"));
  int64_t total = 0;
  if (!absl::SimpleAtoi(Flag(argc, argv, "bytes", "2147483648"), &total) || total <= 0 ||
      sizes.empty() || lags.empty()) {
    std::fprintf(stderr, "bad flags\n");
    return 2;
  }
  const size_t ring_bytes = size_t{128} << 20;
  const int fd = memfd_create("streaming_copy_bench", 0);
  if (fd < 0 || ftruncate(fd, static_cast<off_t>(ring_bytes)) != 0) return 1;
  void* mapped = mmap(nullptr, ring_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (mapped == MAP_FAILED) return 1;
  auto* ring = static_cast<uint8_t*>(mapped);
  std::memset(ring, 1, ring_bytes);  // warm: pages allocated, as a kept segment's
  std::printf("| step bytes | lag | memcpy write / read CPU-s/GB | StreamingCopy write / read "
              "CPU-s/GB | non-temporal |\n|---|---|---|---|---|\n");
  for (int64_t size : sizes) {
    if (size < 8 || static_cast<size_t>(size) > ring_bytes / 4) continue;
    const int64_t steps = std::max<int64_t>(total / size, 1);
    for (int64_t lag : lags) {
      const Cost plain = Run(ring, ring_bytes, static_cast<size_t>(size), steps, lag, false);
      const Cost streamed = Run(ring, ring_bytes, static_cast<size_t>(size), steps, lag, true);
      std::printf("| %lld | %lld | %.3f / %.3f | %.3f / %.3f | %s |\n",
                  static_cast<long long>(size), static_cast<long long>(lag), plain.write,
                  plain.read, streamed.write, streamed.read,
                  StreamingCopyBypassesCache(static_cast<size_t>(size)) ? "yes" : "no");
      std::fflush(stdout);
    }
  }
  munmap(mapped, ring_bytes);
  close(fd);
  return 0;
}

}  // namespace
}  // namespace sluice

int main(int argc, char** argv) { return sluice::Main(argc, argv); }
