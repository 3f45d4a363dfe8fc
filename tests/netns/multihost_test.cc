// Multi-host tests on one machine (label `netns`): five network namespaces joined by a bridge
// (tests/netns/netns_topology.h) stand for five hosts with their own addresses:
//
//   host 1  10.X.0.1  sluice-coordinator --host=10.X.0.1 --worker_timeout=2s (10s in test 1)
//   host 2  10.X.0.2  sluice-worker --host=10.X.0.2 --heartbeat_interval=100ms
//   host 3  10.X.0.3  sluice-worker --host=10.X.0.3
//   host 4  10.X.0.4  sluicectl run --consumer_index=0 --num_consumers=2 (trainer 0)
//   host 5  10.X.0.5  sluicectl run --consumer_index=1 --num_consumers=2 (trainer 1)
//
// The job is range(600).batch(4), DATA sharding, coordinated reads, 2 replicas per trainer. The
// workers register their namespace's address, so the trainers reach them across the bridge,
// never through loopback. What docs/SERVICE.md promises, and these tests assert:
//  - MultiHostTest.JobRunsAcrossHosts: every element exactly once across the two trainers, and
//    each trainer's steps identical to a reference run of the same job on loopback.
//  - MultiHostTest.WorkerLinkCutMidEpoch: worker 2's link is cut (its bridge port set down: no
//    TCP reset, no error, packets just vanish) after trainer 0 printed some but not all of its
//    steps. The coordinator declares worker 2 dead after --worker_timeout, its task moves to
//    worker 3, the trainers abandon their streams to worker 2 (the client's heartbeat says the
//    task moved) and finish with the very steps of the reference. Then the link comes back,
//    worker 2 heartbeats again, and it exits 0 on SIGTERM.
//
// Skipped (with the reason) where network namespaces cannot be made: not root, no `ip`, or
// `ip netns add` refused. The fixture's TearDown kills and reaps every process before deleting
// the namespaces, also after a failed assertion.
#include <signal.h>
#include <stdlib.h>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "core/util/json_value.h"
#include "gtest/gtest.h"
#include "tests/examples/subprocess.h"
#include "tests/examples/test_paths.h"
#include "tests/integration/process_cluster.h"
#include "tests/integration/step_model.h"
#include "tests/netns/netns_topology.h"

