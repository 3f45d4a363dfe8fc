// The real binaries: sluice-coordinator and sluice-worker with --metrics_port=0 and
// --metrics_port_file serve /metrics, and --log_level / --log_format shape their logs.
#include <signal.h>

#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "core/util/json_value.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "tests/examples/subprocess.h"
#include "tests/examples/test_paths.h"
#include "tests/observability/prometheus_text.h"

namespace sluice {
namespace {

// Waits (bounded) for a port file and returns its port, or 0.
int ReadPortFile(const std::string& path, Subprocess* process) {
  for (int i = 0; i < 600; ++i) {
    std::ifstream in(path);
    int port = 0;
    if (in >> port && port > 0) return port;
    if (!process->running()) return 0;
    absl::SleepFor(absl::Milliseconds(50));
  }
  return 0;
}

absl::StatusOr<testing::PromText> Scrape(int port) {
  httplib::Client client("127.0.0.1", port);
  client.set_connection_timeout(5);
  client.set_read_timeout(10);
  auto r = client.Get("/metrics");
  if (!r) return absl::UnavailableError(httplib::to_string(r.error()));
  return testing::ParsePromText(r->body);
}

class BinaryMetricsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = absl::StrCat(::testing::TempDir(), "/binary_metrics_", getpid());
    ASSERT_EQ(system(absl::StrCat("mkdir -p ", dir_).c_str()), 0);
  }
  void TearDown() override { (void)system(absl::StrCat("rm -rf ", dir_).c_str()); }
  std::string dir_;
};

TEST_F(BinaryMetricsTest, MetricsEndpointsAndLogLevels) {
  auto coordinator = Subprocess::Start(
      {BuildPath("bin/sluice-coordinator"), "--port=0", "--port_file=" + dir_ + "/c.port",
       "--metrics_port=0", "--metrics_port_file=" + dir_ + "/c.metrics", "--log_level=warning",
       "--worker_timeout=60s"});
  ASSERT_TRUE(coordinator.ok()) << coordinator.status();
  const int coordinator_port = ReadPortFile(dir_ + "/c.port", coordinator->get());
  ASSERT_GT(coordinator_port, 0) << (*coordinator)->stderr_text();
  // The metrics port is written before the gRPC one.
  std::ifstream metrics_file(dir_ + "/c.metrics");
  int coordinator_metrics = 0;
  ASSERT_TRUE(metrics_file >> coordinator_metrics);

  auto worker = Subprocess::Start(
      {BuildPath("bin/sluice-worker"), absl::StrCat("--coordinator=127.0.0.1:", coordinator_port),
       "--port=0", "--port_file=" + dir_ + "/w.port", "--metrics_port=0",
       "--metrics_port_file=" + dir_ + "/w.metrics", "--log_level=debug", "--log_format=json",
       "--heartbeat_interval=100ms"});
  ASSERT_TRUE(worker.ok()) << worker.status();
  ASSERT_GT(ReadPortFile(dir_ + "/w.port", worker->get()), 0) << (*worker)->stderr_text();
  std::ifstream worker_metrics_file(dir_ + "/w.metrics");
  int worker_metrics = 0;
  ASSERT_TRUE(worker_metrics_file >> worker_metrics);

  // The worker's registration event is an INFO line in JSON.
  absl::StatusOr<std::string> line = (*worker)->WaitForOutput(
      SubprocessStream::kStderr, "registered with coordinator", absl::Seconds(30));
  ASSERT_TRUE(line.ok()) << line.status();
  const std::string json = line->substr(line->find('{'));
  absl::StatusOr<JsonValue> parsed = ParseJson(json);
  ASSERT_TRUE(parsed.ok()) << parsed.status() << ": " << json;
  EXPECT_TRUE(absl::StrContains(json, "\"level\": \"INFO\"")) << json;
  EXPECT_TRUE(absl::StrContains(json, "\"component\": \"worker\"")) << json;

  // Both endpoints parse; the coordinator sees the worker alive, the worker is registered.
  testing::PromText c;
  for (int i = 0; i < 200; ++i) {
    absl::StatusOr<testing::PromText> m = Scrape(coordinator_metrics);
    ASSERT_TRUE(m.ok()) << m.status();
    c = *std::move(m);
    if (c.Sum("sluice_coordinator_workers", {{"state", "alive"}}) == 1) break;
    absl::SleepFor(absl::Milliseconds(50));
  }
  EXPECT_EQ(c.Sum("sluice_coordinator_workers", {{"state", "alive"}}), 1);
  EXPECT_GT(c.Sum("sluice_rpc_server_handled_total",
                  {{"service", "sluice.proto.CoordinatorService"}, {"method", "WorkerHeartbeat"}}),
            0);
  absl::StatusOr<testing::PromText> w = Scrape(worker_metrics);
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ(w->Sum("sluice_worker_registered"), 1);

  ASSERT_TRUE((*worker)->Signal(SIGTERM).ok());
  ASSERT_TRUE((*coordinator)->Signal(SIGTERM).ok());
  auto wr = (*worker)->Wait(absl::Seconds(60));
  auto cr = (*coordinator)->Wait(absl::Seconds(30));
  ASSERT_TRUE(wr.ok() && cr.ok());
  EXPECT_EQ(wr->exit_code, 0) << wr->Describe();
  EXPECT_EQ(cr->exit_code, 0) << cr->Describe();
  // --log_level=warning: the coordinator logged no INFO event (a worker registering is one).
  for (absl::string_view l : absl::StrSplit(cr->stderr_text, '\n')) {
    EXPECT_FALSE(absl::StrContains(l, " INFO coordinator:")) << l;
  }
}

TEST_F(BinaryMetricsTest, BadLogFlagsAreUsageErrors) {
  SubprocessOptions o;
  o.timeout = absl::Seconds(30);
  auto r = RunSubprocess({BuildPath("bin/sluice-coordinator"), "--log_level=loud"}, o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->exit_code, 2) << r->Describe();
  EXPECT_TRUE(absl::StrContains(r->stderr_text, "--log_level")) << r->stderr_text;
  auto w = RunSubprocess({BuildPath("bin/sluice-worker"), "--coordinator=127.0.0.1:1",
                          "--log_format=xml"},
                         o);
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ(w->exit_code, 2) << w->Describe();
  EXPECT_TRUE(absl::StrContains(w->stderr_text, "--log_format")) << w->stderr_text;
}

}  // namespace
}  // namespace sluice
