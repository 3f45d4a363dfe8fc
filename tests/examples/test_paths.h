// Where tests find the built programs and the source tree's test data.
//
// Tests run with the repository root as working directory and SLUICE_BUILD_DIR set by CTest;
// run by hand, the paths CMake configured into the test library are used instead.
#ifndef SLUICE_TESTS_EXAMPLES_TEST_PATHS_H_
#define SLUICE_TESTS_EXAMPLES_TEST_PATHS_H_

#include <string>

#include "absl/status/statusor.h"

namespace sluice {

// $SLUICE_BUILD_DIR/<relative>, or <configured build dir>/<relative>: "bin/sluicectl",
// "examples/seed_iter".
std::string BuildPath(const std::string& relative);

// <source dir>/<relative>: "tests/testdata/seed/seed_iter.txt".
std::string SourcePath(const std::string& relative);

// The whole content of a file; NOT_FOUND naming the path when it cannot be read.
absl::StatusOr<std::string> ReadFileToString(const std::string& path);

}  // namespace sluice

#endif  // SLUICE_TESTS_EXAMPLES_TEST_PATHS_H_