namespace sluice {
namespace {

constexpr int kCoordinatorHost = 1;
constexpr int kWorkerHosts[] = {2, 3};
constexpr int kTrainerHosts[] = {4, 5};
constexpr int64_t kElements = 600;
constexpr int64_t kBatch = 4;
constexpr int64_t kConsumers = 2;

std::string Tail(const std::string& text, size_t max = 3000) {
  return text.size() <= max ? text : absl::StrCat("...", text.substr(text.size() - max));
}

// The trainers' flags but the coordinator.
std::vector<std::string> RunArgs(const std::string& coordinator, const std::string& job,
                                 int64_t consumer) {
  return {"run",
          "--coordinator=" + coordinator,
          "--job=" + job,
          absl::StrCat("--pipeline=range(", kElements, ").batch(", kBatch, ")"),
          "--devices=CPU:0,CPU:1",
          absl::StrCat("--consumer_index=", consumer),
          absl::StrCat("--num_consumers=", kConsumers),
          "--sharding_policy=DATA",
          "--read_mode=coordinated",
          "--format=json",
          "--retry_deadline=60s",
          // A few steps per stream: the cut must land mid-epoch (the 64 MiB default budget
          // would take this small job at once).
          "--receive_budget_bytes=1024"};
}

// Each consumer's steps, from their `sluicectl run --format=json` output.
using Views = std::vector<std::vector<ModelStep>>;

// Every element of range(kElements) exactly once across the views.
void ExpectExactlyOnce(const Views& views, const std::string& what) {
  std::map<int64_t, int> count;
  for (const auto& view : views) {
    for (const ModelStep& step : view) {
      for (const auto& piece : step) {
        for (int64_t v : piece) ++count[v];
      }
    }
  }
  int64_t wrong = 0;
  for (int64_t v = 0; v < kElements; ++v) {
    if (count[v] != 1 && ++wrong <= 10) {
      ADD_FAILURE() << what << ": element " << v << " delivered " << count[v] << " times";
    }
  }
  EXPECT_EQ(wrong, 0) << what;
  EXPECT_EQ(count.size(), static_cast<size_t>(kElements)) << what << ": elements out of range";
}

// The reference: the same job on a loopback cluster of two workers (no namespaces).
absl::StatusOr<Views> ReferenceRun() {
  ProcessClusterOptions options;
  options.num_workers = 2;
  auto cluster = ProcessCluster::Start(options);
  if (!cluster.ok()) return cluster.status();
  std::vector<std::unique_ptr<Subprocess>> consumers;
  for (int64_t c = 0; c < kConsumers; ++c) {
    auto p = StartSluicectl(RunArgs((*cluster)->coordinator(), "reference", c));
    if (!p.ok()) return p.status();
    consumers.push_back(*std::move(p));
  }
  Views views;
  for (int64_t c = 0; c < kConsumers; ++c) {
    auto r = consumers[c]->Wait(absl::Seconds(120));
    if (!r.ok()) return r.status();
    if (r->exit_code != 0) {
      return absl::InternalError(absl::StrCat("reference consumer ", c, ": ", r->Describe(), "\n",
                                              r->stderr_text, (*cluster)->Logs()));
    }
    auto steps = ParseRunJson(r->stdout_text);
    if (!steps.ok()) return steps.status();
    views.push_back(*std::move(steps));
  }
  absl::Status stopped = (*cluster)->StopAll();
  if (!stopped.ok()) return stopped;
  return views;
}

// What the coordinator's GetStatus says, read from `sluicectl status --format=json`.
struct TaskView {
  std::string worker_address;
  bool finished = false;
};
struct JobView {
  bool finished = false;
  std::vector<TaskView> tasks;
};
struct ClusterView {
  std::map<std::string, bool> worker_alive;  // by address
  std::map<std::string, JobView> jobs;       // by name
  std::string json;                          // for failure messages
};

absl::StatusOr<ClusterView> ParseStatus(const std::string& text) {
  auto json = ParseJson(text);
  if (!json.ok()) return json.status();
  ClusterView view;
  view.json = text;
  const JsonValue* workers = json->Find("workers");
  const JsonValue* jobs = json->Find("jobs");
  if (workers == nullptr || jobs == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("status without workers or jobs: ", text));
  }
  for (const JsonValue& w : workers->items()) {
    const JsonValue* address = w.Find("address");
    const JsonValue* alive = w.Find("alive");
    if (address == nullptr || alive == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("worker without address or alive: ", text));
    }
    view.worker_alive[address->string_value()] = alive->bool_value();
  }
  for (const JsonValue& j : jobs->items()) {
    const JsonValue* name = j.Find("job_name");
    const JsonValue* finished = j.Find("finished");
    const JsonValue* tasks = j.Find("tasks");
    if (name == nullptr || finished == nullptr || tasks == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("job without name, finished or tasks: ", text));
    }
    JobView& job = view.jobs[name->string_value()];
    job.finished = finished->bool_value();
    for (const JsonValue& t : tasks->items()) {
      const JsonValue* address = t.Find("worker_address");
      const JsonValue* task_finished = t.Find("finished");
      if (address == nullptr || task_finished == nullptr) {
        return absl::InvalidArgumentError(absl::StrCat("task without worker_address: ", text));
      }
      job.tasks.push_back({address->string_value(), task_finished->bool_value()});
    }
  }
  return view;
}

class MultiHostTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto net = NetnsTopology::Create({.num_hosts = 5});
    if (absl::IsFailedPrecondition(net.status())) {
      GTEST_SKIP() << "cannot make network namespaces here: " << net.status().message();
    }
    ASSERT_TRUE(net.ok()) << net.status();
    net_ = *std::move(net);
    const char* tmp = std::getenv("TMPDIR");
    std::string templ = absl::StrCat(tmp != nullptr && tmp[0] != '\0' ? tmp : "/tmp",
                                     "/sluice-netns-XXXXXX");
    ASSERT_NE(mkdtemp(templ.data()), nullptr) << templ;
    dir_ = templ;
  }

  // Processes first (killed and reaped by their destructors), then the namespaces.
  void TearDown() override {
    trainers_.clear();
    workers_.clear();
    coordinator_.reset();
    net_.reset();
    if (!dir_.empty()) {
      std::error_code ignored;
      std::filesystem::remove_all(dir_, ignored);
    }
  }

  // Waits until `path` holds a port while `process` runs.
  absl::StatusOr<int> WaitForPort(const std::string& path, Subprocess& process,
                                  const std::string& name) {
    const absl::Time deadline = absl::Now() + absl::Seconds(30);
    while (true) {
      absl::StatusOr<std::string> text = ReadFileToString(path);
      int port = 0;
      if (text.ok() && absl::SimpleAtoi(absl::StripAsciiWhitespace(*text), &port) && port > 0) {
        return port;
      }
      if (!process.running() || absl::Now() > deadline) {
        return absl::DeadlineExceededError(absl::StrCat(
            name, " wrote no port to ", path, " (running: ", process.running(), "); stderr:\n",
            Tail(process.stderr_text())));
      }
      absl::SleepFor(absl::Milliseconds(20));
    }
  }

  // Coordinator on host 1 (--worker_timeout=`worker_timeout`), workers on hosts 2 and 3;
  // returns once both are registered alive.
  absl::Status StartCluster(absl::Duration worker_timeout) {
    const std::string coordinator_port_file = dir_ + "/coordinator.port";
    auto coordinator = Subprocess::Start(net_->Exec(
        kCoordinatorHost,
        {BuildPath("bin/sluice-coordinator"), "--host=" + net_->address(kCoordinatorHost),
         "--port=0", "--port_file=" + coordinator_port_file,
         absl::StrCat("--worker_timeout=", absl::ToInt64Milliseconds(worker_timeout), "ms")}));
    if (!coordinator.ok()) return coordinator.status();
    coordinator_ = *std::move(coordinator);
    auto port = WaitForPort(coordinator_port_file, *coordinator_, "sluice-coordinator");
    if (!port.ok()) return port.status();
    coordinator_address_ = absl::StrCat(net_->address(kCoordinatorHost), ":", *port);

    for (int host : kWorkerHosts) {
      auto worker = Subprocess::Start(net_->Exec(
          host, {BuildPath("bin/sluice-worker"), "--coordinator=" + coordinator_address_,
                 "--host=" + net_->address(host), "--port=0",
                 absl::StrCat("--port_file=", dir_, "/worker-", host, ".port"),
                 "--heartbeat_interval=100ms", "--buffer_bytes=512", "--drain_timeout=5s"}));
      if (!worker.ok()) return worker.status();
      workers_.push_back(*std::move(worker));
    }
    for (size_t i = 0; i < workers_.size(); ++i) {
      const int host = kWorkerHosts[i];
      auto worker_port = WaitForPort(absl::StrCat(dir_, "/worker-", host, ".port"), *workers_[i],
                                     absl::StrCat("sluice-worker on host ", host));
      if (!worker_port.ok()) return worker_port.status();
      worker_addresses_.push_back(absl::StrCat(net_->address(host), ":", *worker_port));
    }

    auto registered = WaitForStatus(
        [&](ClusterView& v) {
          for (const std::string& address : worker_addresses_) {
            auto it = v.worker_alive.find(address);
            if (it == v.worker_alive.end() || !it->second) return false;
          }
          return true;
        },
        absl::Seconds(30), "both workers registered");
    return registered.status();
  }

  // The coordinator's status, asked from trainer 0's host (the test's own process is outside every host).
  absl::StatusOr<ClusterView> Status() {
    SubprocessOptions options;
    options.timeout = absl::Seconds(30);
    auto r = RunSubprocess(
        net_->Exec(kTrainerHosts[0], {BuildPath("bin/sluicectl"), "status",
                                      "--coordinator=" + coordinator_address_, "--format=json"}),
        options);
    if (!r.ok()) return r.status();
    if (r->exit_code != 0) {
      return absl::UnavailableError(
          absl::StrCat("sluicectl status: ", r->Describe(), ": ", r->stderr_text));
    }
    return ParseStatus(r->stdout_text);
  }

  // Polls Status() until `done` holds (every 100 ms, up to `timeout`); DEADLINE_EXCEEDED
  // quoting the last status otherwise.
  absl::StatusOr<ClusterView> WaitForStatus(const std::function<bool(ClusterView&)>& done,
                                            absl::Duration timeout, const std::string& what) {
    const absl::Time deadline = absl::Now() + timeout;
    std::string last;
    while (true) {
      auto status = Status();
      if (status.ok() && done(*status)) return status;
      last = status.ok() ? status->json : status.status().ToString();
      if (absl::Now() > deadline) {
        return absl::DeadlineExceededError(absl::StrCat(
            what, " not seen within ", absl::FormatDuration(timeout), "; last status: ", last,
            "\n", Logs()));
      }
      absl::SleepFor(absl::Milliseconds(100));
    }
  }

  // Trainer c on host kTrainerHosts[c].
  absl::Status StartTrainers(const std::string& job) {
    for (int64_t c = 0; c < kConsumers; ++c) {
      std::vector<std::string> argv = {BuildPath("bin/sluicectl")};
      for (std::string& a : RunArgs(coordinator_address_, job, c)) argv.push_back(std::move(a));
      auto p = Subprocess::Start(net_->Exec(kTrainerHosts[c], argv));
      if (!p.ok()) return p.status();
      trainers_.push_back(*std::move(p));
    }
    return absl::OkStatus();
  }

  // Waits for both trainers to exit 0; their steps.
  absl::StatusOr<Views> FinishTrainers() {
    Views views;
    for (int64_t c = 0; c < kConsumers; ++c) {
      auto r = trainers_[c]->Wait(absl::Seconds(150));
      if (!r.ok()) return r.status();
      if (r->exit_code != 0) {
        return absl::InternalError(absl::StrCat("trainer ", c, " on host ", kTrainerHosts[c],
                                                ": ", r->Describe(), "\n", Tail(r->stderr_text),
                                                "\n", Logs()));
      }
      auto steps = ParseRunJson(r->stdout_text);
      if (!steps.ok()) return steps.status();
      views.push_back(*std::move(steps));
    }
    return views;
  }

  // SIGTERM to `p`; FAILED_PRECONDITION unless it exits 0 within 30 s.
  static absl::Status Stop(Subprocess& p, const std::string& name) {
    absl::Status s = p.Signal(SIGTERM);
    if (!s.ok()) return s;
    auto r = p.Wait(absl::Seconds(30));
    if (!r.ok()) return r.status();
    if (r->exit_code != 0) {
      return absl::FailedPreconditionError(absl::StrCat(name, " on SIGTERM: ", r->Describe(),
                                                        "; stderr:\n", Tail(p.stderr_text())));
    }
    return absl::OkStatus();
  }

  // Workers, then the coordinator, each must exit 0 on SIGTERM.
  void StopCluster() {
    for (size_t i = 0; i < workers_.size(); ++i) {
      absl::Status s = Stop(*workers_[i], absl::StrCat("sluice-worker on host ", kWorkerHosts[i]));
      EXPECT_TRUE(s.ok()) << s;
    }
    absl::Status s = Stop(*coordinator_, "sluice-coordinator");
    EXPECT_TRUE(s.ok()) << s;
  }

  std::string Logs() {
    std::string out;
    if (coordinator_ != nullptr) {
      absl::StrAppend(&out, "--- sluice-coordinator (host ", kCoordinatorHost, ") stderr:\n",
                      Tail(coordinator_->stderr_text()), "\n");
    }
    for (size_t i = 0; i < workers_.size(); ++i) {
      absl::StrAppend(&out, "--- sluice-worker (host ", kWorkerHosts[i], ") stderr:\n",
                      Tail(workers_[i]->stderr_text()), "\n");
    }
    return out;
  }

  std::unique_ptr<NetnsTopology> net_;
  std::string dir_;
  std::unique_ptr<Subprocess> coordinator_;
  std::string coordinator_address_;
  std::vector<std::unique_ptr<Subprocess>> workers_;
  std::vector<std::string> worker_addresses_;
  std::vector<std::unique_ptr<Subprocess>> trainers_;
};

