#include "server/coordinator.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <new>
#include <atomic>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/data/plugin_loader.h"
#include "sluice/plugin_api.h"
#include "tests/core/crafted_tar.h"
#include "absl/synchronization/notification.h"
#include "core/data/distribute/distribute_spec.h"
#include "core/tensor/proto_convert.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"
#include "tests/server/server_test_util.h"

namespace sluice {
namespace {

using ::google::protobuf::util::MessageDifferencer;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;
using ::testing::UnorderedElementsAre;
using server_test::Filenames;
using server_test::RunValues;

class CoordinatorTest : public ::testing::Test {
 protected:
  CoordinatorTest() {
    CoordinatorOptions options;
    options.clock = &clock_;
    options.worker_timeout = absl::Seconds(10);
    options.log = [this](absl::string_view line) { log_.emplace_back(line); };
    coordinator_ = Coordinator::Create(options).value();
  }

  std::string Register(const std::string& pipeline) {
    proto::RegisterDatasetRequest req;
    req.set_wire_version(proto::WIRE_VERSION_1);
    req.set_pipeline(pipeline);
    proto::RegisterDatasetResponse resp;
    absl::Status s = coordinator_->RegisterDataset(req, &resp);
    EXPECT_TRUE(s.ok()) << pipeline << ": " << s;
    return resp.dataset_id();
  }
  std::string Register(const Dataset& ds) {
    proto::RegisterDatasetRequest req;
    req.set_wire_version(proto::WIRE_VERSION_1);
    *req.mutable_dataset() = ds.def();
    proto::RegisterDatasetResponse resp;
    absl::Status s = coordinator_->RegisterDataset(req, &resp);
    EXPECT_TRUE(s.ok()) << s;
    return resp.dataset_id();
  }

  proto::WorkerHeartbeatResponse Heartbeat(const std::string& address,
                                           std::vector<int64_t> active = {},
                                           std::vector<int64_t> finished = {}) {
    proto::WorkerHeartbeatRequest req;
    req.set_wire_version(proto::WIRE_VERSION_1);
    req.set_worker_address(address);
    for (int64_t t : active) req.add_active_task_ids(t);
    for (int64_t t : finished) req.add_finished_task_ids(t);
    proto::WorkerHeartbeatResponse resp;
    absl::Status s = coordinator_->WorkerHeartbeat(req, &resp);
    EXPECT_TRUE(s.ok()) << s;
    return resp;
  }

  static proto::JobOptions Options(const std::string& dataset_id,
                                   proto::ShardingPolicy policy = proto::SHARDING_DATA,
                                   int64_t consumers = 1, int64_t replicas = 1) {
    proto::JobOptions o;
    o.set_dataset_id(dataset_id);
    o.set_num_consumers(consumers);
    o.set_replicas_per_consumer(replicas);
    o.set_sharding_policy(policy);
    return o;
  }

  absl::StatusOr<proto::GetOrCreateJobResponse> Job(const std::string& name,
                                                    const proto::JobOptions& options) {
    proto::GetOrCreateJobRequest req;
    req.set_wire_version(proto::WIRE_VERSION_1);
    req.set_job_name(name);
    *req.mutable_options() = options;
    proto::GetOrCreateJobResponse resp;
    absl::Status s = coordinator_->GetOrCreateJob(req, &resp);
    if (!s.ok()) return s;
    return resp;
  }

  // A job "two" of two consumers and one task over range(10).batch(2), the task assigned to
  // worker w1:1: {job id, task id}, the task id -1 (and a failure) if that did not happen.
  std::pair<int64_t, int64_t> TwoConsumersOneTaskOnW1() {
    const std::string ds = Register("range(10).batch(2)");
    Heartbeat("w1:1");
    proto::JobOptions o = Options(ds, proto::SHARDING_OFF, 2);
    o.set_num_tasks(1);
    auto job = Job("two", o);
    EXPECT_TRUE(job.ok()) << job.status();
    if (!job.ok()) return {-1, -1};
    const proto::WorkerHeartbeatResponse assigned = Heartbeat("w1:1");
    EXPECT_EQ(assigned.new_tasks_size(), 1);
    if (assigned.new_tasks_size() != 1) return {job->job_id(), -1};
    return {job->job_id(), assigned.new_tasks(0).task_id()};
  }

  proto::ClientHeartbeatResponse Client(int64_t job_id, int64_t consumer = 0) {
    proto::ClientHeartbeatRequest req;
    req.set_wire_version(proto::WIRE_VERSION_1);
    req.set_job_id(job_id);
    req.set_consumer_index(consumer);
    proto::ClientHeartbeatResponse resp;
    absl::Status s = coordinator_->ClientHeartbeat(req, &resp);
    EXPECT_TRUE(s.ok()) << s;
    return resp;
  }

  absl::StatusOr<proto::GetSplitResponse> Split(int64_t job, int64_t task,
                                                std::optional<int64_t> task_split_index = {}) {
    proto::GetSplitRequest req;
    req.set_job_id(job);
    req.set_task_id(task);
    if (task_split_index.has_value()) req.set_task_split_index(*task_split_index);
    proto::GetSplitResponse resp;
    absl::Status s = coordinator_->GetSplit(req, &resp);
    if (!s.ok()) return s;
    return resp;
  }

  proto::GetStatusResponse Status() {
    proto::GetStatusResponse resp;
    absl::Status s = coordinator_->GetStatus(proto::GetStatusRequest(), &resp);
    EXPECT_TRUE(s.ok()) << s;
    return resp;
  }

