// ProcessCluster: a Sluice cluster of real processes on loopback for multi-process tests: one
// $SLUICE_BUILD_DIR/bin/sluice-coordinator and N sluice-worker processes, each started with
// --port=0 and a --port_file in a fresh temporary directory.
//
//   ASSERT_OK_AND_ASSIGN-style:
//   auto cluster = ProcessCluster::Start({.num_workers = 3});   // waits: every worker registered
//   RunSluicectl({"run", "--coordinator=" + (*cluster)->coordinator(), ...});
//   (*cluster)->KillWorker(1);                                  // SIGKILL, as a crash
//   EXPECT_TRUE((*cluster)->StopAll().ok());                    // SIGTERM; every exit must be 0
//
// Faults for the fault tests (tests/integration/fault_test.cc): AddWorker() (scale-out
// mid-run), StopWorker/ContinueWorker (SIGSTOP/SIGCONT: a hung worker), TerminateWorker
// (SIGTERM: a drain, which must exit 0), KillCoordinator + RestartCoordinator (SIGKILL, then a
// new coordinator on the same port with the same flags and --work_dir, so that it replays its
// journal). Flags that not every build has (--work_dir, --ranges_per_worker, ...) go through
// coordinator_flags / worker_flags; BinaryHasFlag() tells whether a binary knows a flag.
//
// Every wait is bounded (ProcessClusterOptions::start_timeout, the timeouts passed in). The
// destructor SIGKILLs and reaps whatever still runs (Subprocess's destructor) and removes the
// temporary directory, so a failed test leaves no process behind.
//
// Thread safety: not thread-safe; one test thread drives it.
#ifndef SLUICE_TESTS_INTEGRATION_PROCESS_CLUSTER_H_
#define SLUICE_TESTS_INTEGRATION_PROCESS_CLUSTER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "proto/coordinator.pb.h"
#include "tests/examples/subprocess.h"

namespace sluice {

struct ProcessClusterOptions {
  int num_workers = 3;
  // The coordinator's --worker_timeout. Fault tests shorten it so that a killed worker's tasks
  // move quickly; others keep it long, so that a loaded machine never makes a live worker look
  // dead.
  absl::Duration worker_timeout = absl::Seconds(10);
  // The workers' --heartbeat_interval.
  absl::Duration heartbeat_interval = absl::Milliseconds(100);
  // The workers' --buffer_bytes (per task).
  int64_t worker_buffer_bytes = int64_t{64} << 20;
  // Bound on each start-up wait (a port file, every worker registered).
  absl::Duration start_timeout = absl::Seconds(30);
  // Give the coordinator --work_dir=<temp_dir>/coordinator-work (its journal), kept across
  // RestartCoordinator(). Needs a coordinator that has the flag (BinaryHasFlag).
  bool work_dir = false;
  // Extra flags, passed as they are: "--finished_job_ttl=2s", "--ranges_per_worker=2", ...
  std::vector<std::string> coordinator_flags = {};
  std::vector<std::string> worker_flags = {};
};

class ProcessCluster {
 public:
  // Starts the coordinator, then the workers, and waits until the coordinator lists every
  // worker alive (a job made afterwards gets one task per worker). Errors name the process that
  // did not come up and quote its stderr.
  static absl::StatusOr<std::unique_ptr<ProcessCluster>> Start(ProcessClusterOptions options);

  ~ProcessCluster();
  ProcessCluster(const ProcessCluster&) = delete;
  ProcessCluster& operator=(const ProcessCluster&) = delete;

  // "127.0.0.1:PORT" of the coordinator.
  const std::string& coordinator() const { return coordinator_; }
  // "127.0.0.1:PORT" of worker i.
  const std::string& worker_address(int i) const { return worker_addresses_[i]; }
  int num_workers() const { return static_cast<int>(workers_.size()); }
  // The process id of worker i (its current process; inspect /proc/<pid> while it runs).
  pid_t worker_pid(int i) const { return workers_[i]->pid(); }
  // A directory for the test's own files; removed with the cluster.
  const std::string& temp_dir() const { return dir_; }

  // The coordinator's GetStatus (one RPC, 10 s deadline).
  absl::StatusOr<proto::GetStatusResponse> Status() const;

  // SIGKILL to worker i (as if it crashed), reaped.
  absl::Status KillWorker(int i);

