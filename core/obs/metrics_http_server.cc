#include "core/obs/metrics_http_server.h"

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <functional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/util/start_thread.h"
#include "core/util/status_macros.h"
#include "core/util/thread_pool.h"
#include "httplib.h"

namespace sluice {

namespace {

// httplib's queue of accepted connections, on a Sluice ThreadPool that Start started: httplib's
// own ThreadPool starts its threads inside listen, on the server's thread, where a thread the
// system refuses (std::system_error) would end the process.
class PoolTaskQueue : public httplib::TaskQueue {
 public:
  explicit PoolTaskQueue(std::unique_ptr<ThreadPool> pool) : pool_(std::move(pool)) {}
  void enqueue(std::function<void()> fn) override { pool_->Schedule(std::move(fn)); }
  // As httplib's pool: serves the connections already queued, then joins the threads. Called
  // once, by the listening thread, when listen ends; nothing is enqueued after.
  void shutdown() override { pool_.reset(); }

 private:
  std::unique_ptr<ThreadPool> pool_;
};

}  // namespace

struct MetricsHttpServer::Impl {
  httplib::Server server;
  std::unique_ptr<ThreadPool> connections;  // Start's; the listen's task queue takes it
};

absl::StatusOr<std::unique_ptr<MetricsHttpServer>> MetricsHttpServer::Start(
    MetricsHttpServerOptions options) {
  if (options.port < 0 || options.port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("metrics HTTP server: port ", options.port, " is outside [0, 65535]"));
  }
  MetricsRegistry* registry =
      options.registry != nullptr ? options.registry : &MetricsRegistry::Default();
  std::unique_ptr<MetricsHttpServer> s(new MetricsHttpServer());
  s->impl_ = std::make_unique<Impl>();
  s->host_ = options.host;
  httplib::Server& server = s->impl_->server;
  ASSIGN_OR_RETURN(s->impl_->connections,
                   ThreadPool::Create(std::max(options.threads, 1),
                                      "the metrics HTTP server's connections"));
  Impl* impl = s->impl_.get();
  server.new_task_queue = [impl] { return new PoolTaskQueue(std::move(impl->connections)); };
  // httplib's default also sets SO_REUSEPORT, which would let a second server bind the same
  // port and split the scrapes; SO_REUSEADDR alone keeps quick restarts working.
  server.set_socket_options([](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
  server.Get("/metrics", [registry](const httplib::Request&, httplib::Response& response) {
    response.set_content(registry->Scrape(), "text/plain; version=0.0.4; charset=utf-8");
  });
  server.Get("/healthz", [](const httplib::Request&, httplib::Response& response) {
    response.set_content("ok\n", "text/plain; charset=utf-8");
  });
  if (options.port == 0) {
    s->port_ = server.bind_to_any_port(options.host);
  } else if (server.bind_to_port(options.host, options.port)) {
    s->port_ = options.port;
  }
  if (s->port_ <= 0) {
    return absl::UnavailableError(absl::StrCat("metrics HTTP server: cannot bind ", options.host,
                                               ":", options.port));
  }
  absl::StatusOr<std::thread> thread = StartThread(
      absl::StrCat("the metrics HTTP server on port ", s->port_),
      [impl] { impl->server.listen_after_bind(); });
  if (!thread.ok()) return thread.status();
  s->thread_ = *std::move(thread);
  return s;
}

MetricsHttpServer::~MetricsHttpServer() { Stop(); }

std::string MetricsHttpServer::address() const { return absl::StrCat(host_, ":", port_); }

void MetricsHttpServer::Stop() {
  if (!thread_.joinable()) return;
  // stop() before the listener has started is lost; wait (bounded) until it runs.
  for (int i = 0; i < 2000 && !impl_->server.is_running(); ++i) usleep(1000);
  impl_->server.stop();
  thread_.join();
}

absl::StatusOr<std::unique_ptr<MetricsHttpServer>> StartMetricsEndpoint(
    const std::string& host, int port, const std::string& port_file) {
  if (port < 0) return std::unique_ptr<MetricsHttpServer>();
  MetricsHttpServerOptions options;
  options.host = host;
  options.port = port;
  absl::StatusOr<std::unique_ptr<MetricsHttpServer>> server = MetricsHttpServer::Start(options);
  if (!server.ok() || port_file.empty()) return server;
  const std::string tmp = absl::StrCat(port_file, ".tmp.", getpid());
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << (*server)->port() << "\n";
    out.flush();
    if (!out) return absl::UnavailableError(absl::StrCat("cannot write metrics port file ", tmp));
  }
  if (std::rename(tmp.c_str(), port_file.c_str()) != 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot rename ", tmp, " to metrics port file ", port_file));
  }
  return server;
}

}  // namespace sluice
