// sluice-coordinator: runs the coordinator service until SIGTERM or SIGINT.
//
//   sluice-coordinator --port=0 --port_file=/tmp/coord.port [--worker_timeout=10s]
//                      [--host=127.0.0.1] [--shutdown_deadline=5s]
//                      [--tls_cert=PEM --tls_key=PEM [--tls_ca=PEM --tls_client_auth]]
//                      [--token_file=PATH] [--worker_token_file=PATH]
//                      [--trainer_token_file=PATH] [--admin_token_file=PATH]
//                      [--data_root=DIR|URL[,...]] [--max_request_bytes=N]
//                      [--work_dir=/var/lib/sluice/coordinator] [--snapshot_every=1000]
//                      [--ranges_per_worker=2] [--finished_job_ttl=5m] [--dead_worker_ttl=10m]
//                      [--max_task_worker_deaths=3] [--task_death_window=60s]
//                      [--plugin=PATH[,PATH...]]
//                      [--idle_job_ttl=10m] [--unused_dataset_ttl=10m]
//                      [--max_jobs_per_identity=1000] [--max_datasets_per_identity=1000]
//                      [--max_dataset_bytes_per_identity=268435456]
//                      [--max_status_per_second=100] [--max_creates_per_second=200]
//                      [--status_page_size=100]
//
// Bounded state and admission (docs/SERVICE.md, "Bounded state", "Admission"): abandoned jobs
// and unused datasets are collected after their TTLs; a caller identity (the peer's host) over
// a quota or a rate limit gets RESOURCE_EXHAUSTED naming the flag; 0 turns a limit off.
//
// --plugin loads custom-op plugins, so that pipelines naming their ops (map(plugin('op')))
// can be registered and planned here; the workers that run them need the same libraries.
// Once serving, writes the bound port (decimal, newline) to --port_file atomically (a temporary
// file renamed into place), so a launcher polling the file never reads a partial port. Logs one
// line per significant event to stderr. A signal shuts down gracefully and exits 0.
//
// With --work_dir, every state change is journaled there before it is answered and a restart
// with the same --work_dir continues where the last one stopped (docs/SERVICE.md, "Journal and
// restart"); a corrupt journal makes it exit 1 at start-up naming the file and byte offset.
//
// Test only: the environment variable SLUICE_TEST_JOURNAL_FAULTS (a spec as
// FaultInjectingJournalFileSystem::SetRandomFaults takes, e.g. "seed=7,append=0.001,sync=0.001")
// injects random failures into the journal's file operations (bench/control_plane_soak.py).
// A failed sync is fatal (the coordinator exits and is meant to be restarted); a failed append
// fails its request. Logged at start when set.
#include <pthread.h>
#include <signal.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "core/data/data_roots.h"
#include "core/data/plugin_loader.h"
#include "core/rpc/grpc_security.h"
#include "core/rpc/role_auth.h"
#include "core/rpc/token_auth.h"
#include "server/fault_injecting_journal_file.h"
#include "server/journal_file.h"
#include "core/util/logging.h"
#include "core/util/mutex_deadlock_detection.h"
#include "core/obs/metrics_http_server.h"
#include "server/coordinator_metrics.h"
#include "server/grpc_coordinator_service.h"
#include "server/request_admission.h"

ABSL_FLAG(int, port, 0, "Port to listen on; 0 picks a free one (see --port_file).");
ABSL_FLAG(std::string, host, "127.0.0.1", "Interface to listen on; 0.0.0.0 for all.");
ABSL_FLAG(std::string, port_file, "",
          "If set, the bound port is written here (atomically) once the server is serving.");
ABSL_FLAG(absl::Duration, worker_timeout, absl::Seconds(10),
          "A worker silent this long is declared dead and its tasks reassigned.");
ABSL_FLAG(std::string, work_dir, "",
          "Directory of the coordinator's journal and snapshots; a restart with the same "
          "directory resumes every dataset, job and task. Empty: state in memory only.");
