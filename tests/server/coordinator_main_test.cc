// Runs the real sluice-coordinator binary: port file, serving, graceful exit on SIGTERM/SIGINT.
#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "proto/coordinator.grpc.pb.h"

namespace sluice {
namespace {

// Polls are bounded (not timed assertions): a broken binary fails the test instead of hanging.
constexpr int kPolls = 600;
constexpr auto kPollInterval = std::chrono::milliseconds(50);

std::string BinaryPath() {
  const char* dir = std::getenv("SLUICE_BUILD_DIR");
  return absl::StrCat(dir != nullptr ? dir : "build", "/bin/sluice-coordinator");
}

class CoordinatorMainTest : public ::testing::Test {
 protected:
  void SetUp() override {
    port_file_ = absl::StrCat(::testing::TempDir(), "/coord_port_", getpid(), "_",
                              ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::remove(port_file_.c_str());
    // A dependency of this test target: missing is a broken build, not a reason to skip.
    ASSERT_EQ(access(BinaryPath().c_str(), X_OK), 0) << BinaryPath() << " not built";
  }
  void TearDown() override {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    std::remove(port_file_.c_str());
  }

  // `extra`: one more flag (nullptr: none).
  void Launch(const char* extra = nullptr) {
    pid_ = fork();
    ASSERT_GE(pid_, 0);
    if (pid_ == 0) {
      const std::string bin = BinaryPath();
      const std::string port_file = absl::StrCat("--port_file=", port_file_);
      execl(bin.c_str(), bin.c_str(), "--port=0", port_file.c_str(), "--worker_timeout=30s",
            extra, static_cast<char*>(nullptr));
      _exit(127);
    }
  }

  // The port from the port file, once it appears; 0 if it never does.
  int WaitForPort() {
    for (int i = 0; i < kPolls; ++i) {
      std::ifstream in(port_file_);
      int port = 0;
      if (in >> port && port > 0) return port;
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return 0;
      }
      std::this_thread::sleep_for(kPollInterval);
    }
    return 0;
  }

  // The exit status after `sig`, or -1 if the process did not exit.
  int SignalAndWait(int sig) {
    kill(pid_, sig);
    for (int i = 0; i < kPolls; ++i) {
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
      std::this_thread::sleep_for(kPollInterval);
    }
    return -1;
  }

  std::string port_file_;
  pid_t pid_ = -1;
};

TEST_F(CoordinatorMainTest, WritesItsPortServesAndExitsCleanlyOnSigterm) {
  Launch();
  const int port = WaitForPort();
  ASSERT_GT(port, 0) << "no port in " << port_file_;
  {
    // The channel closes before the signal: an idle client in another process does not read
    // the server's GOAWAY, and the server would wait out its --shutdown_deadline for it.
    auto stub = proto::CoordinatorService::NewStub(grpc::CreateChannel(
        absl::StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials()));
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    proto::RegisterDatasetRequest req;
    req.set_wire_version(proto::WIRE_VERSION_1);
    req.set_pipeline("range(4).batch(2)");
    proto::RegisterDatasetResponse resp;
    grpc::Status s = stub->RegisterDataset(&ctx, req, &resp);
    ASSERT_TRUE(s.ok()) << s.error_message();
    EXPECT_EQ(resp.dataset_id().rfind("ds-", 0), 0u);
  }
  EXPECT_EQ(SignalAndWait(SIGTERM), 0);
}

// The status comes in pages (--status_page_size): `sluicectl status` follows them and shows
// every worker and job, not the first page only.
TEST_F(CoordinatorMainTest, SluicectlStatusFollowsEveryPage) {
  const std::string sluicectl =
      absl::StrCat(std::getenv("SLUICE_BUILD_DIR") != nullptr ? std::getenv("SLUICE_BUILD_DIR")
                                                               : "build",
                   "/bin/sluicectl");
  ASSERT_EQ(access(sluicectl.c_str(), X_OK), 0) << sluicectl << " not built";
  Launch("--status_page_size=2");
  const int port = WaitForPort();
  ASSERT_GT(port, 0) << "no port in " << port_file_;
  const std::string address = absl::StrCat("127.0.0.1:", port);
  {
    auto stub = proto::CoordinatorService::NewStub(
        grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
    for (int w = 0; w < 5; ++w) {  // five workers (heartbeats from a fake worker each)
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
      proto::WorkerHeartbeatRequest req;
      req.set_wire_version(proto::WIRE_VERSION_1);
      req.set_worker_address(absl::StrCat("127.0.0.1:", 9100 + w));
      proto::WorkerHeartbeatResponse resp;
      ASSERT_TRUE(stub->WorkerHeartbeat(&ctx, req, &resp).ok());
    }
    proto::GetStatusResponse first;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    ASSERT_TRUE(stub->GetStatus(&ctx, proto::GetStatusRequest(), &first).ok());
    EXPECT_EQ(first.workers_size(), 2) << "the flag sets the default page";
    EXPECT_FALSE(first.next_page_token().empty());
  }
  const std::string command =
      absl::StrCat(sluicectl, " status --coordinator=", address, " --format=json 2>&1");
  FILE* pipe = popen(command.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::string out;
  char buf[4096];
  size_t n = 0;
  while ((n = fread(buf, 1, sizeof(buf), pipe)) > 0) out.append(buf, n);
  EXPECT_EQ(pclose(pipe), 0) << out;
  for (int w = 0; w < 5; ++w) {
    EXPECT_NE(out.find(absl::StrCat("127.0.0.1:", 9100 + w)), std::string::npos)
        << "worker " << w << " missing from:\n" << out;
  }
  EXPECT_EQ(SignalAndWait(SIGTERM), 0);
}

TEST_F(CoordinatorMainTest, ExitsCleanlyOnSigint) {
  Launch();
  ASSERT_GT(WaitForPort(), 0);
  EXPECT_EQ(SignalAndWait(SIGINT), 0);
}

}  // namespace
}  // namespace sluice
