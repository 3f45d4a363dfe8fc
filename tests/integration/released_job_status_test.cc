// How an operator sees a job's end, with the real sluice-coordinator and sluicectl (issue 28,
// part relfield; docs/SERVICE.md, "Consumers that release their job"): `sluicectl status`, as
// a table and as JSON, shows a job whose consumer released it as `released` and one that
// failed with CANCELLED as `failed`, from the coordinator's JobStatus.released and not from
// the error's code; both stay so after the coordinator is SIGKILLed and restarted on its
// journal (--snapshot_every=2: a snapshot every two records, so that restarts read snapshots
// as well as records).
//
// The test process is the worker and the consumer, over the coordinator's own RPCs
// (ClientHeartbeat then ReleaseConsumer, as a consumer that exits cleanly). No worker can fail
// a job with CANCELLED (its pipeline's CANCELLED is transient: handed back; the coordinator
// refuses it as a failure), so the failed job's end is written into the coordinator's journal
// while it is down, as the coordinator journals a failure (a RANGES job whose plan's read was
// cancelled carries CANCELLED), and the restarted coordinator replays it.
//
// Every wait is bounded; every process is stopped (ProcessCluster, Subprocess destructors).
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "core/util/json_value.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "grpcpp/grpcpp.h"
#include "proto/coordinator.grpc.pb.h"
#include "proto/journal.pb.h"
#include "server/coordinator_state.h"
#include "server/journal.h"
#include "tests/integration/process_cluster.h"

namespace sluice {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

// The worker this test plays: an address nothing listens on (the coordinator never calls its
// workers; consumers would, and there are none).
constexpr char kWorker[] = "127.0.0.1:9";

class ReleasedJobStatusTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ProcessClusterOptions o;
    o.num_workers = 0;
    o.work_dir = true;
    o.coordinator_flags = {"--snapshot_every=2"};
    auto cluster = ProcessCluster::Start(o);
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = *std::move(cluster);
    Connect();
  }

  void Connect() {
    stub_ = proto::CoordinatorService::NewStub(
        grpc::CreateChannel(cluster_->coordinator(), grpc::InsecureChannelCredentials()));
  }

  // One unary RPC of the coordinator, with a 10 s deadline.
  template <typename Req, typename Resp>
  absl::Status Call(grpc::Status (proto::CoordinatorService::Stub::*method)(
                        grpc::ClientContext*, const Req&, Resp*),
                    Req req, Resp* resp) {
    req.set_wire_version(proto::WIRE_VERSION_1);
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
    grpc::Status s = (stub_.get()->*method)(&context, req, resp);
    return absl::Status(static_cast<absl::StatusCode>(s.error_code()), s.error_message());
  }

  // A heartbeat of the worker running `active`.
  proto::WorkerHeartbeatResponse Beat(const std::vector<int64_t>& active) {
    proto::WorkerHeartbeatRequest req;
    req.set_worker_address(kWorker);
    for (int64_t t : active) req.add_active_task_ids(t);
    proto::WorkerHeartbeatResponse resp;
    absl::Status s = Call(&proto::CoordinatorService::Stub::WorkerHeartbeat, req, &resp);
    EXPECT_TRUE(s.ok()) << s;
    return resp;
  }

  // An anonymous job of one consumer over an endless pipeline, its one task handed to the
  // worker: (job, task).
  std::pair<int64_t, int64_t> MakeJob(const std::string& dataset_id) {
    proto::GetOrCreateJobRequest req;
    proto::JobOptions* o = req.mutable_options();
    o->set_dataset_id(dataset_id);
    o->set_num_consumers(1);
    o->set_replicas_per_consumer(1);
    o->set_sharding_policy(proto::SHARDING_OFF);
    o->set_num_tasks(1);
    proto::GetOrCreateJobResponse resp;
    absl::Status s = Call(&proto::CoordinatorService::Stub::GetOrCreateJob, req, &resp);
    EXPECT_TRUE(s.ok()) << s;
    const proto::WorkerHeartbeatResponse beat = Beat(tasks_);
    for (const proto::TaskDef& t : beat.new_tasks()) {
      if (t.job_id() == resp.job_id()) {
        tasks_.push_back(t.task_id());
        return {resp.job_id(), t.task_id()};
      }
    }
    ADD_FAILURE() << "job " << resp.job_id() << " has no task on the worker";
    return {resp.job_id(), 0};
  }

  // `sluicectl status`: the FINISHED column of each job's row in the table, and each job's
  // "released" in the JSON, as "job=value" lines.
  std::string Shown() {
    auto table = RunSluicectl({"status", "--coordinator=" + cluster_->coordinator()});
    auto json = RunSluicectl(
        {"status", "--coordinator=" + cluster_->coordinator(), "--format=json"});
    if (!table.ok() || !json.ok() || table->exit_code != 0 || json->exit_code != 0) {
      ADD_FAILURE() << "sluicectl status failed: "
                    << (table.ok() ? table->stderr_text : table.status().ToString())
                    << (json.ok() ? json->stderr_text : json.status().ToString());
      return "";
    }
    std::string out;
    bool jobs = false;
    for (absl::string_view line : absl::StrSplit(table->stdout_text, '\n')) {
      if (absl::StartsWith(line, "ID  ")) jobs = absl::StrContains(line, "FINISHED");
      if (!jobs || line.empty() || !absl::ascii_isdigit(line[0])) {
        if (line.empty()) jobs = false;
        continue;
      }
      const std::vector<absl::string_view> cells =
          absl::StrSplit(line, ' ', absl::SkipWhitespace());
      absl::StrAppend(&out, "table ", cells.front(), "=", cells.back(), "\n");
    }
    absl::StatusOr<JsonValue> parsed = ParseJson(json->stdout_text);
    if (!parsed.ok()) {
      ADD_FAILURE() << parsed.status() << ": " << json->stdout_text;
      return out;
    }
    for (const JsonValue& j : (*parsed)["jobs"].items()) {
      const JsonValue* released = j.Find("released");
      absl::StrAppend(&out, "json ", j["job_id"].int_value().value_or(-1), "=",
                      released == nullptr ? "absent" : (released->bool_value() ? "true" : "false"),
                      "\n");
    }
    return out;
  }

  std::unique_ptr<ProcessCluster> cluster_;
  std::unique_ptr<proto::CoordinatorService::Stub> stub_;
  std::vector<int64_t> tasks_;  // every task handed to the worker
};

