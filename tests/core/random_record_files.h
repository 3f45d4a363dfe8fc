// Random bytes and gzip files for the record-reader tests (seeded by the caller).
#ifndef SLUICE_TESTS_CORE_RANDOM_RECORD_FILES_H_
#define SLUICE_TESTS_CORE_RANDOM_RECORD_FILES_H_

#include <zlib.h>

#include <cstddef>
#include <random>
#include <string>

#include "gtest/gtest.h"

namespace sluice {
namespace record_test {

inline std::string RandomBytes(size_t n, std::mt19937* rng) {
  std::string s(n, '\0');
  for (char& c : s) c = static_cast<char>((*rng)() & 0xff);
  return s;
}

// `data` gzip-compressed into `path` (a test failure when zlib refuses).
inline void WriteGzip(const std::string& path, const std::string& data) {
  gzFile f = gzopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(gzwrite(f, data.data(), static_cast<unsigned>(data.size())),
            static_cast<int>(data.size()));
  ASSERT_EQ(gzclose(f), Z_OK);
}

}  // namespace record_test
}  // namespace sluice

#endif  // SLUICE_TESTS_CORE_RANDOM_RECORD_FILES_H_
