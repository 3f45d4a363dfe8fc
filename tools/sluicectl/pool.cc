// sluicectl pool --coordinator=HOST:PORT: keeps as many local sluice-worker processes running
// as the coordinator's autoscaling decision wants (GetStatus.scaling.desired_workers,
// docs/AUTOSCALING.md), on this host. Scale-out starts workers; scale-in sends SIGTERM to the
// newest ones (--pool_drain_order), which drain through the worker's own path (they tell the coordinator, which
// moves their unfinished tasks at once, and end their streams so that consumers move): nothing
// is lost, nothing repeated in coordinated modes. A worker that has not exited
// --pool_drain_timeout after its SIGTERM is killed. A worker that exits by itself is replaced
// at the next poll. SIGTERM or SIGINT to the pool drains every worker, then exits 0.
//
// Slurm: one pool per allocation node, its workers bound to that node's address
// (deploy/slurm/README.md). Kubernetes does the same through the HorizontalPodAutoscaler
// (deploy/kubernetes/).
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdint>
#include <cstring>
#include <deque>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "core/rpc/coordinator_call.h"
#include "proto/coordinator.grpc.pb.h"
#include "tools/sluicectl/commands.h"
#include "tools/sluicectl/security.h"

extern char** environ;

ABSL_FLAG(std::string, worker_binary, "",
          "pool: the sluice-worker to start; empty: the one next to this sluicectl.");
ABSL_FLAG(std::vector<std::string>, worker_flag, {},
          "pool: extra flags for every worker, comma-separated (--worker_flag=--plugin=X,"
          "--buffer_bytes=1000000).");
ABSL_FLAG(int64_t, pool_max_workers, 16,
          "pool: the most workers this pool runs, whatever the coordinator wants (this host's "
          "share).");
ABSL_FLAG(absl::Duration, pool_interval, absl::Seconds(2),
          "pool: how often the pool asks the coordinator and reconciles.");
ABSL_FLAG(absl::Duration, pool_drain_timeout, absl::Seconds(60),
          "pool: a worker sent SIGTERM is killed if it has not exited this long after.");
ABSL_FLAG(std::string, pool_drain_order, "newest",
          "pool: which workers a scale-in drains first: newest (the default: the least warm "
          "caches) or oldest (rolls the pool over: every worker is eventually replaced).");
ABSL_FLAG(int64_t, pool_index, 0,
          "pool: this pool's index among --pool_count pools following one coordinator (one per "
          "node of a Slurm allocation): it runs its share of the desired workers.");
ABSL_FLAG(int64_t, pool_count, 1, "pool: how many pools share the coordinator's decision.");
ABSL_FLAG(absl::Duration, pool_duration, absl::ZeroDuration(),
          "pool: drain every worker and exit after this long; 0: until SIGTERM or SIGINT.");

namespace sluice {
namespace {

std::atomic<bool> g_pool_stop{false};
void OnPoolSignal(int) { g_pool_stop.store(true); }

// One worker process the pool started.
struct PoolWorker {
  pid_t pid = 0;
  int64_t serial = 0;  // start order: the newest drain first
  std::optional<absl::Time> terminated_at;  // SIGTERM sent (draining)
};

class LocalWorkerPool {
 public:
  LocalWorkerPool(std::string coordinator, std::string binary, std::vector<std::string> flags,
                  int64_t max_workers, absl::Duration drain_timeout, bool drain_newest)
      : coordinator_(std::move(coordinator)),
        binary_(std::move(binary)),
        flags_(std::move(flags)),
        max_workers_(max_workers),
        drain_timeout_(drain_timeout),
        drain_newest_(drain_newest) {}

  // Starts or drains workers so that `desired` (capped) run, not counting those draining.
  absl::Status Reconcile(int64_t desired) {
    ReapExited();
    desired = std::clamp<int64_t>(desired, 0, max_workers_);
    std::vector<PoolWorker*> serving;
    for (PoolWorker& w : workers_) {
      if (!w.terminated_at.has_value()) serving.push_back(&w);
    }
    const int64_t have = static_cast<int64_t>(serving.size());
    if (have < desired) {
      for (int64_t i = have; i < desired; ++i) {
        absl::Status s = Start();
        if (!s.ok()) return s;
      }
      Log(absl::StrCat("scaled out to ", desired, " worker(s) (coordinator wants ", desired, ")"));
    } else if (have > desired) {
      std::sort(serving.begin(), serving.end(), [&](const PoolWorker* a, const PoolWorker* b) {
        return drain_newest_ ? a->serial > b->serial : a->serial < b->serial;
      });
      for (int64_t i = 0; i < have - desired; ++i) {
        kill(serving[i]->pid, SIGTERM);  // the worker's drain (worker_main.cc)
        serving[i]->terminated_at = absl::Now();
        Log(absl::StrCat("draining worker pid ", serving[i]->pid));
      }
      Log(absl::StrCat("scaling in to ", desired, " worker(s)"));
    }
    // A drain that takes too long is cut short.
    for (PoolWorker& w : workers_) {
      if (w.terminated_at.has_value() && absl::Now() - *w.terminated_at > drain_timeout_) {
        kill(w.pid, SIGKILL);
      }
    }
    return absl::OkStatus();
  }

