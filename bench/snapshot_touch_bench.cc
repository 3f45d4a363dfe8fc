// What one loaded snapshot step costs at least: the ways of touching a step's bytes in the page
// cache once, in CPU milliseconds per step (the bound behind load()'s rate against the pipeline,
// bench/RESULTS.md "snapshot load: the bound"). Writes FILES files of STEPS_PER_FILE steps (a
// step as bench/snapshot_bench.py's: 256 strings of 3 KiB plus their lengths), reads them once
// to put them in the page cache, then for each case maps (or reads) every file anew, PASSES
// times, and prints CPU ms per step:
//   crc only          one CRC32C pass (what verifying costs if the strings were views)
//   copy only         the strings copied into std::strings (no checksum)
//   crc, then copy    what load() does per record today
//   crc fused         each string copied, then its CRC taken from the L1 copy (one memory pass)
//   populate + ...    MADV_POPULATE_READ of the whole file before the pass
//   pread + ...       read(2) into one reused buffer instead of a mapping
//   crc in cache      the CRC of a step already in the cache (the instruction's own speed)
//
//   snapshot_touch_bench [--files=8] [--steps_per_file=32] [--passes=5] [--dir=/tmp]
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "core/util/crc32c.h"

namespace sluice {
namespace {

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22  // Linux 5.14
#endif

constexpr size_t kStringBytes = 3072;
constexpr size_t kStrings = 256;
constexpr size_t kHeaderBytes = 64 + kStrings * 8;
constexpr size_t kStepBytes = kHeaderBytes + kStrings * kStringBytes;

double CpuSeconds() {
  rusage r;
  getrusage(RUSAGE_SELF, &r);
  return static_cast<double>(r.ru_utime.tv_sec + r.ru_stime.tv_sec) +
         static_cast<double>(r.ru_utime.tv_usec + r.ru_stime.tv_usec) * 1e-6;
}

volatile uint32_t g_sink;

enum class Touch { kCrc, kCopy, kCrcThenCopy, kFused };
enum class Source { kMap, kMapPopulate, kPread };

// One step's bytes touched as `touch` says; the strings dropped after it.
void TouchStep(const char* step, Touch touch) {
  uint32_t crc = 0;
  if (touch == Touch::kCrc || touch == Touch::kCrcThenCopy) {
    crc = crc32c::Value(step, kStepBytes);
  }
  if (touch == Touch::kFused) crc = crc32c::Value(step, kHeaderBytes);
  if (touch != Touch::kCrc) {
    std::vector<std::string> strings(kStrings);
    const char* data = step + kHeaderBytes;
    for (size_t i = 0; i < kStrings; ++i) {
      strings[i].assign(data + i * kStringBytes, kStringBytes);
      if (touch == Touch::kFused) crc = crc32c::Extend(crc, strings[i].data(), kStringBytes);
    }
  }
  g_sink = crc;
}

double MsPerStep(const std::vector<std::string>& files, size_t steps_per_file, int passes,
                 Source source, Touch touch) {
  const size_t size = kStepBytes * steps_per_file;
  std::vector<char> buffer(kStepBytes);
  const double start = CpuSeconds();
  for (int p = 0; p < passes; ++p) {
    for (const std::string& name : files) {
      const int fd = open(name.c_str(), O_RDONLY);
      if (fd < 0) std::abort();
      const char* base = nullptr;
      if (source != Source::kPread) {
        base = static_cast<const char*>(mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0));
        if (base == MAP_FAILED) std::abort();
        if (source == Source::kMapPopulate) {
          madvise(const_cast<char*>(base), size, MADV_POPULATE_READ);
        }
      }
      for (size_t s = 0; s < steps_per_file; ++s) {
        const char* step = base + s * kStepBytes;
        if (source == Source::kPread) {
          if (pread(fd, buffer.data(), kStepBytes, static_cast<off_t>(s * kStepBytes)) !=
              static_cast<ssize_t>(kStepBytes)) {
            std::abort();
          }
          step = buffer.data();
        }
        TouchStep(step, touch);
      }
      if (base != nullptr) munmap(const_cast<char*>(base), size);
      close(fd);
    }
  }
  return (CpuSeconds() - start) * 1e3 / static_cast<double>(passes * files.size() * steps_per_file);
}

int Flag(int argc, char** argv, const char* name, int def) {
  const std::string prefix = std::string("--") + name + "=";
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], prefix.c_str(), prefix.size()) == 0) {
      return std::atoi(argv[i] + prefix.size());
    }
  }
  return def;
}

int Main(int argc, char** argv) {
  const int num_files = Flag(argc, argv, "files", 8);
  const size_t steps_per_file = static_cast<size_t>(Flag(argc, argv, "steps_per_file", 32));
  const int passes = Flag(argc, argv, "passes", 5);
  std::string dir = "/tmp";
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--dir=", 6) == 0) dir = argv[i] + 6;
  }
  std::vector<std::string> files;
  std::string bytes(kStepBytes * steps_per_file, '\0');
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>((i * 2654435761u) >> 13);
  for (int f = 0; f < num_files; ++f) {
    files.push_back(dir + "/snapshot_touch_bench." + std::to_string(getpid()) + "." +
                    std::to_string(f));
    FILE* out = std::fopen(files.back().c_str(), "w");
    if (out == nullptr || std::fwrite(bytes.data(), 1, bytes.size(), out) != bytes.size()) {
      std::abort();
    }
    std::fclose(out);
  }
  MsPerStep(files, steps_per_file, 1, Source::kMap, Touch::kCrc);  // into the page cache
  struct Case {
    const char* name;
    Source source;
    Touch touch;
  };
  const Case cases[] = {
      {"crc only", Source::kMap, Touch::kCrc},
      {"copy only", Source::kMap, Touch::kCopy},
      {"crc, then copy", Source::kMap, Touch::kCrcThenCopy},
      {"crc fused with the copy", Source::kMap, Touch::kFused},
      {"populate + crc only", Source::kMapPopulate, Touch::kCrc},
      {"populate + crc, then copy", Source::kMapPopulate, Touch::kCrcThenCopy},
      {"pread + crc, then copy", Source::kPread, Touch::kCrcThenCopy},
      {"pread + crc fused", Source::kPread, Touch::kFused},
  };
  std::printf("step of %zu bytes, %d files x %zu steps, %d passes\n", kStepBytes, num_files,
              steps_per_file, passes);
  for (const Case& c : cases) {
    std::printf("%-28s %.3f ms CPU/step\n", c.name,
                MsPerStep(files, steps_per_file, passes, c.source, c.touch));
  }
  std::vector<char> hot(kStepBytes, 5);
  const double start = CpuSeconds();
  constexpr int kHotRounds = 2000;
  for (int i = 0; i < kHotRounds; ++i) g_sink = crc32c::Value(hot.data(), hot.size());
  std::printf("%-28s %.3f ms CPU/step\n", "crc in cache",
              (CpuSeconds() - start) * 1e3 / kHotRounds);
  for (const std::string& f : files) unlink(f.c_str());
  return 0;
}

}  // namespace
}  // namespace sluice

int main(int argc, char** argv) { return sluice::Main(argc, argv); }
