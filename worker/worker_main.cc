// sluice-worker: an input worker.
//
//   sluice-worker --coordinator=HOST:PORT [--port=0] [--port_file=PATH] [--host=127.0.0.1]
//                 [--buffer_bytes=268435456] [--retention_bytes=67108864]
//                 [--cross_trainer_window_bytes=67108864] [--drop_departed_trainers_after=5m]
//                 [--memory_limit=16GiB] [--max_element_bytes=4GiB]
//                 [--heartbeat_interval=1s] [--drain_timeout=30s]
//                 [--plugin=PATH[,PATH...]]
//                 [--tls_cert=PEM --tls_key=PEM [--tls_ca=PEM] [--tls_client_auth]
//                  [--tls_client_cert=PEM --tls_client_key=PEM]] [--token_file=PATH]
//                 [--worker_token_file=PATH --trainer_token_file=PATH]
//                 [--data_root=DIR|URL[,...]] [--max_request_bytes=N]
//                 [--bulk_data=true] [--data_port=0] [--bulk_min_bytes=65536]
//
// Custom-op plugins are loaded only from --plugin, never because a client's pipeline names
// one: a pipeline calling map(plugin('op')) runs only on workers started with its library.
// With --port=0 the worker binds any free port; --port_file receives the bound port (written
// atomically once the server is up). SIGTERM or SIGINT drains (docs/SERVICE.md, "Liveness and
// failure"): the worker tells the coordinator it is draining, which reassigns its tasks at once,
// ends its streams with UNAVAILABLE so that consumers move to the new workers, and exits 0
// within --drain_timeout. Without an answer from the coordinator it stops producing and serves
// the steps it has buffered until --drain_timeout, then exits 0.
#include <algorithm>
#include <csignal>
#include <cstdint>
#include <cstdio>
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
#include "core/data/memory_budget.h"
#include "core/data/plugin_loader.h"
#include "core/obs/metrics_http_server.h"
#include "core/rpc/grpc_security.h"
#include "core/rpc/bulk_channel.h"
#include "core/rpc/shm_segment.h"
#include "core/util/logging.h"
#include "core/util/malloc_retention.h"
#include "core/util/mutex_deadlock_detection.h"
#include "core/util/thread_pool.h"
#include "worker/grpc_worker_service.h"
#include "worker/worker_metrics.h"
#include "worker/task_runner_pool.h"
#include "worker/worker_server.h"

ABSL_FLAG(std::string, coordinator, "", "Coordinator address, HOST:PORT (required)");
ABSL_FLAG(int, port, 0, "Port to serve on; 0 picks a free one");
ABSL_FLAG(std::string, port_file, "", "Write the bound port to this file once serving");
ABSL_FLAG(std::string, host, "127.0.0.1",
          "Interface to bind, and the host consumers dial (advertised as HOST:PORT)");
ABSL_FLAG(int64_t, buffer_bytes, int64_t{256} << 20,
          "Per task: bytes of steps buffered ahead of the slowest consumer (at least one step)");
ABSL_FLAG(int64_t, retention_bytes, int64_t{64} << 20,
          "Per task (coordinated reads): bytes of steps every consumer has read that stay in "
          "memory, on top of --buffer_bytes, for consumers that come late or reconnect (they "
          "read them from memory instead of a replay of the task); 0 keeps none");
ABSL_FLAG(int64_t, cross_trainer_window_bytes, int64_t{64} << 20,
          "Per task of a job shared across trainers (JobOptions.cross_trainer): bytes of steps "
          "kept for the trainers to read at their own pace, instead of --buffer_bytes (at least "
          "one step); its tensors count in --memory_limit as every step's do");
ABSL_FLAG(absl::Duration, drop_departed_trainers_after, absl::Minutes(5),
          "Jobs shared across trainers: a trainer with no stream open to a task on this worker "
          "for this long is dropped from the task's window (its unacknowledged steps freed; in "
          "lossless mode it no longer holds the producer); coming back later, it starts again "
          "at the window's oldest step. 'inf' never drops one");
ABSL_FLAG(std::string, memory_limit, "",
          "Bytes all tasks' pipelines may hold: every live tensor and the op buffers (batch, "
          "shuffle, cache, prefetch), e.g. 16GiB; a task that needs more fails with "
          "RESOURCE_EXHAUSTED and the worker keeps serving. Empty: 3/4 of the smallest of the "
          "cgroup's memory limit, RLIMIT_AS and physical memory");
ABSL_FLAG(std::string, max_element_bytes, "",
          "Bytes one element (one batch: one step), or one allocation, may hold, e.g. 2GiB. "
          "Empty: a quarter of --memory_limit");
