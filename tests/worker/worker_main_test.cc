// The sluice-worker binary's own flags: plugins come only from --plugin, and a bad one stops the
// worker before it serves anything; --bulk_max_frame_bytes is checked before serving; an
// address it cannot bind stops it with an error.
#include <csignal>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "tests/examples/subprocess.h"
#include "tests/examples/test_paths.h"

namespace sluice {
namespace {

TEST(WorkerMainTest, UnloadablePluginIsAClearErrorNamingTheFile) {
  const std::string missing = "/nonexistent/libno_such_plugin.so";
  SubprocessOptions options;
  options.timeout = absl::Seconds(60);
  absl::StatusOr<SubprocessResult> r = RunSubprocess(
      {BuildPath("bin/sluice-worker"), "--coordinator=127.0.0.1:1", "--plugin=" + missing},
      options);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->exit_code, 1) << r->Describe();
  EXPECT_NE(r->stderr_text.find(missing), std::string::npos) << r->stderr_text;
}

TEST(WorkerMainTest, ExamplePluginLoadsAndTheWorkerStartsServing) {
  absl::StatusOr<std::unique_ptr<Subprocess>> worker = Subprocess::Start(
      {BuildPath("bin/sluice-worker"), "--coordinator=127.0.0.1:1",
       "--drain_timeout=1s",
       "--plugin=" + BuildPath("examples/plugins/libsluice_example_plugin.so")},
      SubprocessOptions{});
  ASSERT_TRUE(worker.ok()) << worker.status();
  absl::StatusOr<std::string> out =
      (*worker)->WaitForOutput(SubprocessStream::kStderr, "serving on", absl::Seconds(60));
  EXPECT_TRUE(out.ok()) << out.status() << "\n" << (*worker)->stderr_text();
  ASSERT_TRUE((*worker)->Signal(SIGTERM).ok());
  absl::StatusOr<SubprocessResult> r = (*worker)->Wait(absl::Seconds(60));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->exit_code, 0) << r->Describe();
}

// An address the worker cannot bind (203.0.113.1: TEST-NET-3, RFC 5737, no host's address) is
// a start-up error naming it, exit code 1; the worker used to crash there (SIGSEGV, its start
// undone with no server to shut down).
TEST(WorkerMainTest, AnAddressItCannotBindIsAClearError) {
  SubprocessOptions options;
  options.timeout = absl::Seconds(60);
  absl::StatusOr<SubprocessResult> r =
      RunSubprocess({BuildPath("bin/sluice-worker"), "--coordinator=127.0.0.1:1",
                     "--host=203.0.113.1", "--port=0"},
                    options);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->exit_code, 1) << r->Describe();
  EXPECT_NE(r->stderr_text.find("UNAVAILABLE: WorkerServer: cannot bind 203.0.113.1:0"),
            std::string::npos)
      << r->stderr_text;
}

// --bulk_max_frame_bytes: a value outside [1 MiB (the frame size on gRPC), 1 GiB] stops the
// worker before it serves, naming the flag and the value; one inside reaches the bulk data
// channel, which reports the cap its streams' frames use.
TEST(WorkerMainTest, BulkMaxFrameBytesOutsideItsRangeIsAStartUpError) {
  for (const std::string bad : {"0", "-1", "1048575", "1073741825", "9223372036854775807"}) {
    SCOPED_TRACE(bad);
    SubprocessOptions options;
    options.timeout = absl::Seconds(60);
    absl::StatusOr<SubprocessResult> r =
        RunSubprocess({BuildPath("bin/sluice-worker"), "--coordinator=127.0.0.1:1",
                       "--bulk_max_frame_bytes=" + bad},
                      options);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->exit_code, 2) << r->Describe();
    EXPECT_NE(r->stderr_text.find("--bulk_max_frame_bytes must be in [1048576 (the frame size "
                                  "on gRPC), 1073741824] bytes, got " + bad),
              std::string::npos)
        << r->stderr_text;
    EXPECT_EQ(r->stderr_text.find("serving on"), std::string::npos) << r->stderr_text;
  }
}

TEST(WorkerMainTest, BulkMaxFrameBytesIsTheBulkChannelsFrameCap) {
  for (const auto& [flag, cap] : {std::pair<std::string, std::string>{"", "4194304"},
                                  {"--bulk_max_frame_bytes=1048576", "1048576"},
                                  {"--bulk_max_frame_bytes=16777216", "16777216"}}) {
    SCOPED_TRACE(flag);
    std::vector<std::string> argv = {BuildPath("bin/sluice-worker"), "--coordinator=127.0.0.1:1",
                                     "--drain_timeout=1s", "--bulk_data=true"};
    if (!flag.empty()) argv.push_back(flag);
    absl::StatusOr<std::unique_ptr<Subprocess>> worker =
        Subprocess::Start(argv, SubprocessOptions{});
    ASSERT_TRUE(worker.ok()) << worker.status();
    absl::StatusOr<std::string> out = (*worker)->WaitForOutput(
        SubprocessStream::kStderr, "frames up to " + cap + " bytes", absl::Seconds(60));
    EXPECT_TRUE(out.ok()) << out.status() << "\n" << (*worker)->stderr_text();
    ASSERT_TRUE((*worker)->Signal(SIGTERM).ok());
    absl::StatusOr<SubprocessResult> r = (*worker)->Wait(absl::Seconds(60));
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->exit_code, 0) << r->Describe();
  }
}

}  // namespace
}  // namespace sluice