  // SIGKILL to worker i (if it still runs), then a new sluice-worker process on the same port
  // (a restart at the same address: a new process incarnation), waited for until the
  // coordinator has seen a heartbeat sent after the kill (the new process's: the old
  // registration stays alive until the worker timeout).
  absl::Status RestartWorker(int i);

  // Starts one more worker (same flags as the others) and waits until the coordinator lists it
  // alive. Returns its index.
  absl::StatusOr<int> AddWorker();

  // SIGSTOP / SIGCONT to worker i: a hung worker (its sockets stay open, it answers nothing),
  // then the same worker back. StopAll() and the destructor continue a stopped worker first.
  absl::Status StopWorker(int i);
  absl::Status ContinueWorker(int i);

  // SIGTERM to worker i (a drain), then `after_signal` (if any: e.g. continue paused
  // consumers), then waits up to `timeout` for it to exit; FAILED_PRECONDITION (with its
  // stderr) unless it exits 0.
  absl::Status TerminateWorker(int i, absl::Duration timeout = absl::Seconds(30),
                               const std::function<void()>& after_signal = nullptr);

  // SIGKILL to the coordinator (as if it crashed), reaped.
  absl::Status KillCoordinator();
  // Starts a new coordinator on the same port with the same flags (and --work_dir) and waits
  // for its port file. FAILED_PRECONDITION while the old one still runs.
  absl::Status RestartCoordinator();
  // The coordinator's --work_dir ("" without ProcessClusterOptions::work_dir).
  const std::string& work_dir() const { return work_dir_; }

  // Whether worker i is running and not stopped, killed or terminated by the test.
  bool worker_running(int i) const { return state_[i] == WorkerState::kRunning; }
  // The running workers whose process has exited by itself since (a pipeline killed it),
  // by index; they are then no longer running (StopAll leaves them alone).
  std::vector<int> ReapExitedWorkers();

  // OK while the coordinator and every worker the test has not killed or terminated still run
  // (a crash is not a test's doing); else FAILED_PRECONDITION naming each process that exited,
  // how (exit code or signal) and its stderr's tail. A process found gone is reaped and
  // counted gone from then on.
  absl::Status CheckRunning();

  // SIGTERM to every process still running, workers first, each waited for up to `timeout`.
  // FAILED_PRECONDITION naming every process that did not exit 0 (with its stderr's tail).
  absl::Status StopAll(absl::Duration timeout = absl::Seconds(30));

  // Every process's stderr, for failure messages.
  std::string Logs();
  // The running coordinator's whole stderr (Logs() keeps only each process's tail).
  std::string CoordinatorLog();

 private:
  enum class WorkerState { kRunning, kStopped, kGone };

  ProcessCluster() = default;
  absl::Status StartCoordinator(int port);
  // Worker `index` (-1: a new one) on `port` (0: any free port).
  absl::StatusOr<int> StartWorker(int index = -1, int port = 0);
  absl::Status WaitForWorkersAlive(const std::vector<std::string>& addresses);

  ProcessClusterOptions options_;
  std::string dir_;
  std::string work_dir_;
  std::string old_coordinator_logs_;
  std::string coordinator_;
  int coordinator_port_ = 0;
  int coordinator_starts_ = 0;
  bool coordinator_killed_ = false;
  std::unique_ptr<Subprocess> coordinator_process_;
  std::vector<std::unique_ptr<Subprocess>> workers_;
  std::vector<std::string> worker_addresses_;
  std::vector<WorkerState> state_;
};

// Whether `binary` (a path under $SLUICE_BUILD_DIR, e.g. "bin/sluice-coordinator") accepts
// --`flag`: its --helpfull lists it. Cached per (binary, flag).
bool BinaryHasFlag(const std::string& binary, const std::string& flag);

// Runs `sluicectl ARGS...` ($SLUICE_BUILD_DIR/bin/sluicectl) to completion, bounded by
// `timeout`.
absl::StatusOr<SubprocessResult> RunSluicectl(const std::vector<std::string>& args,
                                              absl::Duration timeout = absl::Seconds(90));

// Starts `sluicectl ARGS...` without waiting (consumers that run side by side).
absl::StatusOr<std::unique_ptr<Subprocess>> StartSluicectl(const std::vector<std::string>& args);

}  // namespace sluice

#endif  // SLUICE_TESTS_INTEGRATION_PROCESS_CLUSTER_H_
