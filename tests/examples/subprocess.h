// Subprocess: runs a program as a child process for tests, capturing its stdout and stderr.
//
// Two uses:
//
//   // A command that finishes: run it, wait (bounded), get exit code and output.
//   absl::StatusOr<SubprocessResult> r =
//       RunSubprocess({"build/bin/sluicectl", "help"}, {.timeout = absl::Seconds(60)});
//
//   // A server that keeps running: start it, wait for a line, talk to it, stop it.
//   absl::StatusOr<std::unique_ptr<Subprocess>> p = Subprocess::Start({coordinator, "--port=0"});
//   absl::StatusOr<std::string> line =
//       (*p)->WaitForOutput(SubprocessStream::kStderr, "listening on", absl::Seconds(30));
//   (*p)->Signal(SIGTERM);
//   absl::StatusOr<SubprocessResult> r = (*p)->Wait(absl::Seconds(30));
//
// The child runs in its own process group (so a kill reaches anything it started), with stdin
// from /dev/null and the parent's environment plus SubprocessOptions::env. A background thread
// drains both pipes into memory, so a chatty child never blocks on a full pipe.
//
// No zombies, no orphans: Wait() reaps the child; on timeout it kills the whole group with
// SIGKILL and reaps it. Once the child has exited, Wait() gives the pipes 2 s to close; if a
// leftover process of the group still holds them, the group is killed. The destructor of a
// Subprocess still running kills the group and reaps it.
//
// Thread safety: all methods may be called from several threads at once; output accessors
// return snapshots.
#ifndef SLUICE_TESTS_EXAMPLES_SUBPROCESS_H_
#define SLUICE_TESTS_EXAMPLES_SUBPROCESS_H_

#include <sys/types.h>

#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace sluice {

struct SubprocessOptions {
  // Extra environment entries "KEY=VALUE"; they replace the parent's entries of the same KEY.
  std::vector<std::string> env = {};
  // Working directory of the child; empty: the parent's.
  std::string working_dir = {};
  // For RunSubprocess(): how long to wait for the child to exit before killing it.
  absl::Duration timeout = absl::Seconds(120);
};

struct SubprocessResult {
  // The exit status when the child exited normally, else -1.
  int exit_code = -1;
  // The signal that ended the child, else 0.
  int term_signal = 0;
  // True when Wait()/RunSubprocess() gave up waiting and killed the child.
  bool timed_out = false;
  std::string stdout_text;
  std::string stderr_text;

  // "exit 0", "signal 9", "timed out (killed)": for test failure messages.
  std::string Describe() const;
};

enum class SubprocessStream { kStdout, kStderr };

class Subprocess {
 public:
  // Starts argv[0] (looked up in PATH when it has no '/') with arguments argv[1..].
  // INVALID_ARGUMENT for an empty argv; INTERNAL (with errno text) when the pipes cannot be
  // made or the program cannot be spawned (a missing program is reported here, not as exit 127).
  static absl::StatusOr<std::unique_ptr<Subprocess>> Start(const std::vector<std::string>& argv,
                                                            const SubprocessOptions& options = {});

  // Kills the process group with SIGKILL if the child is still running, and reaps it.
  ~Subprocess();
  Subprocess(const Subprocess&) = delete;
  Subprocess& operator=(const Subprocess&) = delete;

  pid_t pid() const { return pid_; }

  // Waits up to `timeout` for the child to exit and for its output to be drained. On timeout
  // kills the group (SIGKILL), reaps it and returns a result with timed_out = true. Later calls
  // return the same result. INTERNAL only if waitpid fails unexpectedly.
  absl::StatusOr<SubprocessResult> Wait(absl::Duration timeout);

  // Sends `sig` to the child's process group; OK if it already exited (nothing to signal).
  absl::Status Signal(int sig);

  // False once the child has exited (it is then collected; Wait() still gives its result).
  bool running();

  // Waits until `stream`'s output so far contains `needle`; returns the whole line containing
  // its first occurrence (without the newline; the line may still be incomplete). DEADLINE_EXCEEDED
  // after `timeout`, FAILED_PRECONDITION when the stream closes without it; both messages
  // quote the stream's output so far.
  absl::StatusOr<std::string> WaitForOutput(SubprocessStream stream, const std::string& needle,
                                            absl::Duration timeout);

  // Snapshots of the output captured so far.
  std::string stdout_text();
  std::string stderr_text();

 private:
  Subprocess(pid_t pid, int stdout_fd, int stderr_fd);
  void DrainLoop();  // the reader thread: reads both pipes until EOF on both
  void KillAndReap() ABSL_EXCLUSIVE_LOCKS_REQUIRED(wait_mu_);

  const pid_t pid_;
  int stdout_fd_;
  int stderr_fd_;
  std::thread reader_;

  absl::Mutex mu_;
  std::string stdout_ ABSL_GUARDED_BY(mu_);
  std::string stderr_ ABSL_GUARDED_BY(mu_);
  bool stdout_closed_ ABSL_GUARDED_BY(mu_) = false;
  bool stderr_closed_ ABSL_GUARDED_BY(mu_) = false;
  bool stop_reading_ ABSL_GUARDED_BY(mu_) = false;  // the reader thread should exit

  absl::Mutex wait_mu_;  // serializes reaping
  bool reaped_ ABSL_GUARDED_BY(wait_mu_) = false;
  std::optional<int> wait_status_ ABSL_GUARDED_BY(wait_mu_);  // from waitpid, once collected
  SubprocessResult result_ ABSL_GUARDED_BY(wait_mu_);
};

// Starts argv, waits up to options.timeout, returns the result (see Subprocess::Wait).
absl::StatusOr<SubprocessResult> RunSubprocess(const std::vector<std::string>& argv,
                                               const SubprocessOptions& options = {});

}  // namespace sluice

#endif  // SLUICE_TESTS_EXAMPLES_SUBPROCESS_H_