ABSL_FLAG(absl::Duration, heartbeat_interval, absl::Seconds(1),
          "Heartbeat period (liveness and reports; new tasks arrive through the assignment "
          "watch unless --nowatch_assignments)");
ABSL_FLAG(bool, watch_assignments, true,
          "Keep a WatchAssignment long-poll open at the coordinator, so that a task assigned "
          "here starts at once instead of at the next heartbeat (docs/SERVICE.md, "
          "\"Assignment watch\")");
ABSL_FLAG(absl::Duration, drain_timeout, absl::Seconds(30),
          "On SIGTERM, the most the drain takes (telling the coordinator, ending streams)");
ABSL_FLAG(std::string, plugin, "", "Comma-separated custom-op plugin libraries to load");
ABSL_FLAG(std::string, tls_cert, "",
          "PEM certificate chain this server presents; with --tls_key turns TLS on.");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of --tls_cert.");
ABSL_FLAG(std::string, tls_ca, "",
          "PEM CA certificates that peers' certificates must chain to (client certificates with "
          "--tls_client_auth; and the coordinator's certificate).");
ABSL_FLAG(bool, tls_client_auth, false,
          "Mutual TLS: require a client certificate signed by --tls_ca on every connection.");
ABSL_FLAG(std::string, token_file, "",
          "File holding the shared token every RPC must carry (authorization: Bearer); the "
          "token is never given on the command line. Empty: no token.");
ABSL_FLAG(std::string, worker_token_file, "",
          "Per-role tokens: the worker-role token this worker sends to the coordinator (the "
          "coordinator's --worker_token_file). Empty: --token_file's.");
ABSL_FLAG(std::string, trainer_token_file, "",
          "Per-role tokens: the trainer-role token consumers' calls to this worker must carry "
          "(the coordinator's --trainer_token_file). Empty: --token_file's.");
ABSL_FLAG(std::vector<std::string>, data_root, {},
          "Comma-separated folders and URL prefixes (s3://bucket/prefix, "
          "http://HOST:PORT/path) this worker may read data from; a pipeline naming a file "
          "elsewhere is PERMISSION_DENIED, and local opens stay beneath the folders at open "
          "time. Remote reads reach only public addresses unless an http(s) root names the "
          "endpoint (loopback, link-local such as the cloud metadata service, private "
          "networks). Empty: any local file, public addresses only.");
ABSL_FLAG(int, max_request_bytes, 4 << 20, "Largest request message accepted, in bytes.");
ABSL_FLAG(bool, shared_memory, sluice::SharedMemoryDefaultFromEnvironment(),
          "Serve consumers on this host through shared memory (a memfd ring per stream, "
          "negotiated; docs/SERVICE.md \"Shared memory\"); false: TCP only. Default: true "
          "unless the environment sets SLUICE_SHARED_MEMORY=0.");
ABSL_FLAG(int64_t, shm_pool_bytes, int64_t{512} << 20,
          "Shared memory: the most bytes of segments kept after their streams end, for the "
          "same consumer process's next stream (warm pages; charged to --memory_limit; 0: "
          "none; docs/SERVICE.md \"Shared memory\", 7).");
ABSL_FLAG(absl::Duration, shm_pool_idle, absl::Seconds(30),
          "Shared memory: a kept segment no stream took for this long is freed.");
ABSL_FLAG(bool, bulk_data, sluice::BulkDataDefaultFromEnvironment(),
          "Send remote consumers' tensor bytes on a TCP socket of their own next to the gRPC "
          "stream (the bulk data channel, negotiated; docs/SERVICE.md \"Bulk data channel\"), "
          "listening on --host at --data_port; false: every byte on gRPC. Default: true "
          "unless the environment sets SLUICE_BULK_DATA=0.");
ABSL_FLAG(int, data_port, 0,
          "Port of the bulk data channel (--bulk_data) on --host; 0 picks a free one, which "
          "consumers learn on their stream.");
ABSL_FLAG(int64_t, bulk_min_bytes, int64_t{64} << 10,
          "Frames with fewer tensor bytes than this stay on gRPC when the bulk data channel is "
          "up (a socket write costs more than it saves).");
ABSL_FLAG(std::string, bulk_congestion_control, "",
          "Bulk data channel: the TCP congestion control of its sockets (\"cubic\", \"reno\", "
          "\"bbr\", ...; see net.ipv4.tcp_available_congestion_control); empty: the host's "
          "default. docs/SERVICE.md \"Bulk data channel\" says when to choose.");
