// A coordinator whose replanner thread cannot start (the system refuses it: EAGAIN under
// RLIMIT_NPROC or memory pressure) does not start: Coordinator::Create, and with it
// CoordinatorServer::Start (sluice-coordinator's start-up), returns RESOURCE_EXHAUSTED naming the
// thread, where the coordinator used to end the process that made it. Driven through
// StartThread's fault seam (core/util/start_thread.h).
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "core/util/start_thread.h"
#include "gtest/gtest.h"
#include "server/coordinator.h"
#include "server/grpc_coordinator_service.h"

namespace sluice {
namespace {

constexpr char kReplanner[] = "the coordinator's replanner";

CoordinatorServerOptions Quiet() {
  CoordinatorServerOptions options;
  options.coordinator.log = [](absl::string_view) {};
  return options;
}

TEST(CoordinatorThreadStartTest, ACoordinatorWhoseReplannerCannotStartFailsItsCreate) {
  TEST_FailThreadStarts(1, kReplanner);
  absl::StatusOr<std::unique_ptr<Coordinator>> coordinator =
      Coordinator::Create(Quiet().coordinator);
  EXPECT_EQ(TEST_ThreadStartsLeftToFail(), 0) << "nothing started a thread for " << kReplanner;
  TEST_FailThreadStarts(0);
  ASSERT_FALSE(coordinator.ok());
  EXPECT_EQ(coordinator.status().code(), absl::StatusCode::kResourceExhausted)
      << coordinator.status();
  EXPECT_TRUE(absl::StrContains(coordinator.status().message(),
                                absl::StrCat("cannot start a thread for ", kReplanner)))
      << coordinator.status();
}

TEST(CoordinatorThreadStartTest, ACoordinatorServerWhoseReplannerCannotStartFailsItsStart) {
  TEST_FailThreadStarts(1, kReplanner);
  absl::StatusOr<std::unique_ptr<CoordinatorServer>> server = CoordinatorServer::Start(Quiet());
  EXPECT_EQ(TEST_ThreadStartsLeftToFail(), 0) << "nothing started a thread for " << kReplanner;
  TEST_FailThreadStarts(0);
  ASSERT_FALSE(server.ok());
  EXPECT_EQ(server.status().code(), absl::StatusCode::kResourceExhausted) << server.status();
  EXPECT_TRUE(absl::StrContains(server.status().message(),
                                absl::StrCat("cannot start a thread for ", kReplanner)))
      << server.status();
  // The refused thread, not the options: with every thread allowed they start a server.
  server = CoordinatorServer::Start(Quiet());
  ASSERT_TRUE(server.ok()) << server.status();
}

}  // namespace
}  // namespace sluice
