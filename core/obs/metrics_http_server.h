// MetricsHttpServer: serves a MetricsRegistry over HTTP with cpp-httplib (Debian's
// libcpp-httplib-dev), for Prometheus and for people with curl.
//
//   GET /metrics  the registry's Scrape(), Content-Type text/plain; version=0.0.4
//   GET /healthz  "ok"
//   anything else 404
//
//   ASSIGN_OR_RETURN(auto http, MetricsHttpServer::Start({.port = 0}));
//   ... curl http://127.0.0.1:<http->port()>/metrics ...
//   http->Stop();
//
// Thread safety: thread-safe; requests are served on a small pool of the server's own threads.
#ifndef SLUICE_CORE_METRICS_HTTP_SERVER_H_
#define SLUICE_CORE_METRICS_HTTP_SERVER_H_

#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "core/obs/metrics.h"

namespace sluice {

struct MetricsHttpServerOptions {
  // Interface to listen on; "0.0.0.0" for every interface.
  std::string host = "127.0.0.1";
  // 0: any free port; port() tells which.
  int port = 0;
  // What /metrics serves. Borrowed, must outlive the server; nullptr: MetricsRegistry::Default().
  MetricsRegistry* registry = nullptr;
  // Threads serving requests.
  int threads = 2;
};

class MetricsHttpServer {
 public:
  // Binds and starts serving. UNAVAILABLE naming host:port when it cannot bind;
  // INVALID_ARGUMENT for a port outside [0, 65535]; RESOURCE_EXHAUSTED "cannot start a thread
  // for the metrics HTTP server's connections ..." (or its listener) when the system refuses
  // a thread (core/util/start_thread.h).
  static absl::StatusOr<std::unique_ptr<MetricsHttpServer>> Start(MetricsHttpServerOptions options);
  ~MetricsHttpServer();  // Stop()
  MetricsHttpServer(const MetricsHttpServer&) = delete;
  MetricsHttpServer& operator=(const MetricsHttpServer&) = delete;

  int port() const { return port_; }
  // "host:port" as bound.
  std::string address() const;
  // Stops listening and waits for requests in flight. Idempotent.
  void Stop();

 private:
  struct Impl;
  MetricsHttpServer() = default;

  std::unique_ptr<Impl> impl_;
  std::string host_;
  int port_ = 0;
  std::thread thread_;
};

// What the binaries' --metrics_port / --metrics_port_file flags mean: port < 0 serves nothing
// (returns nullptr); otherwise starts a server on host:port and, when port_file is not empty,
// writes the bound port to it (decimal, newline; a temporary file renamed into place, so a
// reader never sees a partial port). Errors: Start's, or UNAVAILABLE naming the port file.
absl::StatusOr<std::unique_ptr<MetricsHttpServer>> StartMetricsEndpoint(
    const std::string& host, int port, const std::string& port_file);

}  // namespace sluice

#endif  // SLUICE_CORE_METRICS_HTTP_SERVER_H_
