// The subprocess helper that the example, CLI and multi-process tests rely on: exit codes,
// separate stdout/stderr capture of any size, timeouts that kill, no zombies.
#include "tests/examples/subprocess.h"

#include <signal.h>
#include <sys/wait.h>

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace sluice {
namespace {

using ::testing::HasSubstr;

SubprocessResult MustRun(const std::vector<std::string>& argv, SubprocessOptions options = {}) {
  absl::StatusOr<SubprocessResult> r = RunSubprocess(argv, options);
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? *r : SubprocessResult{};
}

TEST(SubprocessTest, CapturesExitCodeAndBothStreamsSeparately) {
  SubprocessResult r = MustRun({"/bin/sh", "-c", "printf 'out\\n'; printf 'err' >&2; exit 3"});
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_EQ(r.term_signal, 0);
  EXPECT_FALSE(r.timed_out);
  EXPECT_EQ(r.stdout_text, "out\n");
  EXPECT_EQ(r.stderr_text, "err");
  EXPECT_EQ(r.Describe(), "exit 3");
}

TEST(SubprocessTest, CapturesOutputLargerThanAPipeBuffer) {
  // 1 MiB on each stream at once: a helper that read them one after the other would deadlock.
  SubprocessResult r = MustRun({"/bin/sh", "-c",
                                "head -c 1048576 /dev/zero | tr '\\0' a & "
                                "head -c 1048576 /dev/zero | tr '\\0' b >&2; wait"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.stdout_text, std::string(1 << 20, 'a'));
  EXPECT_EQ(r.stderr_text, std::string(1 << 20, 'b'));
}

TEST(SubprocessTest, TimeoutKillsAndReportsIt) {
  SubprocessOptions options;
  options.timeout = absl::Milliseconds(200);
  SubprocessResult r = MustRun({"/bin/sh", "-c", "echo started; exec sleep 1000"}, options);
  EXPECT_TRUE(r.timed_out);
  EXPECT_EQ(r.term_signal, SIGKILL);
  EXPECT_EQ(r.stdout_text, "started\n");
  EXPECT_EQ(r.Describe(), "timed out (killed)");
}

TEST(SubprocessTest, TimeoutKillsTheChildsChildrenToo) {
  SubprocessOptions options;
  options.timeout = absl::Milliseconds(200);
  // The shell waits on a background sleep: both are in the child's process group.
  SubprocessResult r = MustRun({"/bin/sh", "-c", "sleep 1000 & wait"}, options);
  EXPECT_TRUE(r.timed_out);
}

TEST(SubprocessTest, AGrandchildHoldingThePipesDoesNotHangWait) {
  // The shell exits at once; its background sleep keeps stdout open. Wait() must return.
  SubprocessResult r = MustRun({"/bin/sh", "-c", "sleep 1000 & echo parent done"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_FALSE(r.timed_out);
  EXPECT_EQ(r.stdout_text, "parent done\n");
}

TEST(SubprocessTest, MissingProgramIsAnErrorNotAnExitCode) {
  absl::StatusOr<SubprocessResult> r = RunSubprocess({"/nonexistent/program"});
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("/nonexistent/program"));
  EXPECT_FALSE(RunSubprocess({}).ok());
}

TEST(SubprocessTest, EnvironmentOverridesAndWorkingDirectory) {
  SubprocessOptions options;
  options.env = {"SLUICE_SUBPROCESS_TEST=hello", "HOME=/nowhere"};
  options.working_dir = "/tmp";
  SubprocessResult r =
      MustRun({"/bin/sh", "-c", "echo $SLUICE_SUBPROCESS_TEST $HOME; pwd"}, options);
  EXPECT_EQ(r.stdout_text, "hello /nowhere\n/tmp\n");
}

TEST(SubprocessTest, StdinIsEmpty) {
  SubprocessResult r = MustRun({"/bin/cat"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.stdout_text, "");
}

TEST(SubprocessTest, LongRunningProcessWaitForOutputSignalAndWait) {
  absl::StatusOr<std::unique_ptr<Subprocess>> p = Subprocess::Start(
      {"/bin/sh", "-c", "trap 'echo bye; exit 7' TERM; echo 'listening on port 1234' >&2; "
                        "while true; do sleep 0.05; done"});
  ASSERT_TRUE(p.ok()) << p.status();
  absl::StatusOr<std::string> line =
      (*p)->WaitForOutput(SubprocessStream::kStderr, "listening on", absl::Seconds(60));
  ASSERT_TRUE(line.ok()) << line.status();
  EXPECT_EQ(*line, "listening on port 1234");
  EXPECT_TRUE((*p)->running());
  ASSERT_TRUE((*p)->Signal(SIGTERM).ok());
  absl::StatusOr<SubprocessResult> r = (*p)->Wait(absl::Seconds(60));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->exit_code, 7);
  EXPECT_EQ(r->stdout_text, "bye\n");
  EXPECT_FALSE((*p)->running());
  // Waiting again returns the same result; signalling a reaped process is harmless.
  absl::StatusOr<SubprocessResult> again = (*p)->Wait(absl::Seconds(1));
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->exit_code, 7);
  EXPECT_TRUE((*p)->Signal(SIGTERM).ok());
}

TEST(SubprocessTest, WaitForOutputReportsTimeoutAndClosedStream) {
  absl::StatusOr<std::unique_ptr<Subprocess>> p =
      Subprocess::Start({"/bin/sh", "-c", "echo something else; exec sleep 1000"});
  ASSERT_TRUE(p.ok()) << p.status();
  absl::StatusOr<std::string> line =
      (*p)->WaitForOutput(SubprocessStream::kStdout, "ready", absl::Milliseconds(100));
  EXPECT_EQ(line.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(std::string(line.status().message()), HasSubstr("something else"));

  absl::StatusOr<std::unique_ptr<Subprocess>> q = Subprocess::Start({"/bin/sh", "-c", "echo x"});
  ASSERT_TRUE(q.ok()) << q.status();
  line = (*q)->WaitForOutput(SubprocessStream::kStdout, "ready", absl::Seconds(60));
  EXPECT_EQ(line.status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(SubprocessTest, DestructorKillsAndReapsARunningChild) {
  pid_t pid = 0;
  {
    absl::StatusOr<std::unique_ptr<Subprocess>> p =
        Subprocess::Start({"/bin/sh", "-c", "exec sleep 1000"});
    ASSERT_TRUE(p.ok()) << p.status();
    pid = (*p)->pid();
    EXPECT_TRUE((*p)->running());
  }
  // Reaped: the pid is no longer our child (no zombie left behind).
  int status = 0;
  EXPECT_EQ(waitpid(pid, &status, WNOHANG), -1);
  EXPECT_EQ(errno, ECHILD);
}

}  // namespace
}  // namespace sluice