ABSL_FLAG(int64_t, bulk_max_frame_bytes, int64_t{4} << 20,
          "Bulk data channel: the most tensor bytes of steps sent as one frame (the steps ready "
          "when the socket's sender frees up go together, docs/SERVICE.md \"Bulk data "
          "channel\"); from the frame size on gRPC (1 MiB) to 1 GiB.");
ABSL_FLAG(std::string, tls_client_cert, "",
          "mTLS to the coordinator: the certificate this worker presents as a client; empty: "
          "--tls_cert.");
ABSL_FLAG(std::string, tls_client_key, "", "Private key of --tls_client_cert; empty: --tls_key.");
ABSL_FLAG(int, metrics_port, -1,
          "Serve Prometheus metrics over HTTP at /metrics on --host and this port; 0 picks a "
          "free one (see --metrics_port_file); -1: off.");
ABSL_FLAG(std::string, metrics_port_file, "",
          "If set, the bound metrics port is written here (atomically) before --port_file.");
ABSL_FLAG(int, threads, 0,
          "Threads of the process's pool that every parallel op of every task shares (parallel "
          "map fn calls; num_parallel_calls=AUTOTUNE resolves to it); 0: the number of cores.");
ABSL_FLAG(int, task_threads, 0,
          "Threads that produce the steps of every task this worker runs (runners take turns "
          "on them; the pool adds threads, up to --task_threads + 32, while runners block in "
          "their pipelines' reads); 0: max(2, the number of cores).");
ABSL_FLAG(bool, op_metrics, false,
          "Count elements and time per op of every task's pipeline and export them at /metrics "
          "(sluice_worker_op_*); costs two clock reads per element (or block) per op.");
ABSL_FLAG(std::string, log_level, "info", "Least level logged: debug, info, warning or error.");
ABSL_FLAG(std::string, log_format, "text", "Log lines as text or json (one object a line).");