  // SIGTERM to every worker, then waits for each up to the drain timeout (then SIGKILL).
  void DrainAll() {
    for (PoolWorker& w : workers_) {
      if (!w.terminated_at.has_value()) {
        kill(w.pid, SIGTERM);
        w.terminated_at = absl::Now();
      }
    }
    const absl::Time deadline = absl::Now() + drain_timeout_;
    while (!workers_.empty() && absl::Now() < deadline) {
      ReapExited();
      absl::SleepFor(absl::Milliseconds(20));
    }
    for (PoolWorker& w : workers_) kill(w.pid, SIGKILL);
    for (PoolWorker& w : workers_) waitpid(w.pid, nullptr, 0);
    workers_.clear();
  }

  int64_t serving() const {
    int64_t n = 0;
    for (const PoolWorker& w : workers_) n += w.terminated_at.has_value() ? 0 : 1;
    return n;
  }

 private:
  absl::Status Start() {
    std::vector<std::string> args = {binary_, "--coordinator=" + coordinator_, "--port=0"};
    args.insert(args.end(), flags_.begin(), flags_.end());
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    pid_t pid = 0;
    const int rc = posix_spawn(&pid, binary_.c_str(), nullptr, nullptr, argv.data(), environ);
    if (rc != 0) {
      return absl::InternalError(
          absl::StrCat("pool: cannot start '", binary_, "': ", std::strerror(rc)));
    }
    PoolWorker w;
    w.pid = pid;
    w.serial = ++serial_;
    workers_.push_back(w);
    Log(absl::StrCat("started worker pid ", pid));
    return absl::OkStatus();
  }

  void ReapExited() {
    for (auto it = workers_.begin(); it != workers_.end();) {
      int status = 0;
      if (waitpid(it->pid, &status, WNOHANG) == it->pid) {
        Log(absl::StrCat("worker pid ", it->pid, " exited",
                         WIFEXITED(status) ? absl::StrCat(" with code ", WEXITSTATUS(status))
                                           : absl::StrCat(" on signal ", WTERMSIG(status)),
                         !it->terminated_at.has_value() ? ""
                         : WIFEXITED(status) && WEXITSTATUS(status) == 0
                             ? " (drained)"
                             : " (its drain failed)"));
        it = workers_.erase(it);
      } else {
        ++it;
      }
    }
  }

  static void Log(const std::string& line) {
    std::cerr << "sluicectl pool: " << line << std::endl;
  }

