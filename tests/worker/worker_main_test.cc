// The sluice-worker binary's own flags: plugins come only from --plugin, and a bad one stops the
// worker before it serves anything.
#include <csignal>
#include <string>

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

}  // namespace
}  // namespace sluice
