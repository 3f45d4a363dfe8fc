#include "tests/integration/process_cluster.h"

#include <signal.h>
#include <stdlib.h>

#include <filesystem>
#include <map>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/synchronization/mutex.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "grpcpp/grpcpp.h"
#include "proto/coordinator.grpc.pb.h"
#include "tests/examples/test_paths.h"

namespace sluice {
namespace {

std::string Tail(const std::string& text, size_t max = 3000) {
  return text.size() <= max ? text : absl::StrCat("...", text.substr(text.size() - max));
}

std::string DurationFlag(absl::Duration d) {
  return absl::StrCat(absl::ToInt64Milliseconds(d), "ms");
}

// Waits until `path` holds a port (the servers write it atomically, newline-terminated) while
// `process` runs.
absl::StatusOr<int> WaitForPortFile(const std::string& path, Subprocess& process,
                                    const std::string& name, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    absl::StatusOr<std::string> text = ReadFileToString(path);
    int port = 0;
    if (text.ok() && absl::SimpleAtoi(absl::StripAsciiWhitespace(*text), &port) && port > 0) {
      return port;
    }
    if (!process.running()) {
      absl::StatusOr<SubprocessResult> r = process.Wait(absl::Seconds(5));
      return absl::FailedPreconditionError(
          absl::StrCat(name, " exited (", r.ok() ? r->Describe() : "?",
                       ") before writing ", path, "; stderr:\n", Tail(process.stderr_text())));
    }
    if (absl::Now() > deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat(name, " wrote no port to ", path, " within ",
                       absl::FormatDuration(timeout), "; stderr:\n", Tail(process.stderr_text())));
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<ProcessCluster>> ProcessCluster::Start(
    ProcessClusterOptions options) {
  std::unique_ptr<ProcessCluster> cluster(new ProcessCluster());
  cluster->options_ = std::move(options);
  const char* tmp = std::getenv("TMPDIR");
  std::string templ = absl::StrCat(tmp != nullptr && tmp[0] != '\0' ? tmp : "/tmp",
                                   "/sluice-integration-XXXXXX");
  if (mkdtemp(templ.data()) == nullptr) {
    return absl::InternalError(absl::StrCat("mkdtemp ", templ, " failed"));
  }
  cluster->dir_ = templ;
  if (cluster->options_.work_dir) {
    cluster->work_dir_ = cluster->dir_ + "/coordinator-work";
    std::error_code ec;
    std::filesystem::create_directories(cluster->work_dir_, ec);
    if (ec) {
      return absl::InternalError(
          absl::StrCat("cannot create ", cluster->work_dir_, ": ", ec.message()));
    }
  }

  absl::Status s = cluster->StartCoordinator(/*port=*/0);
  if (!s.ok()) return s;
  for (int i = 0; i < cluster->options_.num_workers; ++i) {
    absl::StatusOr<int> w = cluster->StartWorker();
    if (!w.ok()) return w.status();
  }
  // Every worker registered and alive before the test makes a job.
  s = cluster->WaitForWorkersAlive(cluster->worker_addresses_);
  if (!s.ok()) return s;
  return cluster;
}

absl::Status ProcessCluster::StartCoordinator(int port) {
  const std::string port_file =
      absl::StrCat(dir_, "/coordinator-", coordinator_starts_++, ".port");
  std::vector<std::string> argv = {
      BuildPath("bin/sluice-coordinator"), absl::StrCat("--port=", port),
      absl::StrCat("--port_file=", port_file),
      absl::StrCat("--worker_timeout=", DurationFlag(options_.worker_timeout))};
  if (!work_dir_.empty()) argv.push_back(absl::StrCat("--work_dir=", work_dir_));
  argv.insert(argv.end(), options_.coordinator_flags.begin(), options_.coordinator_flags.end());
  absl::StatusOr<std::unique_ptr<Subprocess>> coordinator = Subprocess::Start(argv);
  if (!coordinator.ok()) return coordinator.status();
  coordinator_process_ = *std::move(coordinator);
  coordinator_killed_ = false;
  absl::StatusOr<int> bound =
      WaitForPortFile(port_file, *coordinator_process_, "sluice-coordinator",
                      options_.start_timeout);
  if (!bound.ok()) return bound.status();
  if (port != 0 && *bound != port) {
    return absl::InternalError(
        absl::StrCat("sluice-coordinator restarted on port ", *bound, ", not ", port));
  }
  coordinator_port_ = *bound;
  coordinator_ = absl::StrCat("127.0.0.1:", *bound);
  return absl::OkStatus();
}

absl::StatusOr<int> ProcessCluster::StartWorker(int index, int port) {
  const int i = index < 0 ? num_workers() : index;
  const std::string port_file = absl::StrCat(dir_, "/worker-", i, ".port");
  if (index >= 0) std::filesystem::remove(port_file);  // the old process's
  std::vector<std::string> argv = {
      BuildPath("bin/sluice-worker"), absl::StrCat("--coordinator=", coordinator_),
      absl::StrCat("--port=", port), absl::StrCat("--port_file=", port_file),
      absl::StrCat("--heartbeat_interval=", DurationFlag(options_.heartbeat_interval)),
      absl::StrCat("--buffer_bytes=", options_.worker_buffer_bytes), "--drain_timeout=5s"};
  // The suites' TCP runs (`tcp.`, SLUICE_SHARED_MEMORY=0): every frame with tensor bytes on
  // the bulk data channel (core/rpc/bulk_channel.h), so that kills, restarts and drains hit it.
  if (const char* shm = std::getenv("SLUICE_SHARED_MEMORY");
      shm != nullptr && shm == std::string("0")) {
    argv.push_back("--bulk_min_bytes=1");
  }
  argv.insert(argv.end(), options_.worker_flags.begin(), options_.worker_flags.end());
  absl::StatusOr<std::unique_ptr<Subprocess>> worker = Subprocess::Start(argv);
  if (!worker.ok()) return worker.status();
  if (index < 0) {
    workers_.push_back(*std::move(worker));
    state_.push_back(WorkerState::kRunning);
    worker_addresses_.push_back("");
  } else {
    workers_[i] = *std::move(worker);
    state_[i] = WorkerState::kRunning;
  }
  absl::StatusOr<int> worker_port =
      WaitForPortFile(port_file, *workers_[i],
                      absl::StrCat("sluice-worker ", i), options_.start_timeout);
  if (!worker_port.ok()) return worker_port.status();
  worker_addresses_[i] = absl::StrCat("127.0.0.1:", *worker_port);
  return i;
}

absl::Status ProcessCluster::WaitForWorkersAlive(const std::vector<std::string>& addresses) {
  const absl::Time deadline = absl::Now() + options_.start_timeout;
  while (true) {
    absl::StatusOr<proto::GetStatusResponse> status = Status();
    int alive = 0;
    if (status.ok()) {
      for (const std::string& address : addresses) {
        for (const proto::WorkerStatus& w : status->workers()) {
          if (w.address() == address && w.alive()) {
            ++alive;
            break;
          }
        }
      }
    }
    if (alive == static_cast<int>(addresses.size())) return absl::OkStatus();
    if (absl::Now() > deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat(alive, " of ", addresses.size(), " workers registered within ",
                       absl::FormatDuration(options_.start_timeout), " (last status: ",
                       status.status().ToString(), ")\n", Logs()));
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
}

ProcessCluster::~ProcessCluster() {
  // Subprocess destructors SIGKILL and reap whatever still runs (a stopped process too).
  workers_.clear();
  coordinator_process_.reset();
  if (!dir_.empty()) {
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }
}

absl::StatusOr<proto::GetStatusResponse> ProcessCluster::Status() const {
  auto stub = proto::CoordinatorService::NewStub(
      grpc::CreateChannel(coordinator_, grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
  proto::GetStatusResponse response;
  grpc::Status s = stub->GetStatus(&context, proto::GetStatusRequest(), &response);
  if (!s.ok()) {
    return absl::Status(static_cast<absl::StatusCode>(s.error_code()),
                        absl::StrCat("GetStatus on ", coordinator_, ": ", s.error_message()));
  }
  return response;
}

absl::Status ProcessCluster::KillWorker(int i) {
  if (i < 0 || i >= num_workers()) {
    return absl::InvalidArgumentError(absl::StrCat("no worker ", i));
  }
  absl::Status s = workers_[i]->Signal(SIGKILL);
  if (!s.ok()) return s;
  state_[i] = WorkerState::kGone;
  absl::StatusOr<SubprocessResult> r = workers_[i]->Wait(absl::Seconds(30));
  return r.ok() ? absl::OkStatus() : r.status();
}

std::vector<int> ProcessCluster::ReapExitedWorkers() {
  std::vector<int> out;
  for (int i = 0; i < num_workers(); ++i) {
    if (state_[i] == WorkerState::kRunning && !workers_[i]->running()) {
      state_[i] = WorkerState::kGone;
      out.push_back(i);
    }
  }
  return out;
}

absl::Status ProcessCluster::RestartWorker(int i) {
  if (i < 0 || i >= num_workers()) return absl::InvalidArgumentError(absl::StrCat("no worker ", i));
  const std::string address = worker_addresses_[i];
  const int port = std::stoi(address.substr(address.rfind(':') + 1));
  if (state_[i] != WorkerState::kGone) {
    if (state_[i] == WorkerState::kStopped) (void)workers_[i]->Signal(SIGCONT);
    if (absl::Status s = KillWorker(i); !s.ok()) return s;
  }
  // The old process is dead from here: a heartbeat the coordinator saw after this instant is the
  // new process's. (Its address being alive is not enough: the old registration stays alive
  // until the coordinator's worker timeout.)
  const absl::Time started = absl::Now();
  absl::StatusOr<int> restarted = StartWorker(i, port);
  if (!restarted.ok()) return restarted.status();
  if (worker_addresses_[i] != address) {
    return absl::FailedPreconditionError(absl::StrCat("worker ", i, " restarted on ",
                                                      worker_addresses_[i], ", not ", address));
  }
  const absl::Time deadline = absl::Now() + options_.start_timeout;
  while (true) {
    // Asked before the call: a heartbeat seen within this of the status is after `started`.
    const double since_start = absl::ToDoubleSeconds(absl::Now() - started);
    absl::StatusOr<proto::GetStatusResponse> status = Status();
    if (status.ok()) {
      for (const proto::WorkerStatus& w : status->workers()) {
        if (w.address() == address && w.alive() && w.seconds_since_heartbeat() >= 0 &&
            w.seconds_since_heartbeat() < since_start) {
          return absl::OkStatus();
        }
      }
    }
    if (absl::Now() > deadline) {
      return absl::DeadlineExceededError(absl::StrCat(
          "restarted worker ", address, " sent no heartbeat within ",
          absl::FormatDuration(options_.start_timeout), " (last status: ",
          status.status().ToString(), ")\n", Logs()));
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
}

absl::StatusOr<int> ProcessCluster::AddWorker() {
  absl::StatusOr<int> i = StartWorker();
  if (!i.ok()) return i.status();
  absl::Status s = WaitForWorkersAlive({worker_addresses_[*i]});
  if (!s.ok()) return s;
  return *i;
}

absl::Status ProcessCluster::StopWorker(int i) {
  if (i < 0 || i >= num_workers() || state_[i] != WorkerState::kRunning) {
    return absl::FailedPreconditionError(absl::StrCat("worker ", i, " is not running"));
  }
  absl::Status s = workers_[i]->Signal(SIGSTOP);
  if (s.ok()) state_[i] = WorkerState::kStopped;
  return s;
}

absl::Status ProcessCluster::ContinueWorker(int i) {
  if (i < 0 || i >= num_workers() || state_[i] != WorkerState::kStopped) {
    return absl::FailedPreconditionError(absl::StrCat("worker ", i, " is not stopped"));
  }
  absl::Status s = workers_[i]->Signal(SIGCONT);
  if (s.ok()) state_[i] = WorkerState::kRunning;
  return s;
}

absl::Status ProcessCluster::TerminateWorker(int i, absl::Duration timeout,
                                             const std::function<void()>& after_signal) {
  if (i < 0 || i >= num_workers() || state_[i] == WorkerState::kGone) {
    return absl::FailedPreconditionError(absl::StrCat("worker ", i, " is not running"));
  }
  if (state_[i] == WorkerState::kStopped) {
    absl::Status s = workers_[i]->Signal(SIGCONT);
    if (!s.ok()) return s;
  }
  absl::Status s = workers_[i]->Signal(SIGTERM);
  state_[i] = WorkerState::kGone;
  if (!s.ok()) return s;
  if (after_signal != nullptr) after_signal();
  absl::StatusOr<SubprocessResult> r = workers_[i]->Wait(timeout);
  if (!r.ok()) return r.status();
  if (r->exit_code != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("sluice-worker ", i, " (", worker_addresses_[i], ") on SIGTERM: ",
                     r->Describe(), "; stderr:\n", Tail(r->stderr_text, 1500)));
  }
  return absl::OkStatus();
}

absl::Status ProcessCluster::KillCoordinator() {
  if (coordinator_process_ == nullptr || coordinator_killed_) {
    return absl::FailedPreconditionError("the coordinator is not running");
  }
  absl::Status s = coordinator_process_->Signal(SIGKILL);
  if (!s.ok()) return s;
  coordinator_killed_ = true;
  absl::StatusOr<SubprocessResult> r = coordinator_process_->Wait(absl::Seconds(30));
  return r.ok() ? absl::OkStatus() : r.status();
}

absl::Status ProcessCluster::RestartCoordinator() {
  if (coordinator_process_ != nullptr && !coordinator_killed_) {
    return absl::FailedPreconditionError("the coordinator still runs; KillCoordinator() first");
  }
  // The previous coordinator's stderr stays readable in the logs.
  if (coordinator_process_ != nullptr) {
    absl::StrAppend(&old_coordinator_logs_, "--- sluice-coordinator (killed) stderr:\n",
                    Tail(coordinator_process_->stderr_text()), "\n");
  }
  // The kernel may keep the old listening port briefly; retry a bounded number of times.
  absl::Status s;
  const absl::Time deadline = absl::Now() + options_.start_timeout;
  do {
    s = StartCoordinator(coordinator_port_);
    if (s.ok()) return s;
    coordinator_killed_ = true;  // the failed attempt exited (or is killed below)
    if (coordinator_process_ != nullptr) coordinator_process_->Wait(absl::Seconds(5)).IgnoreError();
    absl::SleepFor(absl::Milliseconds(200));
  } while (absl::Now() < deadline);
  return s;
}

absl::Status ProcessCluster::StopAll(absl::Duration timeout) {
  std::string failures;
  auto stop = [&](Subprocess& p, const std::string& name) {
    absl::Status s = p.Signal(SIGTERM);
    absl::StatusOr<SubprocessResult> r = p.Wait(timeout);
    if (!s.ok() || !r.ok() || r->exit_code != 0) {
      absl::StrAppend(&failures, name, ": ",
                      r.ok() ? r->Describe() : r.status().ToString(), "; stderr:\n",
                      Tail(p.stderr_text(), 1500), "\n");
    }
  };
  for (int i = 0; i < num_workers(); ++i) {
    if (state_[i] == WorkerState::kStopped) {
      workers_[i]->Signal(SIGCONT).IgnoreError();
      state_[i] = WorkerState::kRunning;
    }
    if (state_[i] == WorkerState::kRunning) {
      stop(*workers_[i], absl::StrCat("sluice-worker ", i));
      state_[i] = WorkerState::kGone;
    }
  }
  if (coordinator_process_ != nullptr && !coordinator_killed_) {
    stop(*coordinator_process_, "sluice-coordinator");
  }
  if (!failures.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("processes that did not exit 0 on SIGTERM:\n", failures));
  }
  return absl::OkStatus();
}

absl::Status ProcessCluster::CheckRunning() {
  std::string gone;
  auto check = [&](Subprocess& p, const std::string& name) {
    if (p.running()) return false;
    absl::StatusOr<SubprocessResult> r = p.Wait(absl::ZeroDuration());
    absl::StrAppend(&gone, name, " (pid ", p.pid(), ") exited: ",
                    r.ok() ? r->Describe() : r.status().ToString(), "; stderr:\n",
                    Tail(p.stderr_text(), 1500), "\n");
    return true;
  };
  for (int i = 0; i < num_workers(); ++i) {
    if (state_[i] != WorkerState::kGone &&
        check(*workers_[i], absl::StrCat("sluice-worker ", i, " (", worker_addresses_[i], ")"))) {
      state_[i] = WorkerState::kGone;
    }
  }
  if (coordinator_process_ != nullptr && !coordinator_killed_ &&
      check(*coordinator_process_, "sluice-coordinator")) {
    coordinator_killed_ = true;
  }
  if (gone.empty()) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat("server processes gone:\n", gone));
}

std::string ProcessCluster::CoordinatorLog() {
  return coordinator_process_ != nullptr ? coordinator_process_->stderr_text() : "";
}

std::string ProcessCluster::Logs() {
  std::string out = old_coordinator_logs_;
  if (coordinator_process_ != nullptr) {
    absl::StrAppend(&out, "--- sluice-coordinator stderr:\n",
                    Tail(coordinator_process_->stderr_text()), "\n");
  }
  for (int i = 0; i < num_workers(); ++i) {
    absl::StrAppend(&out, "--- sluice-worker ", i, " stderr:\n", Tail(workers_[i]->stderr_text()),
                    "\n");
  }
  return out;
}

absl::StatusOr<SubprocessResult> RunSluicectl(const std::vector<std::string>& args,
                                              absl::Duration timeout) {
  std::vector<std::string> argv = {BuildPath("bin/sluicectl")};
  argv.insert(argv.end(), args.begin(), args.end());
  SubprocessOptions options;
  options.timeout = timeout;
  return RunSubprocess(argv, options);
}

bool BinaryHasFlag(const std::string& binary, const std::string& flag) {
  static absl::Mutex mu(absl::kConstInit);
  static auto* cache = new std::map<std::pair<std::string, std::string>, bool>();
  absl::MutexLock lock(&mu);
  auto it = cache->find({binary, flag});
  if (it != cache->end()) return it->second;
  SubprocessOptions options;
  options.timeout = absl::Seconds(30);
  absl::StatusOr<SubprocessResult> r = RunSubprocess({BuildPath(binary), "--helpfull"}, options);
  const std::string needle = absl::StrCat("-", flag, " ");
  const bool has =
      r.ok() && (absl::StrContains(r->stdout_text, needle) ||
                 absl::StrContains(r->stderr_text, needle) ||
                 absl::StrContains(r->stdout_text, absl::StrCat("-", flag, ")")));
  cache->emplace(std::make_pair(binary, flag), has);
  return has;
}

absl::StatusOr<std::unique_ptr<Subprocess>> StartSluicectl(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {BuildPath("bin/sluicectl")};
  argv.insert(argv.end(), args.begin(), args.end());
  return Subprocess::Start(argv);
}

}  // namespace sluice