  const std::string coordinator_;
  const std::string binary_;
  const std::vector<std::string> flags_;
  const int64_t max_workers_;
  const absl::Duration drain_timeout_;
  const bool drain_newest_;
  std::deque<PoolWorker> workers_;
  int64_t serial_ = 0;
};

std::string DefaultWorkerBinary() {
  char self[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n <= 0) return "sluice-worker";
  std::string path(self, static_cast<size_t>(n));
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? "sluice-worker" : path.substr(0, slash + 1) + "sluice-worker";
}

// The coordinator's desired_workers (one GetStatus page of one entry: the decision is on
// every page).
absl::StatusOr<int64_t> DesiredWorkers(const std::string& coordinator,
                                       proto::CoordinatorService::Stub* stub) {
  proto::GetStatusRequest request;
  request.set_page_size(1);
  proto::GetStatusResponse response;
  absl::Status s = CallCoordinator(coordinator, kRpcDeadline, absl::GetFlag(FLAGS_retry_deadline),
                                   "GetStatus", [&](grpc::ClientContext* c) {
                                     return stub->GetStatus(c, request, &response);
                                   });
  if (!s.ok()) return s;
  return response.scaling().desired_workers();
}

// Pool `index` of `count`'s share of `desired` workers: the first desired % count pools run one
// more than the others.
int64_t PoolShare(int64_t desired, int64_t index, int64_t count) {
  return desired / count + (index < desired % count ? 1 : 0);
}

int PoolMain(const std::vector<std::string>& positional) {
  if (!positional.empty()) {
    return ReportUsageError("pool", absl::StrCat("unexpected argument '", positional[0], "'"));
  }
  const std::string coordinator = absl::GetFlag(FLAGS_coordinator);
  if (coordinator.empty()) return ReportUsageError("pool", "--coordinator is required");
  const int64_t max_workers = absl::GetFlag(FLAGS_pool_max_workers);
  const absl::Duration interval = absl::GetFlag(FLAGS_pool_interval);
  const absl::Duration drain_timeout = absl::GetFlag(FLAGS_pool_drain_timeout);
  const absl::Duration duration = absl::GetFlag(FLAGS_pool_duration);
  if (max_workers < 0 || interval <= absl::ZeroDuration() ||
      drain_timeout <= absl::ZeroDuration() || duration < absl::ZeroDuration()) {
    return ReportUsageError("pool", "--pool_max_workers must be >= 0, --pool_interval and "
                                    "--pool_drain_timeout positive, --pool_duration >= 0");
  }
  const int64_t pool_index = absl::GetFlag(FLAGS_pool_index);
  const int64_t pool_count = absl::GetFlag(FLAGS_pool_count);
  if (pool_count < 1 || pool_index < 0 || pool_index >= pool_count) {
    return ReportUsageError("pool", "need --pool_count >= 1 and 0 <= --pool_index < --pool_count");
  }
  const std::string order = absl::GetFlag(FLAGS_pool_drain_order);
  if (order != "newest" && order != "oldest") {
    return ReportUsageError("pool", absl::StrCat("--pool_drain_order must be newest or oldest, "
                                                 "got '", order, "'"));
  }
  std::string binary = absl::GetFlag(FLAGS_worker_binary);
  if (binary.empty()) binary = DefaultWorkerBinary();
  if (access(binary.c_str(), X_OK) != 0) {
    return ReportUsageError("pool", absl::StrCat("--worker_binary '", binary,
                                                 "' is not an executable file"));
  }
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel = SluicectlChannel(coordinator);
  if (!channel.ok()) return ReportError(channel.status());
  auto stub = proto::CoordinatorService::NewStub(*channel);

  struct sigaction action {};
  action.sa_handler = &OnPoolSignal;
  sigaction(SIGTERM, &action, nullptr);
  sigaction(SIGINT, &action, nullptr);

  LocalWorkerPool pool(coordinator, binary, absl::GetFlag(FLAGS_worker_flag), max_workers,
                       drain_timeout, order == "newest");
  const absl::Time start = absl::Now();
  absl::Status status;
  while (!g_pool_stop.load() && (duration == absl::ZeroDuration() || absl::Now() - start < duration)) {
    absl::StatusOr<int64_t> desired = DesiredWorkers(coordinator, stub.get());
    if (desired.ok()) {
      status = pool.Reconcile(PoolShare(*desired, pool_index, pool_count));
      if (!status.ok()) break;
    } else {
      // The coordinator is away (restarting): keep the pool as it is and ask again.
      std::cerr << "sluicectl pool: " << desired.status() << std::endl;
    }
    // Sleep in small steps so that a signal is seen promptly.
    const absl::Time next = absl::Now() + interval;
    while (!g_pool_stop.load() && absl::Now() < next) absl::SleepFor(absl::Milliseconds(20));
  }
  std::cerr << "sluicectl pool: stopping: draining " << pool.serving() << " worker(s)"
            << std::endl;
  pool.DrainAll();
  return status.ok() ? kExitOk : ReportError(status);
}

}  // namespace

SLUICECTL_REGISTER_COMMAND({
    .name = "pool",
    .synopsis = "pool --coordinator=HOST:PORT [--worker_flag=F1,F2] [--pool_max_workers=N] "
                "[--pool_interval=2s] [--pool_drain_timeout=60s] [--pool_drain_order=newest|"
                "oldest] [--pool_index=I --pool_count=N] [--pool_duration=D] [--worker_binary=PATH]",
    .help = "Runs local sluice-worker processes following the coordinator's autoscaling\n"
            "decision (desired workers, docs/AUTOSCALING.md): starts workers to scale out,\n"
            "drains the newest (SIGTERM: their tasks move, nothing lost) to scale in.\n"
            "SIGTERM or SIGINT drains every worker and exits.",
    .flags = {"coordinator", "worker_binary", "worker_flag", "pool_max_workers", "pool_interval",
              "pool_drain_timeout", "pool_drain_order", "pool_index", "pool_count", "pool_duration",
              "retry_deadline"},
    .run = &PoolMain,
});

}  // namespace sluice