TEST_F(MultiHostTest, JobRunsAcrossHosts) {
  auto want = ReferenceRun();
  ASSERT_TRUE(want.ok()) << want.status();
  ExpectExactlyOnce(*want, "reference");

  // A long timeout: on a loaded machine no live worker may look dead (each keeps its task).
  absl::Status started = StartCluster(absl::Seconds(10));
  ASSERT_TRUE(started.ok()) << started << "\n" << Logs();
  {
    // The workers registered their hosts' addresses, not loopback.
    auto status = Status();
    ASSERT_TRUE(status.ok()) << status.status();
    for (const auto& [address, alive] : status->worker_alive) {
      EXPECT_FALSE(absl::StartsWith(address, "127.")) << address;
    }
  }
  absl::Status trainers = StartTrainers("multihost");
  ASSERT_TRUE(trainers.ok()) << trainers;
  auto views = FinishTrainers();
  ASSERT_TRUE(views.ok()) << views.status();

  ExpectExactlyOnce(*views, "across hosts");
  for (int64_t c = 0; c < kConsumers; ++c) {
    EXPECT_EQ((*views)[c], (*want)[c]) << "trainer " << c << ":\n"
                                       << DescribeSteps((*views)[c]) << "\nreference:\n"
                                       << DescribeSteps((*want)[c]);
  }
  // Both workers served the job.
  auto status = Status();
  ASSERT_TRUE(status.ok()) << status.status();
  ASSERT_TRUE(status->jobs.contains("multihost")) << status->json;
  std::map<std::string, int> tasks_by_worker;
  for (const TaskView& t : status->jobs["multihost"].tasks) ++tasks_by_worker[t.worker_address];
  for (const std::string& address : worker_addresses_) {
    EXPECT_EQ(tasks_by_worker[address], 1) << address << "\n" << status->json;
  }
  StopCluster();
}