ABSL_FLAG(int64_t, snapshot_every, 1000,
          "With --work_dir: journal records between snapshots of the whole state.");
ABSL_FLAG(int64_t, ranges_per_worker, 2,
          "SHARDING_RANGES: unfinished ranges of one job a worker holds at most (>= 1).");
ABSL_FLAG(absl::Duration, finished_job_ttl, absl::Minutes(5),
          "A finished job is removed this long after it finished (then NOT_FOUND).");
ABSL_FLAG(absl::Duration, dead_worker_ttl, absl::Minutes(10),
          "A worker dead this long that no task names any more is forgotten (its address "
          "registers anew as a new worker).");
ABSL_FLAG(int64_t, max_task_worker_deaths, 3,
          "A task is quarantined (its job fails with FAILED_PRECONDITION naming it) when this "
          "many distinct workers died within --task_death_window of being handed it, none "
          "having produced a step of it, with no step of it produced in between. Workers that "
          "die while making progress (preemption) and drained workers never count. 0: never.");
ABSL_FLAG(absl::Duration, task_death_window, absl::Seconds(60),
          "See --max_task_worker_deaths: a worker last heard from later than this after it was "
          "handed a task is no evidence against the task.");
ABSL_FLAG(std::string, plugin, "",
          "Comma-separated custom-op plugin libraries to load, so that pipelines using their "
          "ops can be registered (the workers need them too).");
ABSL_FLAG(absl::Duration, consumer_timeout, absl::Seconds(60),
          "A consumer of a coordinated job silent this long is declared gone: workers stop "
          "holding steps for it (the other consumers go on). A job that consumers have read "
          "and that none asked about for this long has no consumer left: it ends and its "
          "workers free its steps (a consumer that exits cleanly releases its job at once "
          "instead). 0: never (idle_job_ttl still applies).");
ABSL_FLAG(absl::Duration, idle_job_ttl, absl::Minutes(10),
          "An unfinished job no consumer asked about for this long is failed as abandoned "
          "(any kind of job); 0: never.");
ABSL_FLAG(absl::Duration, unused_dataset_ttl, absl::Minutes(10),
          "A dataset no job names for this long is removed; 0: never.");
ABSL_FLAG(int64_t, max_jobs_per_identity, 1000,
          "Unfinished jobs one caller identity may have created; 0: no limit.");
ABSL_FLAG(int64_t, max_datasets_per_identity, 1000,
          "Datasets one caller identity may have registered; 0: no limit.");
ABSL_FLAG(int64_t, max_dataset_bytes_per_identity, int64_t{256} << 20,
          "Bytes of serialized dataset graphs one caller identity may have registered; 0: no "
          "limit.");
ABSL_FLAG(double, max_status_per_second, 100,
          "GetStatus calls per second of one caller identity (bursts of twice as many); 0: no "
          "limit.");
ABSL_FLAG(double, max_creates_per_second, 200,
          "RegisterDataset and GetOrCreateJob calls per second of one caller identity (bursts "
          "of twice as many); 0: no limit.");
ABSL_FLAG(int64_t, status_page_size, 100,
          "GetStatus entries (workers, jobs) per page when the caller does not say.");
ABSL_FLAG(absl::Duration, shutdown_deadline, absl::Seconds(5),
          "On SIGTERM/SIGINT, how long calls in flight get to finish.");
ABSL_FLAG(std::string, tls_cert, "",
          "PEM certificate chain this server presents; with --tls_key turns TLS on.");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of --tls_cert.");
ABSL_FLAG(std::string, tls_ca, "",
          "PEM CA certificates that peers' certificates must chain to (client certificates with "
          "--tls_client_auth).");
ABSL_FLAG(bool, tls_client_auth, false,
          "Mutual TLS: require a client certificate signed by --tls_ca on every connection.");
