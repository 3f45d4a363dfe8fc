// The coordinator restarting with its journal (docs/SERVICE.md, "Journal and restart"): an
// in-process cluster on loopback (coordinator with a work dir, workers, consumers through
// DistributeDatasetFromService) whose coordinator is stopped mid-job and started again on the
// same port with the same work dir; and the real sluice-coordinator refusing a corrupt journal.
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/grpc_coordinator_service.h"
#include "server/journal.h"
#include "sluice/service.h"
#include "sluice/strategy.h"
#include "tests/examples/subprocess.h"
#include "worker/worker_server.h"

namespace sluice {
namespace {

using ::testing::HasSubstr;

void Quiet(absl::string_view) {}

std::string FreshDir(const std::string& name) {
  const std::string dir = absl::StrCat(::testing::TempDir(), "/sluice_restart_", getpid(), "_",
                                       name);
  std::system(absl::StrCat("rm -rf '", dir, "'").c_str());
  return dir;
}

class Cluster {
 public:
  Cluster(int num_workers, std::string work_dir) : work_dir_(std::move(work_dir)) {
    StartCoordinator(0);
    for (int i = 0; i < num_workers; ++i) {
      WorkerServerOptions w;
      w.coordinator_address = address();
      w.heartbeat_interval = absl::Milliseconds(50);
      w.max_backoff = absl::Milliseconds(200);
      w.buffer_bytes = 256;  // a few steps ahead: the job is still running at the restart
      w.log = Quiet;
      auto worker = WorkerServer::Start(w);
      EXPECT_TRUE(worker.ok()) << worker.status();
      if (worker.ok()) workers_.push_back(*std::move(worker));
    }
    for (int i = 0; i < 2000; ++i) {
      if (std::all_of(workers_.begin(), workers_.end(),
                      [](const auto& w) { return w->registered(); })) {
        break;
      }
      absl::SleepFor(absl::Milliseconds(5));
    }
    for (const auto& w : workers_) EXPECT_TRUE(w->registered());
  }

  void StartCoordinator(int port) {
    CoordinatorServerOptions c;
    c.port = port;
    c.coordinator.worker_timeout = absl::Seconds(10);
    c.coordinator.work_dir = work_dir_;
    c.coordinator.snapshot_every = 5;  // replays a snapshot and a segment
    c.coordinator.log = Quiet;
    // The old server's port can take a moment to be free again.
    for (int i = 0; i < 100; ++i) {
      auto server = CoordinatorServer::Start(c);
      if (server.ok()) {
        absl::MutexLock lock(&mu_);
        coordinator_ = *std::move(server);
        port_ = coordinator_->port();
        return;
      }
      if (server.status().code() != absl::StatusCode::kUnavailable) {
        ADD_FAILURE() << server.status();
        return;
      }
      absl::SleepFor(absl::Milliseconds(50));
    }
    ADD_FAILURE() << "cannot start the coordinator again on port " << port;
  }

  // Stops the coordinator (as if its process died), waits `down`, starts a new one on the same
  // port with the same work dir. Returns GetStatus just before the stop and just after.
  std::pair<proto::GetStatusResponse, proto::GetStatusResponse> Restart(absl::Duration down) {
    std::pair<proto::GetStatusResponse, proto::GetStatusResponse> out;
    std::unique_ptr<CoordinatorServer> old;
    {
      absl::MutexLock lock(&mu_);
      old = std::move(coordinator_);
    }
    old->Shutdown(absl::ZeroDuration());
    EXPECT_TRUE(old->coordinator().GetStatus({}, &out.first).ok());
    old.reset();
    absl::SleepFor(down);
    StartCoordinator(port_);
    absl::MutexLock lock(&mu_);
    if (coordinator_ != nullptr) {
      EXPECT_TRUE(coordinator_->coordinator().GetStatus({}, &out.second).ok());
    }
    return out;
  }

  std::string address() const { return absl::StrCat("127.0.0.1:", port_); }