TEST_F(MultiHostTest, WorkerLinkCutMidEpoch) {
  auto want = ReferenceRun();
  ASSERT_TRUE(want.ok()) << want.status();
  ExpectExactlyOnce(*want, "reference");
  const size_t total_steps = (*want)[0].size();
  ASSERT_GT(total_steps, 40u);

  absl::Status started = StartCluster(absl::Seconds(2));
  ASSERT_TRUE(started.ok()) << started << "\n" << Logs();
  const std::string& cut_worker = worker_addresses_[0];  // on host kWorkerHosts[0]
  const int cut_host = kWorkerHosts[0];
  absl::Status trainers = StartTrainers("cut");
  ASSERT_TRUE(trainers.ok()) << trainers;

  // Mid-epoch: trainer 0 printed step 20. Both trainers are paused while the link is cut, so
  // that the cut lands before the end whatever the machine's speed (the workers run at most
  // --buffer_bytes ahead of them).
  auto seen = trainers_[0]->WaitForOutput(SubprocessStream::kStdout, "{\"step\": 20,",
                                          absl::Seconds(90));
  ASSERT_TRUE(seen.ok()) << seen.status() << "\n" << trainers_[0]->stderr_text() << Logs();
  for (auto& p : trainers_) ASSERT_TRUE(p->Signal(SIGSTOP).ok());
  {
    const std::string out = trainers_[0]->stdout_text();
    auto printed = ParseRunJson(out.substr(0, out.rfind('\n') + 1));
    ASSERT_TRUE(printed.ok()) << printed.status();
    EXPECT_GE(printed->size(), 21u);
    EXPECT_LT(printed->size(), total_steps) << "the cut must land mid-epoch";

    auto status = Status();
    ASSERT_TRUE(status.ok()) << status.status();
    ASSERT_TRUE(status->jobs.contains("cut")) << status->json;
    EXPECT_FALSE(status->jobs["cut"].finished) << status->json;
    bool cut_worker_has_unfinished_task = false;
    for (const TaskView& t : status->jobs["cut"].tasks) {
      if (t.worker_address == cut_worker && !t.finished) cut_worker_has_unfinished_task = true;
    }
    ASSERT_TRUE(cut_worker_has_unfinished_task) << status->json;
  }
  absl::Status cut = net_->Cut(cut_host);
  ASSERT_TRUE(cut.ok()) << cut;
  for (auto& p : trainers_) ASSERT_TRUE(p->Signal(SIGCONT).ok());

  // The coordinator declares the silent worker dead (after --worker_timeout=2s).
  auto dead = WaitForStatus(
      [&](ClusterView& v) {
        auto it = v.worker_alive.find(cut_worker);
        return it != v.worker_alive.end() && !it->second;
      },
      absl::Seconds(60), "worker " + cut_worker + " declared dead");
  ASSERT_TRUE(dead.ok()) << dead.status();

  auto views = FinishTrainers();
  ASSERT_TRUE(views.ok()) << views.status();
  ExpectExactlyOnce(*views, "with worker 2's link cut");
  for (int64_t c = 0; c < kConsumers; ++c) {
    EXPECT_EQ((*views)[c], (*want)[c]) << "trainer " << c << ":\n"
                                       << DescribeSteps((*views)[c]) << "\nreference:\n"
                                       << DescribeSteps((*want)[c]);
  }

  // The job finished on worker 3 alone: its tasks moved off the cut worker.
  auto finished = WaitForStatus(
      [](ClusterView& v) { return v.jobs.contains("cut") && v.jobs["cut"].finished; },
      absl::Seconds(30), "job 'cut' finished");
  ASSERT_TRUE(finished.ok()) << finished.status();
  for (const TaskView& t : finished->jobs["cut"].tasks) {
    EXPECT_EQ(t.worker_address, worker_addresses_[1]) << finished->json;
  }

  // The link comes back: the worker heartbeats again and is alive under its old address, and
  // it still shuts down cleanly.
  absl::Status restored = net_->Restore(cut_host);
  ASSERT_TRUE(restored.ok()) << restored;
  auto alive_again = WaitForStatus(
      [&](ClusterView& v) {
        auto it = v.worker_alive.find(cut_worker);
        return it != v.worker_alive.end() && it->second;
      },
      absl::Seconds(60), "worker " + cut_worker + " alive again");
  EXPECT_TRUE(alive_again.ok()) << alive_again.status();
  StopCluster();
}

}  // namespace
}  // namespace sluice
