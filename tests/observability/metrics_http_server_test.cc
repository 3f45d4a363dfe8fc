// MetricsHttpServer: /metrics and /healthz over loopback, with cpp-httplib's client.
#include "core/obs/metrics_http_server.h"

#include <fstream>
#include <string>

#include "core/util/start_thread.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "tests/observability/prometheus_text.h"

namespace sluice {
namespace {

// A request waits at most 5 s for the server on loopback.
void SetTimeouts(httplib::Client& client) {
  client.set_connection_timeout(5);
  client.set_read_timeout(5);
}

TEST(MetricsHttpServerTest, ServesMetricsAndHealthOnAPickedPort) {
  MetricsRegistry registry;
  CounterFamily* c = registry.Counter("sluice_test_total", "A test counter.", {"k"});
  c->Add({"a"}, 41);
  auto server = MetricsHttpServer::Start({.host = "127.0.0.1", .port = 0, .registry = &registry});
  ASSERT_TRUE(server.ok()) << server.status();
  ASSERT_GT((*server)->port(), 0);

  httplib::Client client("127.0.0.1", (*server)->port());
  SetTimeouts(client);
  auto first = client.Get("/metrics");
  ASSERT_TRUE(first) << httplib::to_string(first.error());
  EXPECT_EQ(first->status, 200);
  EXPECT_EQ(first->get_header_value("Content-Type"), "text/plain; version=0.0.4; charset=utf-8");
  absl::StatusOr<testing::PromText> a = testing::ParsePromText(first->body);
  ASSERT_TRUE(a.ok()) << a.status() << "\n" << first->body;
  EXPECT_EQ(a->Sum("sluice_test_total", {{"k", "a"}}), 41);

  c->Add({"a"});
  auto second = client.Get("/metrics");
  ASSERT_TRUE(second);
  absl::StatusOr<testing::PromText> b = testing::ParsePromText(second->body);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->Sum("sluice_test_total", {{"k", "a"}}), 42);

  auto health = client.Get("/healthz");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  EXPECT_EQ(health->body, "ok\n");
  auto missing = client.Get("/nothing");
  ASSERT_TRUE(missing);
  EXPECT_EQ(missing->status, 404);

  (*server)->Stop();
  (*server)->Stop();  // idempotent
  httplib::Client after("127.0.0.1", (*server)->port());
  after.set_connection_timeout(2);
  EXPECT_FALSE(after.Get("/metrics"));
}

TEST(MetricsHttpServerTest, BusyPortIsUnavailableNamingIt) {
  auto first = MetricsHttpServer::Start({.port = 0});
  ASSERT_TRUE(first.ok()) << first.status();
  auto second = MetricsHttpServer::Start({.port = (*first)->port()});
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(second.status().message().find(std::to_string((*first)->port())), std::string::npos);
  EXPECT_EQ(MetricsHttpServer::Start({.port = 70000}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// Its connections' threads start in Start: one the system refuses fails the start naming them,
// where httplib's own pool, started inside listen on the server's thread, would have ended the
// process (std::system_error, uncaught). With every thread allowed, the same server serves.
TEST(MetricsHttpServerTest, ConnectionThreadsThatCannotStartFailTheStart) {
  const std::string what = "the metrics HTTP server's connections";
  TEST_FailThreadStarts(1, what);
  auto refused = MetricsHttpServer::Start({.port = 0});
  EXPECT_EQ(TEST_ThreadStartsLeftToFail(), 0) << "nothing started a thread for " << what;
  TEST_FailThreadStarts(0);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted) << refused.status();
  EXPECT_NE(refused.status().message().find("cannot start a thread for " + what),
            std::string::npos)
      << refused.status();

  auto server = MetricsHttpServer::Start({.port = 0});
  ASSERT_TRUE(server.ok()) << server.status();
  httplib::Client client("127.0.0.1", (*server)->port());
  SetTimeouts(client);
  auto health = client.Get("/healthz");
  ASSERT_TRUE(health) << httplib::to_string(health.error());
  EXPECT_EQ(health->status, 200);
}

TEST(MetricsHttpServerTest, EndpointFlagsOffOrWithPortFile) {
  auto off = StartMetricsEndpoint("127.0.0.1", -1, "");
  ASSERT_TRUE(off.ok());
  EXPECT_EQ(*off, nullptr);

  const std::string path = ::testing::TempDir() + "/metrics_port_" + std::to_string(getpid());
  auto on = StartMetricsEndpoint("127.0.0.1", 0, path);
  ASSERT_TRUE(on.ok()) << on.status();
  ASSERT_NE(*on, nullptr);
  std::ifstream in(path);
  int port = 0;
  in >> port;
  EXPECT_EQ(port, (*on)->port());
  std::remove(path.c_str());
}

}  // namespace
}  // namespace sluice