 private:
  const std::string work_dir_;
  absl::Mutex mu_;
  std::unique_ptr<CoordinatorServer> coordinator_;
  int port_ = 0;
  std::vector<std::unique_ptr<WorkerServer>> workers_;
};

// Per consumer: per step, per local replica, the values.
using Steps = std::vector<std::vector<std::vector<int64_t>>>;

std::vector<Steps> ConsumeAll(const std::string& coordinator, const Dataset& ds,
                              ServiceOptions options, int64_t consumers, int64_t replicas,
                              const std::function<void(int64_t c, int64_t s)>& after_step) {
  std::vector<Steps> results(static_cast<size_t>(consumers));
  std::vector<std::thread> threads;
  for (int64_t c = 0; c < consumers; ++c) {
    threads.emplace_back([&, c] {
      std::vector<std::string> devices;
      for (int64_t r = 0; r < replicas; ++r) devices.push_back(absl::StrCat("CPU:", r));
      auto strategy = MirroredStrategy::Create(devices);
      ASSERT_TRUE(strategy.ok()) << strategy.status();
      ServiceOptions o = options;
      o.coordinator_address = coordinator;
      o.consumer_index = c;
      o.num_consumers = consumers;
      auto dist = DistributeDatasetFromService(*strategy, ds, o);
      ASSERT_TRUE(dist.ok()) << dist.status();
      auto it = dist->MakeIterator();
      ASSERT_TRUE(it.ok()) << it.status();
      for (int64_t s = 0; s < 100000; ++s) {
        absl::StatusOr<PerReplica<Element>> x = it->GetNext();
        if (!x.ok()) {
          EXPECT_EQ(x.status().code(), absl::StatusCode::kOutOfRange) << x.status();
          break;
        }
        std::vector<std::vector<int64_t>> step;
        for (const Element& e : x->values()) {
          const Tensor& t = e.leaf();
          step.emplace_back(t.data<int64_t>(), t.data<int64_t>() + t.num_elements());
        }
        results[c].push_back(std::move(step));
        if (after_step) after_step(c, s);
      }
    });
  }
  for (auto& t : threads) t.join();
  return results;
}

void ExpectExactlyOnce(const std::vector<Steps>& results, int64_t n) {
  std::map<int64_t, int> count;
  for (const Steps& r : results) {
    for (const auto& step : r) {
      for (const auto& piece : step) {
        for (int64_t v : piece) ++count[v];
      }
    }
  }
  EXPECT_EQ(count.size(), static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) EXPECT_EQ(count[i], 1) << "element " << i;
}

// The jobs, tasks and datasets GetStatus shows (heartbeat ages left out).
void ExpectSameJobs(const proto::GetStatusResponse& a, const proto::GetStatusResponse& b) {
  EXPECT_EQ(a.num_datasets(), b.num_datasets());
  ASSERT_EQ(a.jobs_size(), b.jobs_size());
  for (int i = 0; i < a.jobs_size(); ++i) {
    // Progress (steps produced and delivered) is what workers report in heartbeats, not
    // journaled state: the new coordinator has it again after the workers' next heartbeats,
    // which may or may not have come when the status is taken. Everything else must be equal.
    proto::JobStatus ja = a.jobs(i), jb = b.jobs(i);
    for (proto::JobStatus* j : {&ja, &jb}) {
      j->clear_steps_delivered();
      j->clear_bytes_delivered();
      j->clear_steps_produced();
      // Likewise whether a task's current worker produced a step since its hand-over.
      for (proto::TaskInfo& t : *j->mutable_tasks()) t.clear_progressed_on_worker();
    }
    EXPECT_EQ(ja.DebugString(), jb.DebugString());
  }
  ASSERT_EQ(a.workers_size(), b.workers_size());
  for (int i = 0; i < a.workers_size(); ++i) {
    EXPECT_EQ(a.workers(i).worker_id(), b.workers(i).worker_id());
    EXPECT_EQ(a.workers(i).address(), b.workers(i).address());
    EXPECT_EQ(a.workers(i).alive(), b.workers(i).alive());
    EXPECT_EQ(std::vector<int64_t>(a.workers(i).task_ids().begin(), a.workers(i).task_ids().end()),
              std::vector<int64_t>(b.workers(i).task_ids().begin(), b.workers(i).task_ids().end()));
  }
}

void RunRestartTest(ServiceShardingPolicy policy, const std::string& name) {
  constexpr int64_t kN = 800, kC = 2, kR = 2;
  const Dataset ds = Dataset::Range(kN).Batch(4);
  ServiceOptions options;
  options.job_name = name;
  options.sharding_policy = policy;
  options.receive_budget_bytes = 512;  // about two steps per stream

  // Without a restart.
  std::vector<Steps> baseline;
  {
    Cluster cluster(3, FreshDir(name + "_baseline"));
    baseline = ConsumeAll(cluster.address(), ds, options, kC, kR, nullptr);
  }
  ExpectExactlyOnce(baseline, kN);

  Cluster cluster(3, FreshDir(name));
  std::atomic<bool> restarted{false};
  std::pair<proto::GetStatusResponse, proto::GetStatusResponse> status;
  auto results = ConsumeAll(cluster.address(), ds, options, kC, kR, [&](int64_t c, int64_t s) {
    if (c == 0 && s == 15 && !restarted.exchange(true)) {
      status = cluster.Restart(absl::Milliseconds(500));
    }
  });
  ASSERT_TRUE(restarted);
  // The restarted coordinator knows what the old one knew, and the job was not over yet.
  ExpectSameJobs(status.first, status.second);
  ASSERT_EQ(status.first.jobs_size(), 1);
  EXPECT_FALSE(status.first.jobs(0).finished());
  ExpectExactlyOnce(results, kN);
  if (policy != ServiceShardingPolicy::kDynamic) {
    // Deterministic assignment: exactly the run without the restart.
    EXPECT_EQ(results, baseline);
  } else {
    // Which worker takes which split is a race, but each consumer gets as many steps.
    EXPECT_EQ(results[0].size(), results[1].size());
  }
}

TEST(CoordinatorRestartTest, ACoordinatedJobContinuesAcrossARestartExactlyOnce) {
  RunRestartTest(ServiceShardingPolicy::kData, "data");
}

TEST(CoordinatorRestartTest, ADynamicJobKeepsItsSplitsAcrossARestart) {
  RunRestartTest(ServiceShardingPolicy::kDynamic, "dynamic");
}

// ----- The binary.

std::string CoordinatorBinary() {
  const char* dir = std::getenv("SLUICE_BUILD_DIR");
  return absl::StrCat(dir != nullptr ? dir : "build", "/bin/sluice-coordinator");
}

TEST(CoordinatorRestartTest, TheBinaryRefusesACorruptJournalNamingFileAndOffset) {
  // A dependency of this test target: missing is a broken build, not a reason to skip.
  ASSERT_EQ(access(CoordinatorBinary().c_str(), X_OK), 0) << CoordinatorBinary() << " not built";
  const std::string dir = FreshDir("binary");
  {
    // Two good records then one with a bad checksum, then one more: corruption in the middle.
    CoordinatorOptions o;
    o.work_dir = dir;
    o.log = Quiet;
    auto c = Coordinator::Create(o);
    ASSERT_TRUE(c.ok()) << c.status();
    for (const char* p : {"range(10).batch(2)", "range(20).batch(2)", "range(30).batch(2)"}) {
      proto::RegisterDatasetRequest req;
      req.set_wire_version(proto::WIRE_VERSION_1);
      req.set_pipeline(p);
      proto::RegisterDatasetResponse resp;
      ASSERT_TRUE((*c)->RegisterDataset(req, &resp).ok());
    }
  }
  const std::string segment = absl::StrCat(dir, "/", Journal::SegmentName(0));
  std::string data;
  {
    std::ifstream in(segment, std::ios::binary);
    data.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  ASSERT_GT(data.size(), 40u);
  auto decoded = DecodeJournalRecords(data, segment, false);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  ASSERT_EQ(decoded->records.size(), 3u);
  const uint64_t offset = decoded->records[1].offset;
  data[offset + kJournalRecordHeaderBytes + 2] ^= 0x40;
  {
    std::ofstream out(segment, std::ios::binary | std::ios::trunc);
    out << data;
  }
  SubprocessOptions run;
  run.timeout = absl::Seconds(60);
  auto r = RunSubprocess({CoordinatorBinary(), "--port=0", absl::StrCat("--work_dir=", dir)}, run);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_NE(r->exit_code, 0);
  EXPECT_THAT(r->stderr_text, HasSubstr(segment));
  EXPECT_THAT(r->stderr_text, HasSubstr(absl::StrCat("byte offset ", offset)));
}

}  // namespace
}  // namespace sluice