ABSL_FLAG(std::string, token_file, "",
          "File holding the shared token every RPC must carry (authorization: Bearer); the "
          "token is never given on the command line and grants every role. Empty: no token.");
ABSL_FLAG(std::string, worker_token_file, "",
          "File holding the token that grants the worker role (WorkerHeartbeat, GetSplit): give "
          "it to sluice-worker --worker_token_file. Empty: none.");
ABSL_FLAG(std::string, trainer_token_file, "",
          "File holding the token that grants the trainer role (RegisterDataset, "
          "GetOrCreateJob, GetElementSpec, ClientHeartbeat): give it to consumers "
          "(ServiceSecurity.token) and to sluice-worker --trainer_token_file. Empty: none.");
ABSL_FLAG(std::string, admin_token_file, "",
          "File holding the token that grants the admin role (GetStatus, RegisterDataset): "
          "give it to sluicectl --token_file. Empty: none.");
ABSL_FLAG(std::vector<std::string>, data_root, {},
          "Comma-separated folders and URL prefixes (s3://bucket/prefix, "
          "http://HOST:PORT/path) the coordinator may read data from; a pipeline naming a file "
          "elsewhere is PERMISSION_DENIED, and local opens stay beneath the folders at open "
          "time. Remote reads reach only public addresses unless an http(s) root names the "
          "endpoint (loopback, link-local such as the cloud metadata service, private "
          "networks). Empty: any local file, public addresses only.");
ABSL_FLAG(int, max_request_bytes, 64 << 20, "Largest request message accepted, in bytes.");
ABSL_FLAG(int, metrics_port, -1,
          "Serve Prometheus metrics over HTTP at /metrics on --host and this port; 0 picks a "
          "free one (see --metrics_port_file); -1: off.");
ABSL_FLAG(std::string, metrics_port_file, "",
          "If set, the bound metrics port is written here (atomically) before --port_file.");
ABSL_FLAG(int64_t, min_workers, 1,
          "Autoscaling (docs/AUTOSCALING.md): the fewest workers the coordinator ever wants.");
ABSL_FLAG(int64_t, max_workers, 64,
          "Autoscaling: the most workers the coordinator ever wants (sluice_coordinator_"
          "desired_workers, GetStatus.scaling never exceed it).");
ABSL_FLAG(absl::Duration, scaling_interval, absl::Seconds(10),
          "Autoscaling: how often the desired number of workers is decided, each time from the "
          "heartbeats' load reports since the previous decision.");
ABSL_FLAG(absl::Duration, scale_in_cooldown, absl::Minutes(2),
          "Autoscaling: no shrink sooner than this after the last change of a job's (or the "
          "total's) desired workers.");
ABSL_FLAG(double, target_wait_fraction, 0.02,
          "Autoscaling: grow while trainers wait for input at least this fraction of their "
          "time.");
ABSL_FLAG(double, shrink_wait_fraction, 0.005,
          "Autoscaling: shrink only while trainers wait less than this fraction (at most "
          "--target_wait_fraction; in between the pool holds).");
ABSL_FLAG(std::string, log_level, "info", "Least level logged: debug, info, warning or error.");
ABSL_FLAG(std::string, log_format, "text", "Log lines as text or json (one object a line).");

namespace {

bool WritePortFile(const std::string& path, int port) {
  const std::string tmp = absl::StrCat(path, ".tmp.", getpid());
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << port << "\n";
    out.flush();
    if (!out) return false;
  }
  return std::rename(tmp.c_str(), path.c_str()) == 0;
}

