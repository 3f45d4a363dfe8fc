#include "tests/examples/subprocess.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>

#include "absl/strings/str_cat.h"

extern char** environ;

namespace sluice {
namespace {

std::string ErrnoText(int err) { return std::strerror(err); }

// The child's environment: the parent's, with `overrides` ("KEY=VALUE") replacing or adding.
std::vector<std::string> BuildEnv(const std::vector<std::string>& overrides) {
  std::vector<std::string> out;
  auto key_of = [](const std::string& kv) { return kv.substr(0, kv.find('=')); };
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    std::string kv(*e);
    bool replaced = false;
    for (const std::string& o : overrides) {
      if (key_of(o) == key_of(kv)) replaced = true;
    }
    if (!replaced) out.push_back(std::move(kv));
  }
  for (const std::string& o : overrides) out.push_back(o);
  return out;
}

std::vector<char*> CStrings(std::vector<std::string>& strings) {
  std::vector<char*> out;
  out.reserve(strings.size() + 1);
  for (std::string& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

// The line of `text` containing position `pos`, without its newline.
std::string LineAt(const std::string& text, size_t pos) {
  size_t begin = text.rfind('\n', pos);
  begin = begin == std::string::npos ? 0 : begin + 1;
  size_t end = text.find('\n', pos);
  if (end == std::string::npos) end = text.size();
  return text.substr(begin, end - begin);
}

// How long Wait() gives the pipes to close after the child exited (a grandchild may hold them)
// before it kills the process group, and again after that kill before it stops reading.
constexpr absl::Duration kDrainGrace = absl::Seconds(2);

}  // namespace

std::string SubprocessResult::Describe() const {
  if (timed_out) return "timed out (killed)";
  if (term_signal != 0) return absl::StrCat("signal ", term_signal);
  return absl::StrCat("exit ", exit_code);
}

absl::StatusOr<std::unique_ptr<Subprocess>> Subprocess::Start(
    const std::vector<std::string>& argv, const SubprocessOptions& options) {
  if (argv.empty()) return absl::InvalidArgumentError("Subprocess::Start: empty argv");
  int out[2];
  int err[2];
  if (pipe2(out, O_CLOEXEC) != 0) {
    return absl::InternalError(absl::StrCat("Subprocess::Start: pipe2: ", ErrnoText(errno)));
  }
  if (pipe2(err, O_CLOEXEC) != 0) {
    int e = errno;
    close(out[0]);
    close(out[1]);
    return absl::InternalError(absl::StrCat("Subprocess::Start: pipe2: ", ErrnoText(e)));
  }

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, out[1], 1);
  posix_spawn_file_actions_adddup2(&actions, err[1], 2);
  if (!options.working_dir.empty()) {
    posix_spawn_file_actions_addchdir_np(&actions, options.working_dir.c_str());
  }

  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t empty_mask;
  sigemptyset(&empty_mask);
  sigset_t default_signals;
  sigemptyset(&default_signals);
  for (int sig : {SIGPIPE, SIGTERM, SIGINT, SIGHUP, SIGCHLD}) sigaddset(&default_signals, sig);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK |
                                      POSIX_SPAWN_SETSIGDEF);
  posix_spawnattr_setpgroup(&attr, 0);  // own process group, so a kill reaches its children
  posix_spawnattr_setsigmask(&attr, &empty_mask);
  posix_spawnattr_setsigdefault(&attr, &default_signals);

  std::vector<std::string> args = argv;
  std::vector<char*> c_args = CStrings(args);
  std::vector<std::string> env = BuildEnv(options.env);
  std::vector<char*> c_env = CStrings(env);

  pid_t pid = -1;
  int rc = posix_spawnp(&pid, c_args[0], &actions, &attr, c_args.data(), c_env.data());
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  close(out[1]);
  close(err[1]);
  if (rc != 0) {
    close(out[0]);
    close(err[0]);
    return absl::InternalError(
        absl::StrCat("Subprocess::Start: cannot run '", argv[0], "': ", ErrnoText(rc)));
  }
  return std::unique_ptr<Subprocess>(new Subprocess(pid, out[0], err[0]));
}

Subprocess::Subprocess(pid_t pid, int stdout_fd, int stderr_fd)
    : pid_(pid), stdout_fd_(stdout_fd), stderr_fd_(stderr_fd) {
  reader_ = std::thread([this] { DrainLoop(); });
}

Subprocess::~Subprocess() {
  {
    absl::MutexLock l(&wait_mu_);
    if (!reaped_) KillAndReap();
  }
  {
    absl::MutexLock l(&mu_);
    stop_reading_ = true;
  }
  reader_.join();
}

