// Metrics of a running cluster, scraped over HTTP during a run: an in-process coordinator and
// two workers on port 0 exporting to the process-wide registry, one consumer reading through
// DistributeDatasetFromService and scraping /metrics between its steps. Then `sluicectl status`
// (the real binary) against the same cluster: the table, --watch frames, JSON.
#include <algorithm>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "core/obs/metrics_http_server.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "server/coordinator_metrics.h"
#include "server/grpc_coordinator_service.h"
#include "sluice/service.h"
#include "sluice/strategy.h"
#include "tests/examples/subprocess.h"
#include "tests/examples/test_paths.h"
#include "tests/observability/prometheus_text.h"
#include "worker/worker_metrics.h"
#include "worker/worker_server.h"

namespace sluice {
namespace {

void Quiet(absl::string_view) {}

class ObservedCluster {
 public:
  // `finished_job_ttl`: how long the coordinator keeps a finished job (its default when unset).
  explicit ObservedCluster(int num_workers,
                           std::optional<absl::Duration> finished_job_ttl = std::nullopt) {
    CoordinatorServerOptions c;
    c.coordinator.log = Quiet;
    if (finished_job_ttl.has_value()) c.coordinator.finished_job_ttl = *finished_job_ttl;
    auto coordinator = CoordinatorServer::Start(c);
    EXPECT_TRUE(coordinator.ok()) << coordinator.status();
    coordinator_ = *std::move(coordinator);
    coordinator_metrics_ = std::make_unique<CoordinatorMetrics>(&coordinator_->coordinator());
    for (int i = 0; i < num_workers; ++i) {
      WorkerServerOptions w;
      w.coordinator_address = coordinator_->address();
      w.heartbeat_interval = absl::Milliseconds(100);
      w.buffer_bytes = size_t{1} << 20;
      w.log = Quiet;
      auto worker = WorkerServer::Start(w);
      EXPECT_TRUE(worker.ok()) << worker.status();
      workers_.push_back(*std::move(worker));
      worker_metrics_.push_back(std::make_unique<WorkerMetrics>(workers_.back().get()));
    }
    for (int i = 0; i < 2000; ++i) {
      if (std::all_of(workers_.begin(), workers_.end(),
                      [](const auto& w) { return w->registered(); })) {
        break;
      }
      absl::SleepFor(absl::Milliseconds(5));
    }
    auto http = MetricsHttpServer::Start({.port = 0});
    EXPECT_TRUE(http.ok()) << http.status();
    http_ = *std::move(http);
  }
  ~ObservedCluster() {
    http_.reset();
    worker_metrics_.clear();
    coordinator_metrics_.reset();
    workers_.clear();
    coordinator_.reset();
  }

  std::string address() const { return coordinator_->address(); }
  const WorkerServer& worker(int i) const { return *workers_[i]; }

  absl::StatusOr<testing::PromText> Scrape() const {
    httplib::Client client("127.0.0.1", http_->port());
    client.set_connection_timeout(5);
    client.set_read_timeout(10);
    auto r = client.Get("/metrics");
    if (!r) return absl::UnavailableError(httplib::to_string(r.error()));
    if (r->status != 200) return absl::InternalError(absl::StrCat("HTTP ", r->status));
    return testing::ParsePromText(r->body);
  }

