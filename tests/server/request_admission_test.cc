// RequestAdmission's start-up warning: a coordinator reachable beyond loopback with no
// authentication says so once (sluice-coordinator prints it); on loopback, or with any token
// or client certificates, it says nothing.
#include "server/request_admission.h"

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace sluice {
namespace {

TEST(OpenServiceWarningTest, WarnsOnlyForAnUnauthenticatedNonLoopbackAddress) {
  for (const char* host : {"0.0.0.0", "::", "10.0.0.5", "coordinator.example.com"}) {
    const std::string warning = RequestAdmission::OpenServiceWarning(host, false);
    EXPECT_TRUE(absl::StrContains(warning, "no authentication")) << host << ": " << warning;
    EXPECT_TRUE(absl::StrContains(warning, host)) << warning;
    EXPECT_TRUE(absl::StrContains(warning, "--worker_token_file")) << warning;
    EXPECT_EQ(RequestAdmission::OpenServiceWarning(host, true), "") << host;
  }
  for (const char* host : {"127.0.0.1", "127.1.2.3", "::1", "[::1]", "localhost", "LOCALHOST"}) {
    EXPECT_EQ(RequestAdmission::OpenServiceWarning(host, false), "") << host;
  }
}

}  // namespace
}  // namespace sluice