// The per-role token files of the flags, read into `tokens` (empty flags stay empty).
absl::Status ReadRoleTokens(sluice::RoleTokens* tokens) {
  const std::pair<std::string, std::string*> files[] = {
      {absl::GetFlag(FLAGS_worker_token_file), &tokens->worker},
      {absl::GetFlag(FLAGS_trainer_token_file), &tokens->trainer},
      {absl::GetFlag(FLAGS_admin_token_file), &tokens->admin},
  };
  for (const auto& [path, token] : files) {
    if (path.empty()) continue;
    absl::StatusOr<std::string> read = sluice::ReadTokenFile(path);
    if (!read.ok()) return read.status();
    *token = *std::move(read);
  }
  return absl::OkStatus();
}


}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  sluice::SkipMutexDeadlockDetection();  // core/util/mutex_deadlock_detection.h says why
  if (absl::Status s = sluice::ConfigureLoggingFromFlags(absl::GetFlag(FLAGS_log_level),
                                                         absl::GetFlag(FLAGS_log_format));
      !s.ok()) {
    std::cerr << "sluice-coordinator: " << s.message() << std::endl;
    return 2;
  }

  // Block the signals in every thread (gRPC's included, which inherit this mask) and take them
  // synchronously below.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  sluice::CoordinatorServerOptions options;
  options.host = absl::GetFlag(FLAGS_host);
  options.port = absl::GetFlag(FLAGS_port);
  options.coordinator.log = sluice::LogLineSink("coordinator");
  options.coordinator.worker_timeout = absl::GetFlag(FLAGS_worker_timeout);
  if (options.coordinator.worker_timeout <= absl::ZeroDuration()) {
    std::cerr << "sluice-coordinator: --worker_timeout must be positive" << std::endl;
    return 2;
  }
  options.coordinator.work_dir = absl::GetFlag(FLAGS_work_dir);
  options.coordinator.snapshot_every = absl::GetFlag(FLAGS_snapshot_every);
  if (const char* faults = std::getenv("SLUICE_TEST_JOURNAL_FAULTS");
      faults != nullptr && *faults != '\0') {
    // Lives as long as the process (the coordinator borrows it).
    auto* fs = new sluice::FaultInjectingJournalFileSystem(sluice::RealJournalFileSystem());
    if (absl::Status s = fs->SetRandomFaults(faults); !s.ok()) {
      std::cerr << "sluice-coordinator: SLUICE_TEST_JOURNAL_FAULTS: " << s.message() << std::endl;
      return 2;
    }
    std::cerr << "sluice-coordinator: TEST ONLY: injecting journal faults (" << faults << ")"
              << std::endl;
    options.coordinator.journal_fs = fs;
  }
  if (options.coordinator.snapshot_every < 1) {
    std::cerr << "sluice-coordinator: --snapshot_every must be at least 1" << std::endl;
    return 2;
  }
  options.coordinator.ranges_per_worker = absl::GetFlag(FLAGS_ranges_per_worker);
  if (options.coordinator.ranges_per_worker < 1) {
    std::cerr << "sluice-coordinator: --ranges_per_worker must be at least 1" << std::endl;
    return 2;
  }
  options.coordinator.max_task_worker_deaths = absl::GetFlag(FLAGS_max_task_worker_deaths);
  if (options.coordinator.max_task_worker_deaths < 0) {
    std::cerr << "sluice-coordinator: --max_task_worker_deaths must not be negative" << std::endl;
    return 2;
  }
  options.coordinator.task_death_window = absl::GetFlag(FLAGS_task_death_window);
  if (options.coordinator.task_death_window < absl::ZeroDuration()) {
    std::cerr << "sluice-coordinator: --task_death_window must not be negative" << std::endl;
    return 2;
  }
  if (const std::string plugins = absl::GetFlag(FLAGS_plugin); !plugins.empty()) {
    std::vector<std::string> paths = absl::StrSplit(plugins, ',', absl::SkipEmpty());
    if (absl::Status loaded = sluice::LoadPlugins(paths); !loaded.ok()) {
      std::cerr << "sluice-coordinator: " << loaded << std::endl;
      return 1;
    }
  }
  options.coordinator.consumer_timeout = absl::GetFlag(FLAGS_consumer_timeout);
  options.coordinator.finished_job_ttl = absl::GetFlag(FLAGS_finished_job_ttl);
  if (options.coordinator.finished_job_ttl < absl::ZeroDuration()) {
    std::cerr << "sluice-coordinator: --finished_job_ttl must not be negative" << std::endl;
    return 2;
  }
  options.coordinator.dead_worker_ttl = absl::GetFlag(FLAGS_dead_worker_ttl);
  if (options.coordinator.dead_worker_ttl < absl::ZeroDuration()) {
    std::cerr << "sluice-coordinator: --dead_worker_ttl must not be negative" << std::endl;
    return 2;
  }
  options.coordinator.idle_job_ttl = absl::GetFlag(FLAGS_idle_job_ttl);
  options.coordinator.unused_dataset_ttl = absl::GetFlag(FLAGS_unused_dataset_ttl);
  options.coordinator.max_jobs_per_identity = absl::GetFlag(FLAGS_max_jobs_per_identity);
  options.coordinator.max_datasets_per_identity = absl::GetFlag(FLAGS_max_datasets_per_identity);
  options.coordinator.max_dataset_bytes_per_identity =
      absl::GetFlag(FLAGS_max_dataset_bytes_per_identity);
  options.coordinator.status_page_size = absl::GetFlag(FLAGS_status_page_size);
  options.coordinator.scaling.min_workers = absl::GetFlag(FLAGS_min_workers);
  options.coordinator.scaling.max_workers = absl::GetFlag(FLAGS_max_workers);
  options.coordinator.scaling.scale_in_cooldown = absl::GetFlag(FLAGS_scale_in_cooldown);
  options.coordinator.scaling.target_wait_fraction = absl::GetFlag(FLAGS_target_wait_fraction);
  options.coordinator.scaling.shrink_wait_fraction = absl::GetFlag(FLAGS_shrink_wait_fraction);
  options.coordinator.scaling_interval = absl::GetFlag(FLAGS_scaling_interval);
  {
    const sluice::ScalingPolicyOptions& p = options.coordinator.scaling;
    if (p.min_workers < 0 || p.max_workers < std::max<int64_t>(p.min_workers, 1) ||
        options.coordinator.scaling_interval <= absl::ZeroDuration() ||
        p.scale_in_cooldown < absl::ZeroDuration() || !(p.target_wait_fraction > 0) ||
        !(p.target_wait_fraction < 1) || !(p.shrink_wait_fraction >= 0) ||
        p.shrink_wait_fraction > p.target_wait_fraction) {
      std::cerr << "sluice-coordinator: autoscaling flags: need 0 <= --min_workers <= "
                   "--max_workers (>= 1), --scaling_interval > 0, --scale_in_cooldown >= 0 and "
                   "0 <= --shrink_wait_fraction <= --target_wait_fraction < 1 (target > 0)"
                << std::endl;
      return 2;
    }
  }
  options.admission_rates.status_per_second = absl::GetFlag(FLAGS_max_status_per_second);
  options.admission_rates.status_burst = 2 * options.admission_rates.status_per_second;
  options.admission_rates.creates_per_second = absl::GetFlag(FLAGS_max_creates_per_second);
  options.admission_rates.creates_burst = 2 * options.admission_rates.creates_per_second;
  if (options.coordinator.max_jobs_per_identity < 0 ||
      options.coordinator.max_datasets_per_identity < 0 ||
      options.coordinator.max_dataset_bytes_per_identity < 0 ||
      options.admission_rates.status_per_second < 0 ||
      options.admission_rates.creates_per_second < 0 || options.coordinator.status_page_size < 1) {
    std::cerr << "sluice-coordinator: the --max_*_per_identity and --max_*_per_second flags must "
                 "not be negative, --status_page_size must be at least 1"
              << std::endl;
    return 2;
  }
  {
    // Security (docs/SERVICE.md, "Security"): files are read and checked here, before serving.
    absl::StatusOr<sluice::ServerSecurity> security = sluice::ServerSecurityFromFlags(
        absl::GetFlag(FLAGS_tls_cert), absl::GetFlag(FLAGS_tls_key), absl::GetFlag(FLAGS_tls_ca),
        absl::GetFlag(FLAGS_tls_client_auth), absl::GetFlag(FLAGS_token_file),
        absl::GetFlag(FLAGS_max_request_bytes));
    absl::StatusOr<sluice::DataRoots> roots =
        sluice::DataRoots::Create(absl::GetFlag(FLAGS_data_root));
    if (!security.ok() || !roots.ok()) {
      std::cerr << "sluice-coordinator: " << (security.ok() ? roots.status() : security.status())
                << std::endl;
      return 2;
    }
    options.security = *security;
    if (absl::Status s = ReadRoleTokens(&options.role_tokens); !s.ok()) {
      std::cerr << "sluice-coordinator: " << s << std::endl;
      return 2;
    }
    if (absl::Status s = sluice::InstallProcessDataRoots(*roots); !s.ok()) {
      std::cerr << "sluice-coordinator: " << s << std::endl;
      return 2;
    }
    options.data_roots = *std::move(roots);
    std::cerr << "sluice-coordinator: " << (security->tls.enabled() ? "TLS" : "plaintext")
              << (security->tls.client_auth ? " with client certificates" : "")
              << (security->token.empty() ? "" : ", token required")
              << (options.role_tokens.any() ? ", per-role tokens" : "")
              << (options.data_roots.restricted() ? ", data roots " : "")
              << absl::StrJoin(options.data_roots.roots(), ",")
              << std::endl;
    if ((!security->token.empty() || options.role_tokens.any()) && !security->tls.enabled()) {
      std::cerr << "sluice-coordinator: warning: the token travels in plaintext without --tls_cert"
                << std::endl;
    }
    const bool authenticated =
        !security->token.empty() || options.role_tokens.any() || security->tls.client_auth;
    if (const std::string warning =
            sluice::RequestAdmission::OpenServiceWarning(options.host, authenticated);
        !warning.empty()) {
      std::cerr << "sluice-coordinator: warning: " << warning << std::endl;
    }
  }
  auto server = sluice::CoordinatorServer::Start(options);
  if (!server.ok()) {
    std::cerr << "sluice-coordinator: " << server.status() << std::endl;
    return 1;
  }
  std::cerr << "sluice-coordinator: serving on " << (*server)->address() << " (worker_timeout "
            << absl::FormatDuration(options.coordinator.worker_timeout) << ")" << std::endl;
  // Metrics (docs/SERVICE.md, "Metrics and status"); both live until main returns.
  sluice::CoordinatorMetrics coordinator_metrics(&(*server)->coordinator());
  auto metrics = sluice::StartMetricsEndpoint(options.host, absl::GetFlag(FLAGS_metrics_port),
                                              absl::GetFlag(FLAGS_metrics_port_file));
  if (!metrics.ok()) {
    std::cerr << "sluice-coordinator: --metrics_port: " << metrics.status() << std::endl;
    (*server)->Shutdown(absl::ZeroDuration());
    return 1;
  }
  if (*metrics != nullptr) {
    std::cerr << "sluice-coordinator: metrics on http://" << (*metrics)->address() << "/metrics"
              << std::endl;
  }
  const std::string port_file = absl::GetFlag(FLAGS_port_file);
  if (!port_file.empty() && !WritePortFile(port_file, (*server)->port())) {
    std::cerr << "sluice-coordinator: cannot write --port_file " << port_file << std::endl;
    (*server)->Shutdown(absl::ZeroDuration());
    return 1;
  }

  int sig = 0;
  sigwait(&signals, &sig);
  std::cerr << "sluice-coordinator: " << (sig == SIGTERM ? "SIGTERM" : "SIGINT")
            << ", shutting down" << std::endl;
  (*server)->Shutdown(absl::GetFlag(FLAGS_shutdown_deadline));
  std::cerr << "sluice-coordinator: stopped" << std::endl;
  return 0;
}