void Subprocess::DrainLoop() {
  int fds[2] = {stdout_fd_, stderr_fd_};
  bool open[2] = {true, true};
  char buf[65536];
  while (open[0] || open[1]) {
    {
      absl::MutexLock l(&mu_);
      if (stop_reading_) break;
    }
    pollfd pfds[2];
    int n = 0;
    int which[2];
    for (int i = 0; i < 2; ++i) {
      if (!open[i]) continue;
      pfds[n] = {fds[i], POLLIN, 0};
      which[n++] = i;
    }
    // A bounded poll so that the destructor's stop request is seen even if a grandchild holds
    // a pipe open forever.
    int ready = poll(pfds, n, 100);
    if (ready < 0) {
      if (errno == EINTR) continue;
      break;
    }
    for (int k = 0; k < n; ++k) {
      if (pfds[k].revents == 0) continue;
      int i = which[k];
      ssize_t got = read(fds[i], buf, sizeof(buf));
      if (got < 0 && (errno == EINTR || errno == EAGAIN)) continue;
      absl::MutexLock l(&mu_);
      if (got <= 0) {
        open[i] = false;
        (i == 0 ? stdout_closed_ : stderr_closed_) = true;
      } else {
        (i == 0 ? stdout_ : stderr_).append(buf, static_cast<size_t>(got));
      }
    }
  }
  close(stdout_fd_);
  close(stderr_fd_);
  absl::MutexLock l(&mu_);
  stdout_closed_ = true;
  stderr_closed_ = true;
}

void Subprocess::KillAndReap() {
  killpg(pid_, SIGKILL);
  int status = 0;
  if (!wait_status_.has_value()) {
    while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
    wait_status_ = status;
  }
  reaped_ = true;
}

bool Subprocess::running() {
  absl::MutexLock l(&wait_mu_);
  if (reaped_ || wait_status_.has_value()) return false;
  int status = 0;
  pid_t r = waitpid(pid_, &status, WNOHANG);
  if (r == pid_) {
    wait_status_ = status;
    return false;
  }
  return r == 0;
}

absl::Status Subprocess::Signal(int sig) {
  absl::MutexLock l(&wait_mu_);
  if (reaped_) return absl::OkStatus();
  if (killpg(pid_, sig) != 0 && errno != ESRCH) {
    return absl::InternalError(
        absl::StrCat("Subprocess::Signal(", sig, ") on pid ", pid_, ": ", ErrnoText(errno)));
  }
  return absl::OkStatus();
}

absl::StatusOr<SubprocessResult> Subprocess::Wait(absl::Duration timeout) {
  absl::MutexLock l(&wait_mu_);
  if (reaped_) return result_;
  const absl::Time deadline = absl::Now() + timeout;
  bool timed_out = false;
  while (!wait_status_.has_value()) {
    int status = 0;
    pid_t r = waitpid(pid_, &status, WNOHANG);
    if (r == pid_) {
      wait_status_ = status;
      break;
    }
    if (r < 0 && errno != EINTR) {
      return absl::InternalError(
          absl::StrCat("Subprocess::Wait: waitpid(", pid_, "): ", ErrnoText(errno)));
    }
    if (absl::Now() >= deadline) {
      timed_out = true;
      KillAndReap();
      break;
    }
    absl::SleepFor(absl::Milliseconds(2));
  }
  // The child is gone; its output is in the pipes unless a grandchild keeps them open, in
  // which case the group is killed.
  auto drained = [this]() { return stdout_closed_ && stderr_closed_; };
  {
    absl::MutexLock ml(&mu_);
    if (!mu_.AwaitWithTimeout(absl::Condition(&drained), kDrainGrace)) {
      mu_.Unlock();
      killpg(pid_, SIGKILL);
      mu_.Lock();
      if (!mu_.AwaitWithTimeout(absl::Condition(&drained), kDrainGrace)) stop_reading_ = true;
    }
  }
  reaped_ = true;
  SubprocessResult result;
  const int status = *wait_status_;
  if (WIFEXITED(status)) result.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) result.term_signal = WTERMSIG(status);
  result.timed_out = timed_out;
  {
    absl::MutexLock ml(&mu_);
    result.stdout_text = stdout_;
    result.stderr_text = stderr_;
  }
  result_ = result;
  return result;
}

absl::StatusOr<std::string> Subprocess::WaitForOutput(SubprocessStream stream,
                                                      const std::string& needle,
                                                      absl::Duration timeout) {
  absl::MutexLock l(&mu_);
  const std::string& text = stream == SubprocessStream::kStdout ? stdout_ : stderr_;
  const bool& closed = stream == SubprocessStream::kStdout ? stdout_closed_ : stderr_closed_;
  auto ready = [&]() { return text.find(needle) != std::string::npos || closed; };
  mu_.AwaitWithTimeout(absl::Condition(&ready), timeout);
  const char* name = stream == SubprocessStream::kStdout ? "stdout" : "stderr";
  size_t pos = text.find(needle);
  if (pos != std::string::npos) return LineAt(text, pos);
  if (closed) {
    return absl::FailedPreconditionError(absl::StrCat("pid ", pid_, " closed its ", name,
                                                      " without printing '", needle,
                                                      "'; it printed:\n", text));
  }
  return absl::DeadlineExceededError(absl::StrCat("pid ", pid_, " did not print '", needle,
                                                  "' on ", name, " within ",
                                                  absl::FormatDuration(timeout),
                                                  "; it printed:\n", text));
}

std::string Subprocess::stdout_text() {
  absl::MutexLock l(&mu_);
  return stdout_;
}

std::string Subprocess::stderr_text() {
  absl::MutexLock l(&mu_);
  return stderr_;
}

absl::StatusOr<SubprocessResult> RunSubprocess(const std::vector<std::string>& argv,
                                               const SubprocessOptions& options) {
  absl::StatusOr<std::unique_ptr<Subprocess>> p = Subprocess::Start(argv, options);
  if (!p.ok()) return p.status();
  return (*p)->Wait(options.timeout);
}

}  // namespace sluice