  FakeClock clock_;
  std::vector<std::string> log_;
  std::unique_ptr<Coordinator> coordinator_;
};

// ----- Datasets.

TEST_F(CoordinatorTest, SameGraphSameIdWhicheverWayItIsRegistered) {
  const std::string a = Register("range(10).batch(2)");
  EXPECT_THAT(a, ::testing::StartsWith("ds-"));
  EXPECT_EQ(Register("range(10).batch(2)"), a);
  EXPECT_EQ(Register(Dataset::Range(10).Batch(2)), a);
  EXPECT_NE(Register("range(10).batch(3)"), a);
  EXPECT_EQ(Status().num_datasets(), 2);
}

TEST_F(CoordinatorTest, RegisterDatasetReturnsTheDatasetsElementSpec) {
  proto::RegisterDatasetRequest req;
  req.set_wire_version(proto::WIRE_VERSION_1);
  req.set_pipeline("range(10).batch(4, drop_remainder=True)");
  proto::RegisterDatasetResponse resp;
  ASSERT_TRUE(coordinator_->RegisterDataset(req, &resp).ok());
  auto spec = ElementSpecFromProto(resp.element_spec());
  ASSERT_TRUE(spec.ok()) << spec.status();
  ASSERT_TRUE(spec->is_leaf());
  EXPECT_EQ(spec->leaf().dtype, DType::kInt64);
  EXPECT_EQ(spec->leaf().shape, Shape({4}));
}

TEST_F(CoordinatorTest, BadRegistrationsFailWithTheirCodeAndChangeNothing) {
  proto::RegisterDatasetRequest req;
  proto::RegisterDatasetResponse resp;
  req.set_wire_version(proto::WIRE_VERSION_1);
  absl::Status none = coordinator_->RegisterDataset(req, &resp);
  EXPECT_EQ(none.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(none.message(), HasSubstr("pipeline"));

  req.set_pipeline("range(10).bogus(3)");
  absl::Status parse = coordinator_->RegisterDataset(req, &resp);
  EXPECT_EQ(parse.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(parse, Dataset::Parse("range(10).bogus(3)").status());

  req.set_pipeline("range(10).batch(0)");
  EXPECT_EQ(coordinator_->RegisterDataset(req, &resp).code(), absl::StatusCode::kInvalidArgument);

  req.set_pipeline("range(10).batch(2)");
  req.set_wire_version(proto::WIRE_VERSION_UNSPECIFIED);
  absl::Status version = coordinator_->RegisterDataset(req, &resp);
  EXPECT_EQ(version.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(version.message(), HasSubstr("WIRE_VERSION_1"));
  EXPECT_THAT(version.message(), HasSubstr("WIRE_VERSION_UNSPECIFIED"));
  req.set_wire_version(static_cast<proto::WireVersion>(7));
  EXPECT_THAT(coordinator_->RegisterDataset(req, &resp).message(), HasSubstr("wire version 7"));

  EXPECT_EQ(Status().num_datasets(), 0);
  // And it keeps working.
  EXPECT_THAT(Register("range(10).batch(2)"), ::testing::StartsWith("ds-"));
}

// Issue 25 (FOUND.md §5): the coordinator runs user-controlled pipeline work (spec inference,
// which may read a file or call a plugin). An allocation that throws there fails the request
// with RESOURCE_EXHAUSTED naming it, never escapes (UNKNOWN from gRPC, or the process's end).
TEST_F(CoordinatorTest, AllocationFailureInSpecInferenceIsResourceExhausted) {
  static const SluiceOpDef kOps[] = {
      {"spec_throws_bad_alloc",
       +[](const SluiceArg*, int32_t, char*, size_t) -> void* {
         static int state;
         return &state;
       },
       +[](void*) {},
       +[](void*, int32_t, int32_t, const int64_t*, int32_t*, int32_t*, int64_t*, char*,
           size_t) -> int { throw std::bad_alloc(); },
       +[](void*, const SluiceTensorView*, const SluiceHost*, SluiceOutput*) { return 1; }}};
  static const SluicePlugin kPlugin = {SLUICE_PLUGIN_API_VERSION, "bad_alloc_test", 1, kOps};
  static const absl::Status registered =
      PluginRegistry::Global().Register(&kPlugin, "coordinator_test");
  ASSERT_TRUE(registered.ok()) << registered;

  const std::string pipeline = "range(4).map(plugin('spec_throws_bad_alloc')).batch(2)";
  proto::RegisterDatasetRequest req;
  req.set_wire_version(proto::WIRE_VERSION_1);
  req.set_pipeline(pipeline);
  proto::RegisterDatasetResponse resp;
  absl::Status s = absl::OkStatus();
  try {
    s = coordinator_->RegisterDataset(req, &resp);
  } catch (const std::bad_alloc&) {
    s = absl::UnknownError("std::bad_alloc escaped RegisterDataset");
  }
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_THAT(s.message(), HasSubstr("RegisterDataset"));
  EXPECT_EQ(Status().num_datasets(), 0);
  // And it keeps working.
  EXPECT_THAT(Register("range(10).batch(2)"), ::testing::StartsWith("ds-"));
}

// A webdataset without keys= is read by the coordinator (its first sample gives the keys): a
// GNU long-name header claiming 2 GiB gets a status naming the file, not an allocation of it.
TEST_F(CoordinatorTest, TarBombReadAtRegistrationIsAStatusNamingTheFile) {
  const std::string dir = ::testing::TempDir();
  const std::string path = absl::StrCat(dir, "/coordinator_test_bomb.tar");
  {
    std::ofstream f(path, std::ios::binary);
    f << crafted::TarHeader("././@LongLink", 'L', uint64_t{1} << 31) << std::string(512, 'a')
      << crafted::kTarEnd;
  }
  proto::RegisterDatasetRequest req;
  req.set_wire_version(proto::WIRE_VERSION_1);
  req.set_pipeline(absl::StrCat("webdataset_dataset(['", path, "']).batch(2)"));
  proto::RegisterDatasetResponse resp;
  absl::Status s = coordinator_->RegisterDataset(req, &resp);
  std::remove(path.c_str());
  EXPECT_TRUE(s.code() == absl::StatusCode::kDataLoss ||
              s.code() == absl::StatusCode::kResourceExhausted ||
              s.code() == absl::StatusCode::kInvalidArgument)
      << s;
  EXPECT_THAT(s.message(), HasSubstr("coordinator_test_bomb.tar"));
}

// ----- Workers.

TEST_F(CoordinatorTest, WorkersRegisterOnTheirFirstHeartbeat) {
  EXPECT_EQ(Heartbeat("w1:1").worker_id(), 1);
  EXPECT_EQ(Heartbeat("w2:1").worker_id(), 2);
  EXPECT_EQ(Heartbeat("w1:1").worker_id(), 1);
  proto::GetStatusResponse status = Status();
  ASSERT_EQ(status.workers_size(), 2);
  EXPECT_EQ(status.workers(1).address(), "w2:1");
  EXPECT_TRUE(status.workers(1).alive());
  EXPECT_THAT(log_, ::testing::Contains(HasSubstr("worker 2 (w2:1) registered")));

  proto::WorkerHeartbeatRequest req;
  req.set_wire_version(proto::WIRE_VERSION_1);
  proto::WorkerHeartbeatResponse resp;
  absl::Status empty = coordinator_->WorkerHeartbeat(req, &resp);
  EXPECT_EQ(empty.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(empty.message(), HasSubstr("worker_address"));
  req.set_worker_address("w3:1");
  req.set_wire_version(proto::WIRE_VERSION_UNSPECIFIED);
  EXPECT_EQ(coordinator_->WorkerHeartbeat(req, &resp).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(Status().workers_size(), 2);
}

// ----- Jobs.

TEST_F(CoordinatorTest, JobWithoutWorkersIsUnavailable) {
  const std::string ds = Register("range(10).batch(2)");
  auto job = Job("j", Options(ds));
  EXPECT_EQ(job.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(job.status().message(), HasSubstr("no input workers registered yet"));
  EXPECT_EQ(Status().jobs_size(), 0);
}

TEST_F(CoordinatorTest, NamedJobsAreSharedAndMustAgree) {
  const std::string ds = Register("range(10).batch(2)");
  Heartbeat("w1:1");
  auto first = Job("train", Options(ds, proto::SHARDING_DATA, 2));
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_TRUE(first->created());
  auto again = Job("train", Options(ds, proto::SHARDING_DATA, 2));
  ASSERT_TRUE(again.ok());
  EXPECT_FALSE(again->created());
  EXPECT_EQ(again->job_id(), first->job_id());

  auto other = Job("train", Options(ds, proto::SHARDING_OFF, 3));
  EXPECT_EQ(other.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(other.status().message(), HasSubstr("num_consumers (job has 2, request has 3)"));
  EXPECT_THAT(other.status().message(),
              HasSubstr("sharding_policy (job has SHARDING_DATA, request has SHARDING_OFF)"));
  EXPECT_THAT(other.status().message(), ::testing::Not(HasSubstr("replicas_per_consumer")));

  // Anonymous jobs are never shared.
  auto a1 = Job("", Options(ds));
  auto a2 = Job("", Options(ds));
  ASSERT_TRUE(a1.ok() && a2.ok());
  EXPECT_NE(a1->job_id(), a2->job_id());
  EXPECT_EQ(Status().jobs_size(), 3);
}

TEST_F(CoordinatorTest, BadJobRequestsGetTheirCodes) {
  const std::string ds = Register("range(10).batch(2)");
  Heartbeat("w1:1");
  EXPECT_EQ(Job("j", Options("ds-nope")).status().code(), absl::StatusCode::kNotFound);
  auto no_ds = Job("j", Options(""));
  EXPECT_EQ(no_ds.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(no_ds.status().message(), HasSubstr("dataset_id"));
  auto consumers = Job("j", Options(ds, proto::SHARDING_DATA, 0));
  EXPECT_EQ(consumers.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(consumers.status().message(), HasSubstr("num_consumers"));
  auto replicas = Job("j", Options(ds, proto::SHARDING_DATA, 1, -2));
  EXPECT_EQ(replicas.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(replicas.status().message(), HasSubstr("replicas_per_consumer"));
  proto::JobOptions tasks = Options(ds);
  tasks.set_num_tasks(-1);
  EXPECT_THAT(Job("j", tasks).status().message(), HasSubstr("num_tasks"));
  proto::JobOptions policy = Options(ds);
  policy.set_sharding_policy(static_cast<proto::ShardingPolicy>(42));
  EXPECT_THAT(Job("j", policy).status().message(), HasSubstr("sharding_policy"));
  // An unbatched dataset cannot be split across replicas (TF's error).
  const std::string unbatched = Register("range(10)");
  auto split = Job("j", Options(unbatched, proto::SHARDING_DATA, 2));
  EXPECT_EQ(split.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(split.status().message(), HasSubstr("Call the `batch` method"));

  proto::GetOrCreateJobRequest req;
  req.set_job_name("j");
  *req.mutable_options() = Options(ds);
  proto::GetOrCreateJobResponse resp;
  EXPECT_EQ(coordinator_->GetOrCreateJob(req, &resp).code(), absl::StatusCode::kFailedPrecondition);

  EXPECT_EQ(Status().jobs_size(), 0);
  // The coordinator keeps working, and the name was not taken by a failed request.
  auto ok = Job("j", Options(ds));
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_TRUE(ok->created());
}

// ----- Task plans.

TEST_F(CoordinatorTest, DataJobHasOneStepShardedTaskPerWorker) {
  const std::string ds = Register("range(10).batch(4)");
  Heartbeat("w1:1");
  Heartbeat("w2:1");
  auto job = Job("j", Options(ds, proto::SHARDING_DATA, 2));
  ASSERT_TRUE(job.ok()) << job.status();

  proto::WorkerHeartbeatResponse w1 = Heartbeat("w1:1");
  ASSERT_EQ(w1.new_tasks_size(), 1);
  const proto::TaskDef& t0 = w1.new_tasks(0);
  EXPECT_EQ(t0.job_id(), job->job_id());
  EXPECT_EQ(t0.task_index(), 0);
  EXPECT_EQ(t0.num_tasks(), 2);
  EXPECT_TRUE(t0.step_sharded());
  EXPECT_EQ(t0.job().num_consumers(), 2);
  EXPECT_TRUE(MessageDifferencer::Equals(t0.dataset(), Dataset::Parse("range(10).batch(4)")->def()));
  proto::WorkerHeartbeatResponse w2 = Heartbeat("w2:1");
  ASSERT_EQ(w2.new_tasks_size(), 1);
  EXPECT_EQ(w2.new_tasks(0).task_index(), 1);

  // A worker that runs its task is not sent it again.
  EXPECT_THAT(Heartbeat("w1:1", {t0.task_id()}).new_tasks(), IsEmpty());

  proto::ClientHeartbeatResponse client = Client(job->job_id(), 1);
  EXPECT_EQ(client.num_tasks(), 2);
  ASSERT_EQ(client.tasks_size(), 2);
  EXPECT_EQ(client.tasks(0).worker_address(), "w1:1");
  EXPECT_EQ(client.tasks(1).worker_address(), "w2:1");
  EXPECT_FALSE(client.job_finished());
  EXPECT_THAT(log_, ::testing::Contains(HasSubstr("created")));
}

TEST_F(CoordinatorTest, NumTasksSpreadsTasksOverTheLeastLoadedWorkers) {
  const std::string ds = Register("range(10).batch(4)");
  Heartbeat("w1:1");
  Heartbeat("w2:1");
  proto::JobOptions o = Options(ds, proto::SHARDING_OFF);
  o.set_num_tasks(3);
  auto job = Job("", o);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(Heartbeat("w1:1").new_tasks_size(), 2);
  proto::WorkerHeartbeatResponse w2 = Heartbeat("w2:1");
  ASSERT_EQ(w2.new_tasks_size(), 1);
  EXPECT_FALSE(w2.new_tasks(0).step_sharded());
  EXPECT_EQ(w2.new_tasks(0).num_tasks(), 3);
  EXPECT_EQ(Client(job->job_id()).num_tasks(), 3);
}

TEST_F(CoordinatorTest, FileJobShardsFilesAndRejectsTooFewFiles) {
  const std::string ds = Register("text_line_dataset(['a', 'b', 'c']).batch(2)");
  Heartbeat("w1:1");
  Heartbeat("w2:1");
  auto job = Job("", Options(ds, proto::SHARDING_FILE));
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_THAT(Filenames(Heartbeat("w1:1").new_tasks(0).dataset()), ElementsAre("a", "c"));
  EXPECT_THAT(Filenames(Heartbeat("w2:1").new_tasks(0).dataset()), ElementsAre("b"));

  proto::JobOptions four = Options(ds, proto::SHARDING_FILE);
  four.set_num_tasks(4);
  auto bad = Job("", four);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(),
              HasSubstr("the dataset only has 3 file(s), which is not enough for the required 4"));
  // AUTO reads files, so it is FILE here, with FILE's error.
  proto::JobOptions auto_four = four;
  auto_four.set_sharding_policy(proto::SHARDING_AUTO);
  EXPECT_EQ(Job("", auto_four).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Status().jobs_size(), 1);
}

TEST_F(CoordinatorTest, HintJobRewritesShardHints) {
  const std::string ds = Register("range(9).shard(SHARD_HINT, SHARD_HINT).batch(2)");
  Heartbeat("w1:1");
  Heartbeat("w2:1");
  Heartbeat("w3:1");
  ASSERT_TRUE(Job("", Options(ds, proto::SHARDING_HINT)).ok());
  proto::TaskDef t = Heartbeat("w3:1").new_tasks(0);
  EXPECT_EQ(t.task_index(), 2);
  EXPECT_FALSE(t.step_sharded());
  auto values = RunValues(t.dataset());
  ASSERT_TRUE(values.ok()) << values.status();
  EXPECT_THAT(*values, ElementsAre(2, 5, 8));
}

TEST_F(CoordinatorTest, AutoIsDataForNonFileSources) {
  const std::string ds = Register("range(9).batch(2)");
  Heartbeat("w1:1");
  ASSERT_TRUE(Job("", Options(ds, proto::SHARDING_AUTO)).ok());
  proto::TaskDef t = Heartbeat("w1:1").new_tasks(0);
  EXPECT_TRUE(t.step_sharded());
  EXPECT_EQ(t.num_tasks(), 1);
}

// ----- DYNAMIC.

// Takes splits for the tasks in turn until every task saw end_of_splits; returns the values.
std::vector<int64_t> DrainSplits(const std::function<absl::StatusOr<proto::GetSplitResponse>(
                                     int64_t task)>& split,
                                 const std::vector<int64_t>& tasks) {
  std::vector<int64_t> values;
  std::vector<bool> done(tasks.size(), false);
  for (int round = 0; round < 1000; ++round) {
    bool all = true;
    for (size_t i = 0; i < tasks.size(); ++i) {
      if (done[i]) continue;
      auto s = split(tasks[i]);
      EXPECT_TRUE(s.ok()) << s.status();
      if (!s.ok() || s->end_of_splits()) {
        done[i] = true;
        continue;
      }
      all = false;
      auto v = RunValues(s->dataset());
      EXPECT_TRUE(v.ok()) << v.status();
      if (v.ok()) values.insert(values.end(), v->begin(), v->end());
    }
    if (all) break;
  }
  return values;
}

TEST_F(CoordinatorTest, DynamicSplitsCoverEveryElementExactlyOnce) {
  const std::string ds = Register("range(23).batch(2)");
  Heartbeat("w1:1");
  Heartbeat("w2:1");
  proto::JobOptions o = Options(ds, proto::SHARDING_DYNAMIC);
  o.set_split_size(4);
  auto job = Job("dyn", o);
  ASSERT_TRUE(job.ok()) << job.status();
  proto::ClientHeartbeatResponse client = Client(job->job_id());
  ASSERT_EQ(client.num_tasks(), 2);
  std::vector<int64_t> tasks = {client.tasks(0).task_id(), client.tasks(1).task_id()};
  std::vector<int64_t> values = DrainSplits(
      [&](int64_t task) { return Split(job->job_id(), task); }, tasks);
  std::sort(values.begin(), values.end());
  std::vector<int64_t> expected(23);
  for (int i = 0; i < 23; ++i) expected[i] = i;
  EXPECT_EQ(values, expected);
  // Once exhausted, every further request is end_of_splits.
  EXPECT_TRUE(Split(job->job_id(), tasks[0])->end_of_splits());
}

TEST_F(CoordinatorTest, DynamicSlicesAndFilesSplitToo) {
  const std::string slices = Register("from_tensor_slices([10, 11, 12, 13, 14]).batch(2)");
  const std::string files = Register("text_line_dataset(['a', 'b', 'c']).batch(2)");
  Heartbeat("w1:1");
  proto::JobOptions o = Options(slices, proto::SHARDING_DYNAMIC);
  o.set_split_size(2);
  auto job = Job("", o);
  ASSERT_TRUE(job.ok()) << job.status();
  const int64_t task = Client(job->job_id()).tasks(0).task_id();
  std::vector<int64_t> values =
      DrainSplits([&](int64_t t) { return Split(job->job_id(), t); }, {task});
  EXPECT_THAT(values, ElementsAre(10, 11, 12, 13, 14));

  auto fjob = Job("", Options(files, proto::SHARDING_DYNAMIC));
  ASSERT_TRUE(fjob.ok()) << fjob.status();
  const int64_t ftask = Client(fjob->job_id()).tasks(0).task_id();
  std::vector<std::string> seen;
  for (int i = 0; i < 10; ++i) {
    auto s = Split(fjob->job_id(), ftask);
    ASSERT_TRUE(s.ok()) << s.status();
    if (s->end_of_splits()) break;
    EXPECT_EQ(s->split_index(), i);
    for (const std::string& f : Filenames(s->dataset())) seen.push_back(f);
  }
  EXPECT_THAT(seen, ElementsAre("a", "b", "c"));
}

TEST_F(CoordinatorTest, DynamicSplitIndexReplaysATasksSplits) {
  const std::string ds = Register("range(10).batch(2)");
  Heartbeat("w1:1");
  proto::JobOptions o = Options(ds, proto::SHARDING_DYNAMIC);
  o.set_split_size(3);
  auto job = Job("", o);
  ASSERT_TRUE(job.ok());
  const int64_t task = Client(job->job_id()).tasks(0).task_id();
  auto s0 = Split(job->job_id(), task, 0);
  auto s1 = Split(job->job_id(), task, 1);
  ASSERT_TRUE(s0.ok() && s1.ok());
  EXPECT_THAT(*RunValues(s1->dataset()), ElementsAre(3, 4, 5));
  // A worker taking the task over asks from 0 again and gets the same splits.
  auto r0 = Split(job->job_id(), task, 0);
  ASSERT_TRUE(r0.ok());
  EXPECT_EQ(r0->split_index(), s0->split_index());
  EXPECT_TRUE(MessageDifferencer::Equals(r0->dataset(), s0->dataset()));
  auto s2 = Split(job->job_id(), task, 2);
  ASSERT_TRUE(s2.ok());
  EXPECT_THAT(*RunValues(s2->dataset()), ElementsAre(6, 7, 8));
  EXPECT_EQ(Split(job->job_id(), task, 7).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(CoordinatorTest, IndependentDynamicJobCanGiveLateWorkersTheirOwnTask) {
  CoordinatorOptions options;
  options.clock = &clock_;
  options.log = [](absl::string_view) {};
  options.dynamic_tasks_for_new_workers = true;
  coordinator_ = Coordinator::Create(options).value();
  const std::string ds = Register("range(100).batch(2)");
  Heartbeat("w1:1");
  proto::JobOptions o = Options(ds, proto::SHARDING_DYNAMIC);
  o.set_split_size(10);
  o.set_read_mode(proto::READ_MODE_INDEPENDENT);
  auto job = Job("", o);
  ASSERT_TRUE(job.ok());
  EXPECT_EQ(Client(job->job_id()).num_tasks(), 1);
  proto::WorkerHeartbeatResponse w2 = Heartbeat("w2:1");
  ASSERT_EQ(w2.new_tasks_size(), 1);
  EXPECT_EQ(w2.new_tasks(0).task_index(), 1);
  EXPECT_EQ(w2.new_tasks(0).num_tasks(), 2);
  EXPECT_EQ(w2.new_tasks(0).job().sharding_policy(), proto::SHARDING_DYNAMIC);
  EXPECT_EQ(Client(job->job_id()).num_tasks(), 2);
  EXPECT_EQ(Client(job->job_id()).tasks(1).worker_address(), "w2:1");
}

TEST_F(CoordinatorTest, IndependentDynamicJobKeepsItsTasksByDefault) {
  const std::string ds = Register("range(100).batch(2)");
  Heartbeat("w1:1");
  proto::JobOptions o = Options(ds, proto::SHARDING_DYNAMIC);
  o.set_read_mode(proto::READ_MODE_INDEPENDENT);
  auto job = Job("", o);
  ASSERT_TRUE(job.ok());
  // Consumers read the tasks there are when they start: a later task might never be read.
  EXPECT_THAT(Heartbeat("w2:1").new_tasks(), IsEmpty());
  EXPECT_EQ(Client(job->job_id()).num_tasks(), 1);
}

TEST_F(CoordinatorTest, CoordinatedDynamicJobNeverGrowsButItsTasksMove) {
  CoordinatorOptions options;
  options.clock = &clock_;
  options.log = [](absl::string_view) {};
  options.dynamic_tasks_for_new_workers = true;  // not for coordinated jobs
  coordinator_ = Coordinator::Create(options).value();
  const std::string ds = Register("range(100).batch(2)");
  Heartbeat("w1:1");
  auto job = Job("", Options(ds, proto::SHARDING_DYNAMIC));
  ASSERT_TRUE(job.ok());
  // Consumers reading round-robin must all see the same task list: no task joins mid-job.
  EXPECT_THAT(Heartbeat("w2:1").new_tasks(), IsEmpty());
  EXPECT_EQ(Client(job->job_id()).num_tasks(), 1);
  // But a task whose worker dies moves, as under any policy.
  clock_.Advance(absl::Seconds(6));
  Heartbeat("w2:1");
  clock_.Advance(absl::Seconds(5));
  proto::WorkerHeartbeatResponse w2 = Heartbeat("w2:1");
  ASSERT_EQ(w2.new_tasks_size(), 1);
  EXPECT_EQ(w2.new_tasks(0).task_index(), 0);
}

TEST_F(CoordinatorTest, GetSplitRejectsOtherPoliciesAndUnknownIds) {
  const std::string ds = Register("range(10).batch(2)");
  Heartbeat("w1:1");
  auto job = Job("", Options(ds, proto::SHARDING_DATA));
  ASSERT_TRUE(job.ok());
  const int64_t task = Client(job->job_id()).tasks(0).task_id();
  EXPECT_EQ(Split(job->job_id(), task).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(Split(99, task).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(Split(job->job_id(), 99).status().code(), absl::StatusCode::kNotFound);
}

// ----- Liveness and failure.

TEST_F(CoordinatorTest, SilentWorkerIsDeclaredDeadAndItsTasksMove) {
  const std::string ds = Register("range(10).batch(2)");
  Heartbeat("w1:1");
  Heartbeat("w2:1");
  Heartbeat("w3:1");
  proto::JobOptions o = Options(ds, proto::SHARDING_DATA);
  o.set_num_tasks(4);
  auto job = Job("j", o);
  ASSERT_TRUE(job.ok());
  // Loads: w1 {0, 3}, w2 {1}, w3 {2}.
  const proto::WorkerHeartbeatResponse w1 = Heartbeat("w1:1");
  ASSERT_EQ(w1.new_tasks_size(), 2);
  const int64_t lost = w1.new_tasks(0).task_id();
  std::vector<int64_t> w2_tasks = {Heartbeat("w2:1").new_tasks(0).task_id()};
  std::vector<int64_t> w3_tasks = {Heartbeat("w3:1").new_tasks(0).task_id()};

  clock_.Advance(absl::Seconds(6));
  Heartbeat("w2:1", w2_tasks);
  Heartbeat("w3:1", w3_tasks);
  clock_.Advance(absl::Seconds(4));  // w1 silent for 10 s
  coordinator_->CheckWorkerLiveness();
  proto::GetStatusResponse status = Status();
  EXPECT_FALSE(status.workers(0).alive());
  EXPECT_TRUE(status.workers(1).alive());
  EXPECT_DOUBLE_EQ(status.workers(1).seconds_since_heartbeat(), 4.0);
  EXPECT_THAT(log_, ::testing::Contains(HasSubstr("worker 1 (w1:1) is dead")));

  // Its two tasks went to w2 and w3, one each (the fewest tasks first).
  proto::WorkerHeartbeatResponse w2 = Heartbeat("w2:1", w2_tasks);
  proto::WorkerHeartbeatResponse w3 = Heartbeat("w3:1", w3_tasks);
  ASSERT_EQ(w2.new_tasks_size(), 1);
  ASSERT_EQ(w3.new_tasks_size(), 1);
  EXPECT_EQ(w2.new_tasks(0).task_id(), lost);  // same id and index as before
  EXPECT_EQ(w2.new_tasks(0).task_index(), 0);
  proto::ClientHeartbeatResponse client = Client(job->job_id());
  for (const proto::TaskInfo& t : client.tasks()) EXPECT_NE(t.worker_address(), "w1:1");

  // w1 comes back: it must stop the tasks it lost, and it gets nothing new.
  proto::WorkerHeartbeatResponse back = Heartbeat("w1:1", {lost});
  EXPECT_EQ(back.worker_id(), 1);
  EXPECT_THAT(back.tasks_to_stop(), ElementsAre(lost));
  EXPECT_THAT(back.new_tasks(), IsEmpty());
  EXPECT_TRUE(Status().workers(0).alive());
  EXPECT_THAT(log_, ::testing::Contains(HasSubstr("worker 1 (w1:1) is back")));
}

// A coordinated task's worker declared dead while its consumers read it to the end (as every
// slow worker is after a coordinator restart): the task moved, but when that worker comes back
// and reports it finished (every consumer confirmed the end there), the task is finished and
// its new worker told to stop it. Its consumers may have exited meanwhile and never come to
// the new worker. An independent job's stale report still does not count.
TEST_F(CoordinatorTest, AFinishedReportFromAWorkerACoordinatedTaskWasTakenFromCounts) {
  const std::string ds = Register("range(10).batch(2)");
  Heartbeat("w1:1");
  proto::JobOptions o = Options(ds, proto::SHARDING_OFF, 2);
  o.set_num_tasks(1);
  auto job = Job("coordinated", o);
  ASSERT_TRUE(job.ok());
  proto::JobOptions ind = Options(ds, proto::SHARDING_OFF, 2);
  ind.set_num_tasks(1);
  ind.set_read_mode(proto::READ_MODE_INDEPENDENT);
  auto independent = Job("independent", ind);
  ASSERT_TRUE(independent.ok());
  const proto::WorkerHeartbeatResponse w1 = Heartbeat("w1:1");
  ASSERT_EQ(w1.new_tasks_size(), 2);
  const int64_t coordinated_task = w1.new_tasks(0).task_id();
  const int64_t independent_task = w1.new_tasks(1).task_id();
  Heartbeat("w2:1");
  clock_.Advance(absl::Seconds(6));
  Heartbeat("w2:1");
  clock_.Advance(absl::Seconds(6));  // w1 silent for 12 s
  coordinator_->CheckWorkerLiveness();
  const proto::WorkerHeartbeatResponse w2 = Heartbeat("w2:1");
  ASSERT_EQ(w2.new_tasks_size(), 2);  // both moved

  const proto::WorkerHeartbeatResponse back =
      Heartbeat("w1:1", {}, {coordinated_task, independent_task});
  EXPECT_TRUE(Client(job->job_id(), 0).job_finished());
  EXPECT_FALSE(Client(independent->job_id(), 0).job_finished());
  EXPECT_THAT(Heartbeat("w2:1", {coordinated_task, independent_task}).tasks_to_stop(),
              ElementsAre(coordinated_task));
  EXPECT_THAT(log_, ::testing::Contains(HasSubstr("from worker 1 (w1:1), which ran it before")));
  (void)back;
}

// A heartbeat that arrived in time but waited for the coordinator's lock (held by a slow
// request: planning a job over a large file) counts from its arrival: the first request to
// get the lock must not declare its sender dead (issue 15).
TEST_F(CoordinatorTest, AHeartbeatQueuedForTheLockCountsFromItsArrival) {
  Heartbeat("w1:1");
  Heartbeat("w2:1");
  clock_.Advance(absl::Seconds(9));
  coordinator_->TEST_NoteHeartbeatArrival("w2:1");  // w2's heartbeat arrives, then waits
  clock_.Advance(absl::Seconds(2));                  // the lock is held for 2 s
  Heartbeat("w1:1");                                 // w1's gets the lock first
  proto::GetStatusResponse status = Status();
  EXPECT_TRUE(status.workers(0).alive());
  EXPECT_TRUE(status.workers(1).alive()) << "w2 arrived 2 s ago, within the 10 s timeout";
  // Arrival is no more than a heartbeat: silence after it still kills.
  clock_.Advance(absl::Seconds(9));
  Heartbeat("w1:1");
  EXPECT_FALSE(Status().workers(1).alive());
}

TEST_F(CoordinatorTest, EveryRpcChecksLiveness) {
  const std::string ds = Register("range(10).batch(2)");
  Heartbeat("w1:1");
  clock_.Advance(absl::Seconds(9));
  EXPECT_TRUE(Status().workers(0).alive());
  clock_.Advance(absl::Seconds(1));
  EXPECT_FALSE(Status().workers(0).alive());
  // With no live worker, a job cannot be made.
  EXPECT_EQ(Job("", Options(ds)).status().code(), absl::StatusCode::kUnavailable);
}

TEST_F(CoordinatorTest, TasksWaitUnassignedUntilAWorkerAppears) {
  const std::string ds = Register("range(10).batch(2)");
  Heartbeat("w1:1");
  auto job = Job("j", Options(ds, proto::SHARDING_OFF));
  ASSERT_TRUE(job.ok());
  const int64_t task = Heartbeat("w1:1").new_tasks(0).task_id();
  clock_.Advance(absl::Seconds(11));
  coordinator_->CheckWorkerLiveness();
  EXPECT_EQ(Client(job->job_id()).tasks(0).worker_address(), "");
  proto::WorkerHeartbeatResponse w2 = Heartbeat("w2:1");
  ASSERT_EQ(w2.new_tasks_size(), 1);
  EXPECT_EQ(w2.new_tasks(0).task_id(), task);
  EXPECT_EQ(Client(job->job_id()).tasks(0).worker_address(), "w2:1");
}

TEST_F(CoordinatorTest, JobFinishesWhenEveryTaskFinished) {
  const std::string ds = Register("range(10).batch(2)");
  Heartbeat("w1:1");
  Heartbeat("w2:1");
  auto job = Job("j", Options(ds, proto::SHARDING_DATA));
  ASSERT_TRUE(job.ok());
  const int64_t t1 = Heartbeat("w1:1").new_tasks(0).task_id();
  const int64_t t2 = Heartbeat("w2:1").new_tasks(0).task_id();
  // Only a task's own worker can finish it (or, coordinated, one it was taken from).
  Heartbeat("w1:1", {t1}, {t2});
  EXPECT_FALSE(Client(job->job_id()).tasks(1).finished());
  Heartbeat("w1:1", {}, {t1});
  proto::ClientHeartbeatResponse mid = Client(job->job_id());
  EXPECT_TRUE(mid.tasks(0).finished());
  EXPECT_FALSE(mid.job_finished());
  // A finished task is not handed out again.
  EXPECT_THAT(Heartbeat("w1:1").new_tasks(), IsEmpty());
  Heartbeat("w2:1", {}, {t2});
  EXPECT_TRUE(Client(job->job_id()).job_finished());
  EXPECT_TRUE(Status().jobs(0).finished());
  EXPECT_THAT(log_, ::testing::Contains(HasSubstr("finished")));
  // A finished job's tasks do not move when their worker dies.
  clock_.Advance(absl::Seconds(20));
  Heartbeat("w3:1");
  EXPECT_THAT(Heartbeat("w3:1").new_tasks(), IsEmpty());
}

TEST_F(CoordinatorTest, DynamicJobFinishesAfterItsSplits) {
  const std::string ds = Register("range(4).batch(2)");
  Heartbeat("w1:1");
  auto job = Job("", Options(ds, proto::SHARDING_DYNAMIC));
  ASSERT_TRUE(job.ok());
  const int64_t task = Client(job->job_id()).tasks(0).task_id();
  ASSERT_FALSE(Split(job->job_id(), task)->end_of_splits());
  ASSERT_TRUE(Split(job->job_id(), task)->end_of_splits());
  Heartbeat("w1:1", {}, {task});
  EXPECT_TRUE(Client(job->job_id()).job_finished());
  // A late worker gets no task of a finished job.
  EXPECT_THAT(Heartbeat("w2:1").new_tasks(), IsEmpty());
}

// ----- Failure policy (docs/SERVICE.md, "Failure policy").

// A worker's report that a task's pipeline failed deterministically fails the job once, with
// the error: the task is not handed to another worker (even when its worker dies later), the
// worker is told to stop it, consumers get the error, and other jobs go on.
TEST_F(CoordinatorTest, ADeterministicTaskFailureFailsItsJobOnceWithTheError) {
  const std::string ds = Register("range(10).batch(2)");
  Heartbeat("w1:1");
  Heartbeat("w2:1");
  proto::JobOptions one_task = Options(ds, proto::SHARDING_OFF);
  one_task.set_num_tasks(1);
  auto bad = Job("bad", one_task);
  ASSERT_TRUE(bad.ok());
  auto good = Job("good", one_task);
  ASSERT_TRUE(good.ok());
  const int64_t bad_task = Client(bad->job_id()).tasks(0).task_id();
  const int64_t good_task = Client(good->job_id()).tasks(0).task_id();
  const std::string bad_worker = Client(bad->job_id()).tasks(0).worker_address();
  const std::string other_worker = bad_worker == "w1:1" ? "w2:1" : "w1:1";

  proto::WorkerHeartbeatRequest req;
  req.set_wire_version(proto::WIRE_VERSION_1);
  req.set_worker_address(bad_worker);
  req.add_active_task_ids(bad_task);
  proto::TaskFailure* f = req.add_failed_tasks();
  f->set_task_id(bad_task);
  f->set_code(static_cast<int>(absl::StatusCode::kResourceExhausted));
  f->set_message("batch: 8000000000 bytes exceed --max_element_bytes");
  // A report from a worker that does not hold the task is ignored.
  req.set_worker_address(other_worker);
  proto::WorkerHeartbeatResponse resp;
  ASSERT_TRUE(coordinator_->WorkerHeartbeat(req, &resp).ok());
  EXPECT_FALSE(Status().jobs(0).finished());
  // A transient code is not a deterministic failure: the request is refused, nothing changes.
  req.set_worker_address(bad_worker);
  f->set_code(static_cast<int>(absl::StatusCode::kUnavailable));
  absl::Status refused = coordinator_->WorkerHeartbeat(req, &resp);
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(refused.message(), HasSubstr("failed_tasks"));
  EXPECT_FALSE(Status().jobs(0).finished());

  f->set_code(static_cast<int>(absl::StatusCode::kResourceExhausted));
  resp.Clear();
  ASSERT_TRUE(coordinator_->WorkerHeartbeat(req, &resp).ok());
  EXPECT_THAT(resp.tasks_to_stop(), ElementsAre(bad_task));
  // The error may be local to that worker (its memory taken by another job): the task moves
  // to the other worker, and the job goes on.
  EXPECT_FALSE(Status().jobs(0).finished());
  EXPECT_EQ(Client(bad->job_id()).tasks(0).worker_address(), other_worker);
  // The same error from a second worker fails the job.
  req.set_worker_address(other_worker);
  req.add_active_task_ids(good_task);
  resp.Clear();
  ASSERT_TRUE(coordinator_->WorkerHeartbeat(req, &resp).ok());
  EXPECT_THAT(resp.tasks_to_stop(), ElementsAre(bad_task));

  proto::ClientHeartbeatRequest creq;
  creq.set_wire_version(proto::WIRE_VERSION_1);
  creq.set_job_id(bad->job_id());
  proto::ClientHeartbeatResponse cresp;
  absl::Status error = coordinator_->ClientHeartbeat(creq, &cresp);
  EXPECT_EQ(error.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(error.message(), HasSubstr(absl::StrCat("job ", bad->job_id(), " (bad) failed")));
  EXPECT_THAT(error.message(), HasSubstr(absl::StrCat("task ", bad_task, " (index 0)")));
  EXPECT_THAT(error.message(), HasSubstr(bad_worker));
  EXPECT_THAT(error.message(), HasSubstr(other_worker));
  EXPECT_THAT(error.message(), HasSubstr("failed the same way"));
  EXPECT_THAT(error.message(), HasSubstr("exceed --max_element_bytes"));
  proto::GetStatusResponse status = Status();
  EXPECT_TRUE(status.jobs(0).finished());
  EXPECT_THAT(status.jobs(0).error(), HasSubstr("RESOURCE_EXHAUSTED"));
  EXPECT_EQ(status.jobs(1).error(), "");
  EXPECT_THAT(log_, ::testing::Contains(HasSubstr("failed")));

  // The failed task's worker dies: the task is not reassigned to anyone.
  clock_.Advance(absl::Seconds(6));
  Heartbeat(other_worker, {good_task});
  clock_.Advance(absl::Seconds(5));
  proto::WorkerHeartbeatResponse other = Heartbeat(other_worker, {good_task});
  EXPECT_FALSE(Status().workers(bad_worker == "w1:1" ? 0 : 1).alive());
  for (const proto::TaskDef& t : other.new_tasks()) EXPECT_NE(t.task_id(), bad_task);
  EXPECT_THAT(Heartbeat("w3:1").new_tasks(), IsEmpty());
  // The good job goes on and finishes.
  EXPECT_TRUE(Client(good->job_id()).tasks(0).worker_address() == other_worker);
  Heartbeat(other_worker, {}, {good_task});
  EXPECT_TRUE(Client(good->job_id()).job_finished());
  // The failed job is removed after finished_job_ttl, like a finished one.
  clock_.Advance(absl::Minutes(6));
  Heartbeat(other_worker);
  EXPECT_EQ(coordinator_->ClientHeartbeat(creq, &cresp).code(), absl::StatusCode::kNotFound);
}

// The quarantine rule itself: tests/server/task_quarantine_test.cc.
TEST_F(CoordinatorTest, QuarantineCanBeTurnedOff) {
  CoordinatorOptions options = coordinator_->options();
  options.max_task_worker_deaths = 0;
  coordinator_ = Coordinator::Create(options).value();
  const std::string ds = Register("range(10).batch(2)");
  Heartbeat("w1:1");
  auto job = Job("", Options(ds, proto::SHARDING_OFF));
  ASSERT_TRUE(job.ok());
  for (int i = 1; i <= 5; ++i) {
    const std::string w = absl::StrCat("w", i, ":1");
    ASSERT_EQ(Heartbeat(w).new_tasks_size(), 1) << w;
    clock_.Advance(absl::Seconds(11));
    coordinator_->CheckWorkerLiveness();
  }
  EXPECT_FALSE(Client(job->job_id()).job_finished());
  EXPECT_EQ(Heartbeat("w9:1").new_tasks_size(), 1);
}

// ----- Consumers that leave (docs/SERVICE.md).

// A consumer of a coordinated job silent for consumer_timeout (60 s) is listed gone to the
// workers holding the job's unfinished tasks, and only to them; a heartbeat brings it back.
// Independent jobs and single-consumer jobs have nobody waiting for it.
TEST_F(CoordinatorTest, ASilentConsumerIsDeclaredGoneToTheWorkersOfItsJob) {
  ASSERT_EQ(coordinator_->options().consumer_timeout, absl::Seconds(60));
  const std::string ds = Register("range(10).batch(2)");
  Heartbeat("w1:1");
  proto::JobOptions o = Options(ds, proto::SHARDING_OFF, 2);
  o.set_num_tasks(1);
  auto job = Job("two", o);
  ASSERT_TRUE(job.ok());
  proto::JobOptions solo = Options(ds, proto::SHARDING_OFF, 1);
  solo.set_num_tasks(1);
  auto single = Job("one", solo);
  ASSERT_TRUE(single.ok());
  proto::JobOptions ind = Options(ds, proto::SHARDING_OFF, 2);
  ind.set_num_tasks(1);
  ind.set_read_mode(proto::READ_MODE_INDEPENDENT);
  auto independent = Job("ind", ind);
  ASSERT_TRUE(independent.ok());
  std::vector<int64_t> tasks;
  const proto::WorkerHeartbeatResponse assigned = Heartbeat("w1:1");
  for (const proto::TaskDef& t : assigned.new_tasks()) tasks.push_back(t.task_id());
  ASSERT_EQ(tasks.size(), 3u);
  EXPECT_EQ(Heartbeat("w1:1", tasks).gone_consumers_size(), 0);
  clock_.Advance(absl::Seconds(5));
  Client(job->job_id(), 0);
  EXPECT_EQ(Heartbeat("w1:1", tasks).gone_consumers_size(), 0);  // 5 s, within 60 s

  for (int i = 0; i < 13; ++i) {  // consumer 0 heartbeats every 5 s, consumer 1 never
    clock_.Advance(absl::Seconds(5));
    Client(job->job_id(), 0);
    Client(single->job_id(), 0);
    Heartbeat("w1:1", tasks);
  }
  proto::WorkerHeartbeatResponse r = Heartbeat("w1:1", tasks);
  ASSERT_EQ(r.gone_consumers_size(), 1) << r.DebugString();
  EXPECT_EQ(r.gone_consumers(0).job_id(), job->job_id());
  EXPECT_EQ(r.gone_consumers(0).consumer_index(), 1);
  EXPECT_THAT(log_, ::testing::Contains(HasSubstr(
                        absl::StrCat("consumer 1 of job ", job->job_id(), " is gone"))));
  // Another worker, without a task of the job, is not told.
  const proto::WorkerHeartbeatResponse w2 = Heartbeat("w2:1");
  EXPECT_EQ(w2.gone_consumers_size(), 0);
  // Still listed while it stays away; a heartbeat brings it back.
  EXPECT_EQ(Heartbeat("w1:1", tasks).gone_consumers_size(), 1);
  Client(job->job_id(), 1);
  EXPECT_EQ(Heartbeat("w1:1", tasks).gone_consumers_size(), 0);
  EXPECT_THAT(log_, ::testing::Contains(HasSubstr("is back")));
}

// A task some consumers read to its end (elsewhere: its first worker died after serving them)
// and whose other consumers are gone is finished by the coordinator: its current worker never
// drains it (nobody attaches there), and a consumer detached there for lateness no longer
// counts as having its end. While a consumer that has not reported it is alive, it stays.
TEST_F(CoordinatorTest, ATaskReadByTheLiveConsumersIsFinishedWhenTheOthersAreGone) {
  const auto [job_id, task] = TwoConsumersOneTaskOnW1();
  ASSERT_GE(task, 0);
  auto report = [&](int64_t consumer) {
    proto::ClientHeartbeatRequest req;
    req.set_wire_version(proto::WIRE_VERSION_1);
    req.set_job_id(job_id);
    req.set_consumer_index(consumer);
    req.add_completed_task_ids(task);
    proto::ClientHeartbeatResponse resp;
    EXPECT_TRUE(coordinator_->ClientHeartbeat(req, &resp).ok());
    return resp;
  };
  EXPECT_FALSE(report(0).job_finished());
  for (int i = 0; i < 11; ++i) {  // 55 s: consumer 1 silent but not yet gone
    clock_.Advance(absl::Seconds(5));
    EXPECT_THAT(Heartbeat("w1:1", {task}).tasks_to_stop(), IsEmpty());
    EXPECT_FALSE(report(0).job_finished());
  }
  clock_.Advance(absl::Seconds(5));  // 60 s: consumer 1 is gone
  EXPECT_TRUE(report(0).job_finished());
  EXPECT_THAT(Heartbeat("w1:1", {task}).tasks_to_stop(), ElementsAre(task));
  EXPECT_THAT(log_, ::testing::Contains(HasSubstr("but the gone ones (1)")));
}

// Consumers that read a task to its end from a worker count when that worker says so
// (TaskProgress.ended_consumers), whichever worker runs the task by then: they may have exited
// while the coordinator was down, never to report it themselves. Here consumer 0 read the task
// from w1, which then died; consumer 1 read it from w2, which it moved to. Neither worker
// drained it (each saw one consumer's end), and neither consumer reported: it is finished.
TEST_F(CoordinatorTest, ConsumersAWorkerSawReadATaskToItsEndCount) {
  const auto [job_id, task] = TwoConsumersOneTaskOnW1();
  ASSERT_GE(task, 0);
  auto ended = [&](const std::string& address, int64_t consumer) {
    proto::WorkerHeartbeatRequest req;
    req.set_wire_version(proto::WIRE_VERSION_1);
    req.set_worker_address(address);
    req.add_active_task_ids(task);
    proto::TaskProgress* p = req.add_task_progress();
    p->set_task_id(task);
    p->add_ended_consumers(consumer);
    p->add_ended_consumers(7);  // not a consumer of the job: ignored
    proto::WorkerHeartbeatResponse resp;
    EXPECT_TRUE(coordinator_->WorkerHeartbeat(req, &resp).ok());
    return resp;
  };
  EXPECT_THAT(ended("w1:1", 0).tasks_to_stop(), IsEmpty());
  EXPECT_FALSE(Client(job_id, 0).tasks(0).finished());
  Heartbeat("w2:1");
  clock_.Advance(absl::Seconds(6));
  Heartbeat("w2:1");
  clock_.Advance(absl::Seconds(6));  // w1 silent for 12 s
  coordinator_->CheckWorkerLiveness();
  ASSERT_EQ(Heartbeat("w2:1").new_tasks_size(), 1);  // moved
  EXPECT_THAT(ended("w2:1", 1).tasks_to_stop(), ElementsAre(task));
  EXPECT_TRUE(Client(job_id, 0).job_finished());
}

// Without any consumer's report, gone consumers alone do not finish a task (its worker
// drains it when it has served the others).
TEST_F(CoordinatorTest, GoneConsumersAloneDoNotFinishATask) {
  const auto [job_id, task] = TwoConsumersOneTaskOnW1();
  ASSERT_GE(task, 0);
  for (int i = 0; i < 14; ++i) {
    clock_.Advance(absl::Seconds(5));
    EXPECT_THAT(Heartbeat("w1:1", {task}).tasks_to_stop(), IsEmpty());
  }
  EXPECT_FALSE(Client(job_id, 0).job_finished());
}

// ----- Isolation (docs/SERVICE.md): a job being planned does not hold the coordinator's lock.

// The planner of one job is blocked (as by a slow file system building a record index): the
// coordinator meanwhile serves worker heartbeats, another job's creation and its consumers'
// heartbeats, and its status. No timing: the first job stays blocked until the others are done.
TEST_F(CoordinatorTest, ASlowPlanDoesNotDelayOtherRequests) {
  absl::Notification planning, release;
  std::string slow_ds;
  CoordinatorOptions options = coordinator_->options();
  options.before_planning = [&](absl::string_view dataset_id) {
    if (dataset_id != slow_ds) return;
    planning.Notify();
    release.WaitForNotification();
  };
  coordinator_ = Coordinator::Create(options).value();
  slow_ds = Register("range(100).batch(2)");
  const std::string fast_ds = Register("range(10).batch(2)");
  Heartbeat("w1:1");
  absl::StatusOr<proto::GetOrCreateJobResponse> slow;
  std::thread planner([&] { slow = Job("slow", Options(slow_ds)); });
  planning.WaitForNotification();
  // All of these would wait for the lock if planning held it.
  Heartbeat("w1:1");
  Heartbeat("w2:1");
  auto fast = Job("fast", Options(fast_ds));
  ASSERT_TRUE(fast.ok()) << fast.status();
  EXPECT_EQ(Client(fast->job_id()).tasks_size(), 2);
  EXPECT_EQ(Status().jobs_size(), 1);
  release.Notify();
  planner.join();
  ASSERT_TRUE(slow.ok()) << slow.status();
  EXPECT_TRUE(slow->created());
  EXPECT_EQ(Status().jobs_size(), 2);
}

// A caller that gives up while its job plans (planning reads the data and may take long; the
// gRPC service passes ServerContext::IsCancelled) gets CANCELLED and the coordinator creates
// nothing for it: no job, no task, and a later call with the same name creates the job.
TEST_F(CoordinatorTest, ACallCancelledWhileItsJobPlansCreatesNothing) {
  std::atomic<int> plans{0};
  std::atomic<bool> gave_up{false};
  CoordinatorOptions options = coordinator_->options();
  options.before_planning = [&](absl::string_view) {
    if (plans.fetch_add(1) == 0) gave_up = true;  // the first caller gives up while it plans
  };
  coordinator_ = Coordinator::Create(options).value();
  const std::string ds = Register("range(10).batch(2)");
  Heartbeat("w1:1");
  proto::GetOrCreateJobRequest req;
  req.set_wire_version(proto::WIRE_VERSION_1);
  req.set_job_name("train");
  *req.mutable_options() = Options(ds);
  proto::GetOrCreateJobResponse resp;
  const absl::Status s =
      coordinator_->GetOrCreateJob(req, &resp, "", [&] { return gave_up.load(); });
  EXPECT_EQ(s.code(), absl::StatusCode::kCancelled) << s;
  EXPECT_EQ(s.message(), "the caller cancelled the call");
  EXPECT_EQ(plans.load(), 1);
  EXPECT_EQ(Status().jobs_size(), 0) << "a job was created for a call nobody waited for";
  EXPECT_EQ(coordinator_->TEST_TableSizes().tasks, 0u);
  gave_up = false;
  const absl::Status again =
      coordinator_->GetOrCreateJob(req, &resp, "", [&] { return gave_up.load(); });
  ASSERT_TRUE(again.ok()) << again;
  EXPECT_TRUE(resp.created());
  EXPECT_EQ(Status().jobs_size(), 1);
}

// Two requests for the same named job plan side by side: one creates it, the other gets it.
TEST_F(CoordinatorTest, ConcurrentRequestsForOneNamedJobMakeItOnce) {
  absl::Notification planning, release;
  std::atomic<int> calls{0};
  CoordinatorOptions options = coordinator_->options();
  options.before_planning = [&](absl::string_view) {
    if (calls.fetch_add(1) != 0) return;  // only the first request waits
    planning.Notify();
    release.WaitForNotification();
  };
  coordinator_ = Coordinator::Create(options).value();
  const std::string ds = Register("range(10).batch(2)");
  Heartbeat("w1:1");
  absl::StatusOr<proto::GetOrCreateJobResponse> first;
  std::thread t([&] { first = Job("shared", Options(ds)); });
  planning.WaitForNotification();
  auto second = Job("shared", Options(ds));
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_TRUE(second->created());
  release.Notify();
  t.join();
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_FALSE(first->created());
  EXPECT_EQ(first->job_id(), second->job_id());
  EXPECT_EQ(Status().jobs_size(), 1);
  // Different options still fail, after planning too.
  proto::JobOptions other = Options(ds, proto::SHARDING_DATA, 2);
  EXPECT_EQ(Job("shared", other).status().code(), absl::StatusCode::kInvalidArgument);
}

// ----- Client heartbeats and specs.

TEST_F(CoordinatorTest, ClientHeartbeatValidatesItsJobAndConsumer) {
  const std::string ds = Register("range(10).batch(2)");
  Heartbeat("w1:1");
  auto job = Job("j", Options(ds, proto::SHARDING_DATA, 2));
  ASSERT_TRUE(job.ok());
  proto::ClientHeartbeatRequest req;
  req.set_wire_version(proto::WIRE_VERSION_1);
  req.set_job_id(42);
  proto::ClientHeartbeatResponse resp;
  EXPECT_EQ(coordinator_->ClientHeartbeat(req, &resp).code(), absl::StatusCode::kNotFound);
  req.set_job_id(job->job_id());
  req.set_consumer_index(2);
  absl::Status s = coordinator_->ClientHeartbeat(req, &resp);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("consumer_index"));
  req.set_consumer_index(1);
  EXPECT_TRUE(coordinator_->ClientHeartbeat(req, &resp).ok());
}

TEST_F(CoordinatorTest, ElementSpecIsThePerReplicaSpecOfTheLayout) {
  const std::string ds = Register("range(8).repeat().batch(4, drop_remainder=True)");
  Heartbeat("w1:1");
  auto expect_batch = [&](const proto::GetElementSpecRequest& req, int64_t batch,
                          int64_t replicas) {
    proto::GetElementSpecResponse resp;
    absl::Status s = coordinator_->GetElementSpec(req, &resp);
    ASSERT_TRUE(s.ok()) << s;
    EXPECT_EQ(resp.num_replicas(), replicas);
    auto spec = ElementSpecFromProto(resp.per_replica_spec());
    ASSERT_TRUE(spec.ok());
    EXPECT_EQ(spec->leaf().shape, Shape({batch}));
  };
  proto::GetElementSpecRequest by_options;
  *by_options.mutable_options() = Options(ds, proto::SHARDING_DATA, 2, 2);
  expect_batch(by_options, 1, 2);  // 4 split over 2 x 2 replicas
  by_options.mutable_options()->set_read_mode(proto::READ_MODE_INDEPENDENT);
  expect_batch(by_options, 2, 2);  // each consumer's batch over its 2 replicas

  auto job = Job("", Options(ds, proto::SHARDING_DATA, 1, 4));
  ASSERT_TRUE(job.ok());
  proto::GetElementSpecRequest by_job;
  by_job.set_job_id(job->job_id());
  expect_batch(by_job, 1, 4);

  proto::GetElementSpecResponse resp;
  by_job.set_job_id(77);
  EXPECT_EQ(coordinator_->GetElementSpec(by_job, &resp).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(coordinator_->GetElementSpec(proto::GetElementSpecRequest(), &resp).code(),
            absl::StatusCode::kInvalidArgument);
  *by_options.mutable_options() = Options("ds-nope");
  EXPECT_EQ(coordinator_->GetElementSpec(by_options, &resp).code(), absl::StatusCode::kNotFound);
  *by_options.mutable_options() = Options(ds, proto::SHARDING_DATA, 0);
  EXPECT_EQ(coordinator_->GetElementSpec(by_options, &resp).code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace sluice