 private:
  std::unique_ptr<CoordinatorServer> coordinator_;
  std::unique_ptr<CoordinatorMetrics> coordinator_metrics_;
  std::vector<std::unique_ptr<WorkerServer>> workers_;
  std::vector<std::unique_ptr<WorkerMetrics>> worker_metrics_;
  std::unique_ptr<MetricsHttpServer> http_;
};

// Reads the whole job as one consumer with one replica; calls after_step(s) after step s.
absl::StatusOr<int64_t> ReadAll(const std::string& coordinator, const Dataset& ds,
                                const std::string& job, std::function<void(int64_t)> after_step) {
  auto strategy = MirroredStrategy::Create({"CPU:0"});
  if (!strategy.ok()) return strategy.status();
  ServiceOptions options;
  options.coordinator_address = coordinator;
  options.job_name = job;
  options.sharding_policy = ServiceShardingPolicy::kData;
  // A few steps per stream (the 64 MiB default would take this small job at once): deliveries
  // keep growing between the scrapes taken during the run.
  options.receive_budget_bytes = 1024;
  auto dist = DistributeDatasetFromService(*strategy, ds, options);
  if (!dist.ok()) return dist.status();
  auto it = dist->MakeIterator();
  if (!it.ok()) return it.status();
  int64_t steps = 0;
  for (; steps < 100000; ++steps) {
    absl::StatusOr<PerReplica<Element>> x = it->GetNext();
    if (!x.ok()) {
      if (x.status().code() != absl::StatusCode::kOutOfRange) return x.status();
      break;
    }
    if (after_step) after_step(steps);
  }
  return steps;
}

// Every counter sample of `before` is in `after` with a value at least as large.
void ExpectCountersMonotone(const testing::PromText& before, const testing::PromText& after) {
  std::map<std::string, double> later;
  auto key = [](const testing::PromSample& s) {
    std::string k = s.name;
    for (const auto& [n, v] : s.labels) absl::StrAppend(&k, "|", n, "=", v);
    return k;
  };
  for (const auto& s : after.samples) later[key(s)] = s.value;
  int checked = 0;
  for (const auto& s : before.samples) {
    auto type = before.types.find(s.name);
    if (type == before.types.end() || type->second != "counter") continue;
    auto it = later.find(key(s));
    // Per-task samples of a task a worker dropped may vanish; those still there never shrink.
    if (it == later.end()) continue;
    EXPECT_GE(it->second, s.value) << key(s);
    ++checked;
  }
  EXPECT_GT(checked, 0);
}

TEST(ClusterMetricsTest, ScrapedAndParsedDuringARun) {
  ObservedCluster cluster(2);
  constexpr int64_t kSteps = 120;
  const Dataset ds = Dataset::Range(kSteps * 4).Batch(4);
  std::vector<testing::PromText> scrapes;
  absl::StatusOr<int64_t> read = ReadAll(cluster.address(), ds, "observed", [&](int64_t s) {
    if (s == 10 || s == 80) {
      absl::StatusOr<testing::PromText> m = cluster.Scrape();
      ASSERT_TRUE(m.ok()) << m.status();
      scrapes.push_back(*std::move(m));
    }
  });
  ASSERT_TRUE(read.ok()) << read.status();
  ASSERT_EQ(*read, kSteps);
  ASSERT_EQ(scrapes.size(), 2u);

  // During the run: steps flowed, the workers and buffers are visible. (A step is counted
  // delivered when its write completes on the worker, which can come after the consumer read
  // it: the 11 steps read are not all counted yet; the end of the run checks the exact count.)
  const testing::PromText& first = scrapes[0];
  EXPECT_GT(first.Sum("sluice_worker_steps_delivered_total"), 0);
  EXPECT_GT(first.Sum("sluice_worker_bytes_delivered_total"), 0);
  EXPECT_GE(first.Sum("sluice_worker_task_steps_produced_total"), 11);
  EXPECT_EQ(first.Sum("sluice_coordinator_workers", {{"state", "alive"}}), 2);
  EXPECT_EQ(first.Count("sluice_coordinator_worker_heartbeat_age_seconds"), 2);
  EXPECT_EQ(first.Sum("sluice_worker_registered"), 2);
  EXPECT_EQ(first.Sum("sluice_worker_buffer_capacity_bytes"), 2.0 * (1 << 20));
  EXPECT_GE(first.Count("sluice_worker_consumer_lag_steps"), 1);
  for (const auto& s : first.samples) {
    if (s.name == "sluice_worker_consumer_lag_steps" ||
        s.name == "sluice_coordinator_worker_heartbeat_age_seconds") {
      EXPECT_GE(s.value, 0) << s.name;
    }
  }
  EXPECT_EQ(first.Sum("sluice_coordinator_jobs", {{"state", "running"}}), 1);
  EXPECT_GT(first.Sum("sluice_rpc_server_handled_total",
                      {{"method", "WorkerHeartbeat"}, {"code", "OK"}}),
            0);
  EXPECT_GT(first.Sum("sluice_rpc_server_started_total", {{"method", "StreamSteps"}}), 0);
  EXPECT_EQ(first.types.at("sluice_worker_steps_delivered_total"), "counter");
  EXPECT_EQ(first.types.at("sluice_worker_buffer_bytes"), "gauge");
  ExpectCountersMonotone(scrapes[0], scrapes[1]);
  EXPECT_GT(scrapes[1].Sum("sluice_worker_steps_delivered_total"),
            scrapes[0].Sum("sluice_worker_steps_delivered_total"));

  // At the end: what the workers delivered is what the consumer read, and the coordinator
  // learns it from the heartbeats (bounded wait for the last write's count and heartbeat).
  testing::PromText last;
  for (int i = 0; i < 300; ++i) {
    absl::StatusOr<testing::PromText> m = cluster.Scrape();
    ASSERT_TRUE(m.ok()) << m.status();
    last = *std::move(m);
    if (last.Sum("sluice_worker_steps_delivered_total") == kSteps &&
        last.Sum("sluice_coordinator_job_steps_delivered_total", {{"name", "observed"}}) ==
            kSteps &&
        last.Sum("sluice_coordinator_job_progress_ratio", {{"name", "observed"}}) == 1) {
      break;
    }
    absl::SleepFor(absl::Milliseconds(50));
  }
  EXPECT_EQ(last.Sum("sluice_worker_steps_delivered_total"), kSteps);
  EXPECT_EQ(last.Sum("sluice_worker_task_steps_produced_total"), kSteps);
  EXPECT_EQ(last.Sum("sluice_coordinator_job_steps_delivered_total", {{"name", "observed"}}),
            kSteps);
  EXPECT_EQ(last.Sum("sluice_coordinator_job_progress_ratio", {{"name", "observed"}}), 1);
  EXPECT_EQ(last.Sum("sluice_coordinator_tasks", {{"state", "finished"}}), 2);
  ExpectCountersMonotone(scrapes[1], last);
}

TEST(ClusterMetricsTest, AWorkersTotalsOutliveTheTasksItDrops) {
  // The coordinator removes a finished job at once, so the workers drop its tasks: their
  // per-task series end, and each worker's task="stopped" series keeps what they delivered.
  ObservedCluster cluster(2, absl::ZeroDuration());
  constexpr int64_t kSteps = 40;
  absl::StatusOr<int64_t> read =
      ReadAll(cluster.address(), Dataset::Range(kSteps * 4).Batch(4), "dropped", nullptr);
  ASSERT_TRUE(read.ok()) << read.status();
  ASSERT_EQ(*read, kSteps);
  testing::PromText m;
  for (int i = 0; i < 300; ++i) {  // bounded wait for both workers to drop their task
    absl::StatusOr<testing::PromText> scrape = cluster.Scrape();
    ASSERT_TRUE(scrape.ok()) << scrape.status();
    m = *std::move(scrape);
    if (m.Sum("sluice_worker_tasks") == 0) break;
    absl::SleepFor(absl::Milliseconds(50));
  }
  ASSERT_EQ(m.Sum("sluice_worker_tasks"), 0);
  EXPECT_EQ(m.Count("sluice_worker_buffer_bytes"), 0);  // no task's series is left
  EXPECT_EQ(m.Sum("sluice_worker_steps_delivered_total", {{"task", "stopped"}}), kSteps);
  EXPECT_EQ(m.Sum("sluice_worker_steps_delivered_total"), kSteps);
  EXPECT_EQ(m.Sum("sluice_worker_task_steps_produced_total", {{"task", "stopped"}}), kSteps);
  EXPECT_GT(m.Sum("sluice_worker_bytes_delivered_total", {{"task", "stopped"}}), 0);
}

absl::StatusOr<SubprocessResult> Sluicectl(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {BuildPath("bin/sluicectl")};
  argv.insert(argv.end(), args.begin(), args.end());
  SubprocessOptions o;
  o.timeout = absl::Seconds(60);
  return RunSubprocess(argv, o);
}

TEST(SluicectlStatusTest, TableWatchAndJson) {
  ObservedCluster cluster(2);
  const Dataset ds = Dataset::Range(40).Batch(4);
  absl::StatusOr<int64_t> read = ReadAll(cluster.address(), ds, "table-job", nullptr);
  ASSERT_TRUE(read.ok()) << read.status();
  const std::string coordinator = "--coordinator=" + cluster.address();

  // Bounded wait until the heartbeats reported every delivered step and finished the job.
  std::string table;
  for (int i = 0; i < 200; ++i) {
    absl::StatusOr<SubprocessResult> r = Sluicectl({"status", coordinator});
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_EQ(r->exit_code, 0) << r->Describe() << r->stderr_text;
    table = r->stdout_text;
    if (absl::StrContains(table, "100%") && absl::StrContains(table, " 10 ")) break;
    absl::SleepFor(absl::Milliseconds(50));
  }
  int worker_rows = 0;
  bool job_row = false;
  for (absl::string_view line : absl::StrSplit(table, '\n')) {
    for (int w = 0; w < 2; ++w) {
      if (absl::StrContains(line, cluster.worker(w).address()) && absl::StrContains(line, " yes ")) {
        ++worker_rows;
      }
    }
    if (absl::StrContains(line, "table-job")) {
      job_row = true;
      for (const char* want : {"DATA", "coordinated", "2/2", "100%", " 10 ", " - ", "yes"}) {
        EXPECT_TRUE(absl::StrContains(line, want)) << want << " in: " << line;
      }
    }
  }
  EXPECT_EQ(worker_rows, 2) << table;
  EXPECT_TRUE(job_row) << table;
  for (const char* header : {"WORKERS", "HEARTBEAT", "JOBS", "PROGRESS", "STEPS DELIVERED",
                             "STEPS/S"}) {
    EXPECT_TRUE(absl::StrContains(table, header)) << header << " in:\n" << table;
  }

  // --watch with --watch_count=2: two frames, each after a clear-screen, the second with a
  // throughput (0.0 steps/s: the job is done).
  absl::StatusOr<SubprocessResult> watch =
      Sluicectl({"status", coordinator, "--watch", "--interval=200ms", "--watch_count=2"});
  ASSERT_TRUE(watch.ok()) << watch.status();
  ASSERT_EQ(watch->exit_code, 0) << watch->Describe() << watch->stderr_text;
  const std::vector<std::string> frames = absl::StrSplit(watch->stdout_text, "\x1b[H\x1b[2J");
  ASSERT_EQ(frames.size(), 3u) << watch->stdout_text;  // "" before the first clear
  EXPECT_TRUE(frames[0].empty());
  for (int f = 1; f <= 2; ++f) {
    EXPECT_TRUE(absl::StrContains(frames[f], "table-job")) << frames[f];
    EXPECT_TRUE(absl::StrContains(frames[f], absl::StrCat("frame ", f, " of 2"))) << frames[f];
  }
  std::string second_row;
  for (absl::string_view line : absl::StrSplit(frames[2], '\n')) {
    if (absl::StrContains(line, "table-job")) second_row = std::string(line);
  }
  EXPECT_TRUE(absl::StrContains(second_row, " 0.0 ")) << second_row;

  // JSON keeps its shape and gains the progress counts.
  absl::StatusOr<SubprocessResult> json = Sluicectl({"status", coordinator, "--format=json"});
  ASSERT_TRUE(json.ok()) << json.status();
  EXPECT_TRUE(absl::StrContains(json->stdout_text, "\"steps_delivered\": 10")) << json->stdout_text;

  // Bad watch flags are usage errors.
  absl::StatusOr<SubprocessResult> bad =
      Sluicectl({"status", coordinator, "--watch", "--interval=0s"});
  ASSERT_TRUE(bad.ok());
  EXPECT_NE(bad->exit_code, 0);
}

}  // namespace
}  // namespace sluice
