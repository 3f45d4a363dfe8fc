// Helpers for the record-file tests: fixture paths, the golden file written by
// tools/golden/gen_tfrecord_fixtures.py, temporary folders, whole-file reads/writes and where
// this process maps a file.
#ifndef SLUICE_TESTS_CORE_RECORD_TEST_UTIL_H_
#define SLUICE_TESTS_CORE_RECORD_TEST_UTIL_H_

#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "core/io/tfrecord_writer.h"
#include "core/util/thread_pool.h"
#include "core/util/json_value.h"
#include "gtest/gtest.h"

namespace sluice {
namespace record_test {

inline const std::string kFixtureDir = "tests/testdata/tfrecord/";

inline std::string Fixture(const std::string& name) { return kFixtureDir + name; }

inline std::string ReadWholeFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline void WriteWholeFile(const std::string& path, const std::string& data) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(data.data(), static_cast<std::streamsize>(data.size()));
}

// The byte offset of record k in the bytes of an uncompressed TFRecord file (its end when the
// file has fewer records).
inline size_t TFRecordOffset(const std::string& bytes, int64_t k) {
  size_t off = 0;
  for (int64_t i = 0; i < k && off + 12 <= bytes.size(); ++i) {
    uint64_t len;
    std::memcpy(&len, bytes.data() + off, 8);
    off += 12 + static_cast<size_t>(len) + 4;
  }
  return off;
}

// The bytes of a version 1.0 .npy file of int32 rows of shape (2,) with the values base,
// base + 1, ..., little- or big-endian.
inline std::string NpyInt32Pairs(int rows, int base, bool big_endian = false) {
  std::string header = std::string("{'descr': '") + (big_endian ? ">" : "<") +
                       "i4', 'fortran_order': False, 'shape': (" + std::to_string(rows) +
                       ", 2), }";
  while ((10 + header.size() + 1) % 64 != 0) header.push_back(' ');
  header.push_back('\n');
  std::string bytes = "\x93NUMPY";
  bytes.push_back('\x01');
  bytes.push_back('\x00');
  bytes.push_back(static_cast<char>(header.size() & 0xff));
  bytes.push_back(static_cast<char>(header.size() >> 8));
  bytes += header;
  for (int i = 0; i < rows * 2; ++i) {
    const auto v = static_cast<uint32_t>(base + i);
    for (int b = 0; b < 4; ++b) {
      const int shift = big_endian ? 8 * (3 - b) : 8 * b;
      bytes.push_back(static_cast<char>((v >> shift) & 0xff));
    }
  }
  return bytes;
}

inline const JsonValue& Golden() {
  static const JsonValue* golden = [] {
    absl::StatusOr<JsonValue> v = ParseJson(ReadWholeFile(Fixture("golden.json")));
    if (!v.ok()) {
      ADD_FAILURE() << "golden.json: " << v.status();
      return new JsonValue();
    }
    return new JsonValue(*std::move(v));
  }();
  return *golden;
}

inline std::vector<std::string> HexList(const JsonValue& list) {
  std::vector<std::string> out;
  for (const JsonValue& v : list.items()) out.push_back(absl::HexStringToBytes(v.string_value()));
  return out;
}

// The records of big.tfrecord.* (the generator's big_records()).
inline std::vector<std::string> BigRecords() {
  std::vector<std::string> out;
  const int64_t sizes[] = {70000, 300000, 5};
  for (int i = 0; i < 3; ++i) {
    std::string r(static_cast<size_t>(sizes[i]), '\0');
    for (int64_t j = 0; j < sizes[i]; ++j) {
      r[static_cast<size_t>(j)] = static_cast<char>((i * 31 + j * 7 + (j >> 10)) & 0xff);
    }
    out.push_back(std::move(r));
  }
  return out;
}

// A fresh folder under the test temp dir, removed with the object.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = ::testing::TempDir() + "sluice_records_XXXXXX";
    char* p = ::mkdtemp(tmpl.data());
    path_ = p != nullptr ? p : ::testing::TempDir();
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  std::string File(const std::string& name) const { return path_ + "/" + name; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// The bytes of an uncompressed TFRecord file of `records`, as TFRecordWriter frames them
// (written through a file in `dir`).
inline std::string FramedTFRecords(const std::vector<std::string>& records, const TempDir& dir) {
  const std::string path = dir.File("framed.tfrecord");
  auto w = TFRecordWriter::Open(path, Compression::kNone);
  EXPECT_TRUE(w.ok()) << w.status();
  for (const std::string& r : records) EXPECT_TRUE((*w)->Write(r).ok());
  EXPECT_TRUE((*w)->Close().ok());
  return ReadWholeFile(path);
}

// The address range [begin, end) this process maps `path` at; nullopt when it is not mapped.
inline std::optional<std::pair<uintptr_t, uintptr_t>> MappingOf(const std::string& path) {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    if (!absl::EndsWith(line, " " + path)) continue;
    std::vector<std::string> range = absl::StrSplit(line.substr(0, line.find(' ')), '-');
    uint64_t begin = 0, end = 0;
    if (range.size() == 2 && absl::SimpleHexAtoi(range[0], &begin) &&
        absl::SimpleHexAtoi(range[1], &end)) {
      return std::make_pair(static_cast<uintptr_t>(begin), static_cast<uintptr_t>(end));
    }
  }
  return std::nullopt;
}

// Returns once every closure scheduled on `pool` before the call has run: one closure per
// thread, each waiting until all of them run, so that no thread is still in an earlier one.
inline void RunPoolClosuresScheduledSoFar(ThreadPool& pool) {
  struct Barrier {
    bool AllStarted() const { return started == threads; }
    bool AllLeft() const { return left == 0; }
    absl::Mutex mu;
    int threads = 0;
    int started = 0;
    int left = 0;
  } barrier;
  barrier.threads = barrier.left = pool.num_threads();
  for (int i = 0; i < pool.num_threads(); ++i) {
    pool.Schedule([&barrier] {
      absl::MutexLock lock(&barrier.mu);
      ++barrier.started;
      barrier.mu.Await(absl::Condition(&barrier, &Barrier::AllStarted));
      --barrier.left;
    });
  }
  absl::MutexLock lock(&barrier.mu);
  barrier.mu.Await(absl::Condition(&barrier, &Barrier::AllLeft));
}

}  // namespace record_test
}  // namespace sluice

#endif  // SLUICE_TESTS_CORE_RECORD_TEST_UTIL_H_