TEST_F(ReleasedJobStatusTest, ReleasedShowsReleasedAndACancelledFailureShowsFailed) {
  proto::RegisterDatasetRequest reg;
  reg.set_pipeline("range(1000000).repeat().batch(4)");
  proto::RegisterDatasetResponse registered;
  ASSERT_TRUE(
      Call(&proto::CoordinatorService::Stub::RegisterDataset, reg, &registered).ok());
  Beat({});
  const auto [failing, failing_task] = MakeJob(registered.dataset_id());
  const auto [released, released_task] = MakeJob(registered.dataset_id());
  ASSERT_NE(failing_task, 0);
  ASSERT_NE(released_task, 0);

  // The consumer of `released` reads (its heartbeat hands it its secret), then exits cleanly.
  proto::ClientHeartbeatRequest hb;
  hb.set_job_id(released);
  proto::ClientHeartbeatResponse hb_resp;
  ASSERT_TRUE(Call(&proto::CoordinatorService::Stub::ClientHeartbeat, hb, &hb_resp).ok());
  proto::ReleaseConsumerRequest rel;
  rel.set_job_id(released);
  rel.set_consumer_secret(hb_resp.consumer_secret());
  proto::ReleaseConsumerResponse rel_resp;
  absl::Status s = Call(&proto::CoordinatorService::Stub::ReleaseConsumer, rel, &rel_resp);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_TRUE(rel_resp.job_finished());
  EXPECT_THAT(cluster_->CoordinatorLog(),
              HasSubstr(absl::StrCat("job ", released, " released by its consumers")));

  // `failing` fails with CANCELLED, journaled as the coordinator journals a failure.
  ASSERT_TRUE(cluster_->KillCoordinator().ok());
  {
    CoordinatorState replayed;
    JournalOptions o;
    o.dir = cluster_->work_dir();
    auto journal = Journal::Open(o, &replayed);
    ASSERT_TRUE(journal.ok()) << journal.status();
    proto::Update end;
    end.mutable_fail_job()->set_job_id(failing);
    end.mutable_fail_job()->set_code(static_cast<int>(absl::StatusCode::kCancelled));
    end.mutable_fail_job()->set_message(
        absl::StrCat("job ", failing, " cannot make its ranges: read of /data/x: cancelled"));
    end.mutable_fail_job()->set_released(false);
    ASSERT_TRUE((*journal)->Append({end}).ok());
  }
  ASSERT_TRUE(cluster_->RestartCoordinator().ok());
  Connect();

  auto status = cluster_->Status();
  ASSERT_TRUE(status.ok()) << status.status();
  ASSERT_EQ(status->jobs_size(), 2) << status->DebugString();
  for (const proto::JobStatus& j : status->jobs()) {
    EXPECT_TRUE(j.finished()) << j.DebugString();
    EXPECT_THAT(j.error(), StartsWith("CANCELLED: ")) << j.DebugString();
    EXPECT_EQ(j.released(), j.job_id() == released) << j.DebugString();
  }
  const std::string expected =
      absl::StrCat("table ", failing, "=failed\ntable ", released, "=released\njson ", failing,
                   "=false\njson ", released, "=true\n");
  EXPECT_EQ(Shown(), expected) << cluster_->Logs();

  // Another crash and restart (the journal now starts with a snapshot): the same.
  ASSERT_TRUE(cluster_->KillCoordinator().ok());
  ASSERT_TRUE(cluster_->RestartCoordinator().ok());
  Connect();
  EXPECT_EQ(Shown(), expected) << cluster_->Logs();
  absl::Status stopped = cluster_->StopAll();
  EXPECT_TRUE(stopped.ok()) << stopped;
}

}  // namespace
}  // namespace sluice
