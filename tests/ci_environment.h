// Whether the tests run under CI (the CI environment variable, as most CI runners set it). A
// test whose dependency is missing skips, saying which; under CI a dependency that
// scripts/test.sh installs (openssl, moto[server], ...) must be there, so its absence fails the
// test instead of a skip that would look like a pass. The same rule as python/tests/
// dependencies.py and scripts/test.sh.
//
//   if (!HaveOpenssl()) {
//     if (InCi()) FAIL() << "openssl is missing; CI=true requires it";
//     GTEST_SKIP() << "the openssl command is not installed";
//   }
//
// Thread safety: reads the environment; call it from the test's thread.
#ifndef SLUICE_TESTS_CI_ENVIRONMENT_H_
#define SLUICE_TESTS_CI_ENVIRONMENT_H_

#include <cstdlib>
#include <string>

#include "absl/strings/ascii.h"

namespace sluice {

// True when CI is "true", "1" or "yes" (any case).
inline bool InCi() {
  const char* ci = std::getenv("CI");
  if (ci == nullptr) return false;
  const std::string v = absl::AsciiStrToLower(ci);
  return v == "true" || v == "1" || v == "yes";
}

}  // namespace sluice

#endif  // SLUICE_TESTS_CI_ENVIRONMENT_H_