int main(int argc, char** argv) {
  // Steps are built and freed continuously: keep freed memory for the next ones instead of
  // faulting it in again (core/util/malloc_retention.h; GLIBC_TUNABLES overrides it).
  sluice::RetainFreedMemory();
  absl::ParseCommandLine(argc, argv);
  sluice::SkipMutexDeadlockDetection();  // core/util/mutex_deadlock_detection.h says why
  if (absl::Status s = sluice::ConfigureLoggingFromFlags(absl::GetFlag(FLAGS_log_level),
                                                         absl::GetFlag(FLAGS_log_format));
      !s.ok()) {
    std::cerr << "sluice-worker: " << s.message() << std::endl;
    return 2;
  }
  // Block the signals in every thread; main waits for them below.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  const std::string plugins = absl::GetFlag(FLAGS_plugin);
  if (!plugins.empty()) {
    std::vector<std::string> paths = absl::StrSplit(plugins, ',', absl::SkipEmpty());
    absl::Status loaded = sluice::LoadPlugins(paths);
    if (!loaded.ok()) {
      std::cerr << "sluice-worker: " << loaded << std::endl;
      return 1;
    }
  }

  if (const int threads = absl::GetFlag(FLAGS_threads); threads != 0) {
    if (absl::Status s = sluice::SetProcessThreadPoolSize(threads); !s.ok()) {
      std::cerr << "sluice-worker: --threads: " << s.message() << std::endl;
      return 2;
    }
  }

  if (const int threads = absl::GetFlag(FLAGS_task_threads); threads != 0) {
    if (absl::Status s = sluice::SetProcessTaskRunnerPoolOptions({.threads = threads});
        !s.ok()) {
      std::cerr << "sluice-worker: --task_threads: " << s.message() << std::endl;
      return 2;
    }
  }
  // The pools every task's pipeline runs on start once, here: a worker that cannot start their
  // threads does not start, and no task pays for (or fails at) their start later.
  for (const absl::Status& s : {sluice::ProcessThreadPool().status(),
                                sluice::ProcessTaskRunnerPool().status()}) {
    if (!s.ok()) {
      std::cerr << "sluice-worker: " << s.message() << std::endl;
      return 1;
    }
  }

  sluice::WorkerServerOptions options;
  if (absl::GetFlag(FLAGS_op_metrics)) options.executor.profile = std::make_shared<sluice::OpProfile>();
  options.coordinator_address = absl::GetFlag(FLAGS_coordinator);
  options.host = absl::GetFlag(FLAGS_host);
  options.port = absl::GetFlag(FLAGS_port);
  options.log = sluice::LogLineSink("worker");
  if (absl::Status s = sluice::ConfigureProcessMemoryBudget(absl::GetFlag(FLAGS_memory_limit),
                                                            absl::GetFlag(FLAGS_max_element_bytes));
      !s.ok()) {
    std::cerr << "sluice-worker: " << s.message() << std::endl;
    return 1;
  }
  if (absl::GetFlag(FLAGS_buffer_bytes) <= 0) {
    std::cerr << "sluice-worker: --buffer_bytes must be positive" << std::endl;
    return 2;
  }
  options.buffer_bytes = static_cast<size_t>(absl::GetFlag(FLAGS_buffer_bytes));
  if (absl::GetFlag(FLAGS_retention_bytes) < 0) {
    std::cerr << "sluice-worker: --retention_bytes must be >= 0, got "
              << absl::GetFlag(FLAGS_retention_bytes) << std::endl;
    return 2;
  }
  options.retention_bytes = static_cast<size_t>(absl::GetFlag(FLAGS_retention_bytes));
  if (absl::GetFlag(FLAGS_cross_trainer_window_bytes) <= 0) {
    std::cerr << "sluice-worker: --cross_trainer_window_bytes must be positive, got "
              << absl::GetFlag(FLAGS_cross_trainer_window_bytes) << std::endl;
    return 2;
  }
  options.cross_trainer_window_bytes =
      static_cast<size_t>(absl::GetFlag(FLAGS_cross_trainer_window_bytes));
  if (absl::GetFlag(FLAGS_drop_departed_trainers_after) <= absl::ZeroDuration()) {
    std::cerr << "sluice-worker: --drop_departed_trainers_after must be positive, got "
              << absl::GetFlag(FLAGS_drop_departed_trainers_after) << std::endl;
    return 2;
  }
  options.cross_trainer_drop_departed_after = absl::GetFlag(FLAGS_drop_departed_trainers_after);
  options.heartbeat_interval = absl::GetFlag(FLAGS_heartbeat_interval);
  options.service.shared_memory = absl::GetFlag(FLAGS_shared_memory);
  options.service.shm_pool_bytes =
      static_cast<size_t>(std::max<int64_t>(absl::GetFlag(FLAGS_shm_pool_bytes), 0));
  options.service.shm_pool_idle = absl::GetFlag(FLAGS_shm_pool_idle);
  options.service.bulk_data = absl::GetFlag(FLAGS_bulk_data);
  options.service.data_port = absl::GetFlag(FLAGS_data_port);
  if (absl::GetFlag(FLAGS_bulk_min_bytes) < 1) {
    std::cerr << "sluice-worker: --bulk_min_bytes must be >= 1, got "
              << absl::GetFlag(FLAGS_bulk_min_bytes) << std::endl;
    return 2;
  }
  options.service.bulk_min_bytes = static_cast<size_t>(absl::GetFlag(FLAGS_bulk_min_bytes));
  if (absl::Status s = sluice::CheckBulkMaxFrameBytes(absl::GetFlag(FLAGS_bulk_max_frame_bytes),
                                                      options.service, "--bulk_max_frame_bytes");
      !s.ok()) {
    std::cerr << "sluice-worker: " << s.message() << std::endl;
    return 2;
  }
  options.service.bulk_max_frame_bytes =
      static_cast<size_t>(absl::GetFlag(FLAGS_bulk_max_frame_bytes));
  options.service.bulk_congestion_control = absl::GetFlag(FLAGS_bulk_congestion_control);
  if (absl::Status s = sluice::CheckBulkCongestionControl(options.service.bulk_congestion_control);
      !s.ok()) {
    std::cerr << "sluice-worker: --bulk_congestion_control: " << s.message() << std::endl;
    return 2;
  }
  if (options.service.data_port < 0 || options.service.data_port > 65535) {
    std::cerr << "sluice-worker: --data_port must be in [0, 65535], got "
              << options.service.data_port << std::endl;
    return 2;
  }
  options.watch_assignments = absl::GetFlag(FLAGS_watch_assignments);
  if (options.heartbeat_interval <= absl::ZeroDuration()) {
    std::cerr << "sluice-worker: --heartbeat_interval must be positive" << std::endl;
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
      std::cerr << "sluice-worker: " << (security.ok() ? roots.status() : security.status())
                << std::endl;
      return 2;
    }
    options.security = *security;
    // Per-role tokens: consumers dial this worker with the trainer token; the worker itself
    // calls the coordinator with the worker token.
    std::string coordinator_token = security->token;
    for (auto [path, token] : {std::pair(absl::GetFlag(FLAGS_trainer_token_file),
                                         &options.security.token),
                               std::pair(absl::GetFlag(FLAGS_worker_token_file),
                                         &coordinator_token)}) {
      if (path.empty()) continue;
      absl::StatusOr<std::string> read = sluice::ReadTokenFile(path);
      if (!read.ok()) {
        std::cerr << "sluice-worker: " << read.status() << std::endl;
        return 2;
      }
      *token = *std::move(read);
    }
    if (absl::Status s = sluice::InstallProcessDataRoots(*roots); !s.ok()) {
      std::cerr << "sluice-worker: " << s << std::endl;
      return 2;
    }
    options.data_roots = *std::move(roots);
    // The channel to the coordinator: TLS when this worker has TLS, verifying with --tls_ca and
    // presenting --tls_client_cert (default: the worker's own --tls_cert) for mTLS.
    sluice::ChannelSecurity& c = options.coordinator_security;
    c.tls.enabled = !absl::GetFlag(FLAGS_tls_cert).empty() || !absl::GetFlag(FLAGS_tls_ca).empty();
    c.tls.ca_file = absl::GetFlag(FLAGS_tls_ca);
    const bool own_cert = absl::GetFlag(FLAGS_tls_client_cert).empty();
    c.tls.cert_file = own_cert ? absl::GetFlag(FLAGS_tls_cert) : absl::GetFlag(FLAGS_tls_client_cert);
    c.tls.key_file = own_cert ? absl::GetFlag(FLAGS_tls_key) : absl::GetFlag(FLAGS_tls_client_key);
    c.token = coordinator_token;
    if (absl::Status ok = sluice::MakeChannelFactory(c).status(); !ok.ok()) {
      std::cerr << "sluice-worker: " << ok << std::endl;
      return 2;
    }
    std::cerr << "sluice-worker: " << (security->tls.enabled() ? "TLS" : "plaintext")
              << (security->tls.client_auth ? " with client certificates" : "")
              << (options.security.token.empty() ? "" : ", token required")
              << (options.data_roots.restricted() ? ", data roots " : "")
              << absl::StrJoin(options.data_roots.roots(), ",")
              << std::endl;
    if (!options.security.token.empty() && !security->tls.enabled()) {
      std::cerr << "sluice-worker: warning: the token travels in plaintext without --tls_cert"
                << std::endl;
    }
  }
  auto worker = sluice::WorkerServer::Start(options);
  if (!worker.ok()) {
    std::cerr << "sluice-worker: " << worker.status() << std::endl;
    return 1;
  }
  std::cerr << "sluice-worker: serving on " << (*worker)->address() << ", coordinator "
            << options.coordinator_address << std::endl;
  if ((*worker)->data_port() != 0) {
    std::cerr << "sluice-worker: bulk data channel on " << options.host << ":"
              << (*worker)->data_port() << ", frames up to "
              << options.service.bulk_max_frame_bytes << " bytes" << std::endl;
  }
  // Metrics (docs/SERVICE.md, "Metrics and status"); both live until main returns.
  sluice::WorkerMetrics worker_metrics(worker->get());
  sluice::ExecutorMetrics executor_metrics(options.executor.profile);
  auto metrics = sluice::StartMetricsEndpoint(options.host, absl::GetFlag(FLAGS_metrics_port),
                                              absl::GetFlag(FLAGS_metrics_port_file));
  if (!metrics.ok()) {
    std::cerr << "sluice-worker: --metrics_port: " << metrics.status() << std::endl;
    return 1;
  }
  if (*metrics != nullptr) {
    std::cerr << "sluice-worker: metrics on http://" << (*metrics)->address() << "/metrics"
              << std::endl;
  }
  const std::string port_file = absl::GetFlag(FLAGS_port_file);
  if (!port_file.empty()) {
    const std::string tmp = port_file + ".tmp";
    {
      std::ofstream out(tmp);
      out << (*worker)->port() << "\n";
      if (!out) {
        std::cerr << "sluice-worker: cannot write " << tmp << std::endl;
        return 1;
      }
    }
    if (std::rename(tmp.c_str(), port_file.c_str()) != 0) {
      std::cerr << "sluice-worker: cannot rename " << tmp << " to " << port_file << std::endl;
      return 1;
    }
  }
  int sig = 0;
  sigwait(&signals, &sig);
  std::cerr << "sluice-worker: signal " << sig << ", draining for up to "
            << absl::FormatDuration(absl::GetFlag(FLAGS_drain_timeout)) << std::endl;
  (*worker)->Drain(absl::GetFlag(FLAGS_drain_timeout));
  std::cerr << "sluice-worker: stopped" << std::endl;
  return 0;
}
