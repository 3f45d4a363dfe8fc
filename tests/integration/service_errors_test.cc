// Multi-process: bad requests to the real sluice-coordinator and sluice-worker get the status
// code CONVENTIONS.md assigns and a message naming what was wrong, through raw gRPC (what any
// client sees) and through sluicectl (what a user sees); afterwards the servers keep serving:
// a good request succeeds and every process still exits 0 on SIGTERM.
#include <cstdint>
#include <fstream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "core/rpc/step_frame.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "grpcpp/grpcpp.h"
#include "proto/coordinator.grpc.pb.h"
#include "proto/worker.pb.h"
#include "tests/integration/process_cluster.h"

namespace sluice {
namespace {

constexpr char kStreamSteps[] = "/sluice.proto.WorkerService/StreamSteps";
constexpr char kGoodPipeline[] = "range(8).batch(4)";

class ServiceErrorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto cluster = ProcessCluster::Start({.num_workers = 3});
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = *std::move(cluster);
    stub_ = proto::CoordinatorService::NewStub(
        grpc::CreateChannel(cluster_->coordinator(), grpc::InsecureChannelCredentials()));
  }

  // A good request after the bad ones: a whole (small) epoch through the service.
  void ExpectGoodRunSucceeds(const std::string& job) {
    auto r = RunSluicectl({"run", "--coordinator=" + cluster_->coordinator(), "--job=" + job,
                           std::string("--pipeline=") + kGoodPipeline, "--devices=CPU:0,CPU:1",
                           "--format=json", "--retry_deadline=30s"});
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->exit_code, 0) << r->stderr_text << cluster_->Logs();
    EXPECT_EQ(r->stdout_text,
              "{\"step\": 0, \"per_replica\": [{\"dtype\": \"int64\", \"shape\": [2], \"values\": "
              "[0, 1]}, {\"dtype\": \"int64\", \"shape\": [2], \"values\": [2, 3]}]}\n"
              "{\"step\": 1, \"per_replica\": [{\"dtype\": \"int64\", \"shape\": [2], \"values\": "
              "[4, 5]}, {\"dtype\": \"int64\", \"shape\": [2], \"values\": [6, 7]}]}\n");
  }

  void ExpectCleanStop() {
    stub_.reset();  // our idle connection would hold the coordinator's graceful shutdown
    absl::Status stopped = cluster_->StopAll();
    EXPECT_TRUE(stopped.ok()) << stopped;
  }

  std::unique_ptr<grpc::ClientContext> Context() {
    auto c = std::make_unique<grpc::ClientContext>();
    c->set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
    return c;
  }

  std::string RegisterGood() {
    proto::RegisterDatasetRequest req;
    req.set_wire_version(proto::WIRE_VERSION_1);
    req.set_pipeline(kGoodPipeline);
    proto::RegisterDatasetResponse resp;
    grpc::Status s = stub_->RegisterDataset(Context().get(), req, &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return resp.dataset_id();
  }

  std::unique_ptr<ProcessCluster> cluster_;
  std::unique_ptr<proto::CoordinatorService::Stub> stub_;
};

TEST_F(ServiceErrorsTest, CoordinatorRejectsBadRequestsWithTheRightCodeAndKeepsServing) {
  // Malformed expression: INVALID_ARGUMENT with the parser's column.
  {
    proto::RegisterDatasetRequest req;
    req.set_wire_version(proto::WIRE_VERSION_1);
    req.set_pipeline("range(10).batch(");
    proto::RegisterDatasetResponse resp;
    grpc::Status s = stub_->RegisterDataset(Context().get(), req, &resp);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
    EXPECT_TRUE(absl::StrContains(s.error_message(), "pipeline expression, column"))
        << s.error_message();
  }
  // A request without the wire version: FAILED_PRECONDITION naming both versions.
  {
    proto::RegisterDatasetRequest req;
    req.set_pipeline(kGoodPipeline);
    proto::RegisterDatasetResponse resp;
    grpc::Status s = stub_->RegisterDataset(Context().get(), req, &resp);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << s.error_message();
  }
  // Unknown dataset id: NOT_FOUND naming it, for a job and for an element spec.
  const std::string unknown = "ds-00000000deadbeef";
  {
    proto::GetOrCreateJobRequest req;
    req.set_wire_version(proto::WIRE_VERSION_1);
    req.set_job_name("ghost");
    req.mutable_options()->set_dataset_id(unknown);
    req.mutable_options()->set_num_consumers(1);
    req.mutable_options()->set_replicas_per_consumer(2);
    proto::GetOrCreateJobResponse resp;
    grpc::Status s = stub_->GetOrCreateJob(Context().get(), req, &resp);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND) << s.error_message();
    EXPECT_TRUE(absl::StrContains(s.error_message(), unknown)) << s.error_message();

    proto::GetElementSpecRequest spec_req;
    *spec_req.mutable_options() = req.options();
    proto::GetElementSpecResponse spec_resp;
    s = stub_->GetElementSpec(Context().get(), spec_req, &spec_resp);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND) << s.error_message();
    EXPECT_TRUE(absl::StrContains(s.error_message(), unknown)) << s.error_message();
  }
  // Mismatched job options: INVALID_ARGUMENT listing the field with both values.
  const std::string id = RegisterGood();
  {
    proto::GetOrCreateJobRequest req;
    req.set_wire_version(proto::WIRE_VERSION_1);
    req.set_job_name("mismatch");
    proto::JobOptions* o = req.mutable_options();
    o->set_dataset_id(id);
    o->set_num_consumers(2);
    o->set_replicas_per_consumer(2);
    o->set_sharding_policy(proto::SHARDING_DATA);
    proto::GetOrCreateJobResponse resp;
    grpc::Status s = stub_->GetOrCreateJob(Context().get(), req, &resp);
    ASSERT_TRUE(s.ok()) << s.error_message();
    const int64_t job_id = resp.job_id();
    // The same request again joins the same job.
    s = stub_->GetOrCreateJob(Context().get(), req, &resp);
    ASSERT_TRUE(s.ok()) << s.error_message();
    EXPECT_EQ(resp.job_id(), job_id);
    EXPECT_FALSE(resp.created());

    o->set_num_consumers(3);
    s = stub_->GetOrCreateJob(Context().get(), req, &resp);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
    EXPECT_TRUE(absl::StrContains(s.error_message(), "num_consumers")) << s.error_message();
    EXPECT_TRUE(absl::StrContains(s.error_message(), "2")) << s.error_message();
    EXPECT_TRUE(absl::StrContains(s.error_message(), "3")) << s.error_message();
  }
  // Bad options: INVALID_ARGUMENT naming the field.
  {
    proto::GetOrCreateJobRequest req;
    req.set_wire_version(proto::WIRE_VERSION_1);
    req.mutable_options()->set_dataset_id(id);
    req.mutable_options()->set_num_consumers(0);
    req.mutable_options()->set_replicas_per_consumer(2);
    proto::GetOrCreateJobResponse resp;
    grpc::Status s = stub_->GetOrCreateJob(Context().get(), req, &resp);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
    EXPECT_TRUE(absl::StrContains(s.error_message(), "num_consumers")) << s.error_message();
  }
  // Still serving: status answers, and a whole epoch runs.
  auto status = cluster_->Status();
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(status->workers_size(), 3);
  ExpectGoodRunSucceeds("after-bad-rpcs");
  ExpectCleanStop();
}

TEST_F(ServiceErrorsTest, SluicectlReportsTheCoordinatorsErrors) {
  const std::string coordinator = "--coordinator=" + cluster_->coordinator();
  // Malformed expression, parsed by the coordinator.
  {
    auto r = RunSluicectl({"register", coordinator, "--pipeline=range(10).batch("});
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->exit_code, 1) << r->Describe();
    EXPECT_TRUE(absl::StrContains(r->stderr_text, "RegisterDataset on coordinator " +
                                                      cluster_->coordinator()))
        << r->stderr_text;
    EXPECT_TRUE(absl::StrContains(r->stderr_text, "pipeline expression, column")) << r->stderr_text;
  }
  // register is idempotent: the same graph, the same id, however it is spelled.
  {
    auto a = RunSluicectl({"register", coordinator, "--pipeline=range(8).batch(4)"});
    auto b = RunSluicectl({"register", coordinator, "--pipeline=tf.data.Dataset.range(8).batch(4)"});
    ASSERT_TRUE(a.ok() && b.ok());
    ASSERT_EQ(a->exit_code, 0) << a->stderr_text;
    EXPECT_TRUE(absl::StartsWith(a->stdout_text, "ds-")) << a->stdout_text;
    EXPECT_EQ(a->stdout_text.size(), std::string("ds-0123456789abcdef\n").size());
    EXPECT_EQ(a->stdout_text, b->stdout_text);
  }
  // A job joined with other options.
  {
    auto first = RunSluicectl({"run", coordinator, "--job=shared", "--pipeline=range(40).batch(4)",
                               "--devices=CPU:0,CPU:1", "--format=json"});
    ASSERT_TRUE(first.ok());
    ASSERT_EQ(first->exit_code, 0) << first->stderr_text;
  }
  {
    auto r = RunSluicectl({"run", coordinator, "--job=shared", "--pipeline=range(40).batch(4)",
                           "--devices=CPU:0,CPU:1,CPU:2,CPU:3", "--format=json"});
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->exit_code, 1) << r->Describe();
    EXPECT_TRUE(absl::StrContains(r->stderr_text, "GetOrCreateJob")) << r->stderr_text;
    EXPECT_TRUE(absl::StrContains(r->stderr_text, "replicas_per_consumer")) << r->stderr_text;
    EXPECT_TRUE(r->stdout_text.empty()) << r->stdout_text;
  }
  // FILE sharding with fewer files than workers: TF's message.
  {
    const std::string file = cluster_->temp_dir() + "/only.txt";
    std::ofstream(file) << "1\n2\n3\n";
    auto r = RunSluicectl({"run", coordinator, "--job=file",
                           "--pipeline=text_line_dataset(['" + file + "']).batch(2)",
                           "--devices=CPU:0,CPU:1", "--sharding_policy=FILE"});
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->exit_code, 1) << r->Describe();
    EXPECT_TRUE(absl::StrContains(r->stderr_text, "Could not apply FILE based sharding"))
        << r->stderr_text;
  }
  // An unbatched dataset cannot be split over replicas.
  {
    auto r = RunSluicectl({"element-spec", coordinator, "--pipeline=range(8)",
                           "--devices=CPU:0,CPU:1"});
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->exit_code, 1) << r->Describe();
    EXPECT_TRUE(absl::StrContains(r->stderr_text, "batch")) << r->stderr_text;
  }
  // A coordinator that does not answer: UNAVAILABLE after the retry deadline, naming it.
  {
    auto r = RunSluicectl({"status", "--coordinator=127.0.0.1:1", "--retry_deadline=300ms"});
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->exit_code, 1) << r->Describe();
    EXPECT_TRUE(absl::StrContains(r->stderr_text, "127.0.0.1:1")) << r->stderr_text;
  }
  ExpectGoodRunSucceeds("after-bad-sluicectl");
  ExpectCleanStop();
}

// One raw StreamSteps call: writes `message` (already framed), then reads until the end;
// returns the call's status.
grpc::Status RawStream(const std::string& worker, const grpc::ByteBuffer& message) {
  auto channel = grpc::CreateChannel(worker, grpc::InsecureChannelCredentials());
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
  std::unique_ptr<grpc::ClientReaderWriter<grpc::ByteBuffer, grpc::ByteBuffer>> stream(
      grpc::internal::ClientReaderWriterFactory<grpc::ByteBuffer, grpc::ByteBuffer>::Create(
          channel.get(),
          grpc::internal::RpcMethod(kStreamSteps, grpc::internal::RpcMethod::BIDI_STREAMING,
                                    channel),
          &context));
  stream->Write(message);
  stream->WritesDone();
  grpc::ByteBuffer ignored;
  for (int i = 0; i < 1000 && stream->Read(&ignored); ++i) {
  }
  return stream->Finish();
}

TEST_F(ServiceErrorsTest, WorkerRejectsBadStreamsAndKeepsServing) {
  const std::string worker = cluster_->worker_address(0);
  // Bytes that are not a framed ConsumerMessage: INVALID_ARGUMENT (or DATA_LOSS for a frame
  // whose length does not match).
  {
    grpc::Slice slice(std::string("\xff\xff\xff\x7fnot a frame"));
    grpc::ByteBuffer garbage(&slice, 1);
    grpc::Status s = RawStream(worker, garbage);
    EXPECT_TRUE(s.error_code() == grpc::StatusCode::INVALID_ARGUMENT ||
                s.error_code() == grpc::StatusCode::DATA_LOSS)
        << s.error_code() << ": " << s.error_message();
  }
  // A task this worker does not run: UNAVAILABLE (the consumer asks the coordinator again).
  {
    proto::ConsumerMessage m;
    proto::StreamRequest* r = m.mutable_request();
    r->set_wire_version(proto::WIRE_VERSION_2);
    r->set_job_id(4242);
    r->set_task_id(4242);
    r->set_initial_credit_bytes(1);
    r->set_window_bytes(1);
    grpc::Status s = RawStream(worker, EncodeConsumerMessage(m));
    EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE) << s.error_message();
    EXPECT_TRUE(absl::StrContains(s.error_message(), "4242")) << s.error_message();
  }
  // A consumer of the release whose credits were in steps (WIRE_VERSION_1): FAILED_PRECONDITION
  // naming both versions, before anything else is looked at.
  {
    proto::ConsumerMessage m;
    proto::StreamRequest* r = m.mutable_request();
    r->set_wire_version(proto::WIRE_VERSION_1);
    r->set_job_id(4242);
    r->set_task_id(4242);
    grpc::Status s = RawStream(worker, EncodeConsumerMessage(m));
    EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << s.error_message();
    EXPECT_TRUE(absl::StrContains(s.error_message(), "consumer wire version 1, worker wire version 2"))
        << s.error_message();
  }
  // No window: INVALID_ARGUMENT.
  {
    proto::ConsumerMessage m;
    proto::StreamRequest* r = m.mutable_request();
    r->set_wire_version(proto::WIRE_VERSION_2);
    r->set_job_id(4242);
    r->set_task_id(4242);
    grpc::Status s = RawStream(worker, EncodeConsumerMessage(m));
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
    EXPECT_TRUE(absl::StrContains(s.error_message(), "window_bytes")) << s.error_message();
  }
  // A credit grant before any request: INVALID_ARGUMENT.
  {
    proto::ConsumerMessage m;
    m.mutable_credit()->set_bytes(1);
    grpc::Status s = RawStream(worker, EncodeConsumerMessage(m));
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
  }
  ExpectGoodRunSucceeds("after-bad-streams");
  ExpectCleanStop();
}

// One client's pipeline that needs more memory than the workers allow (issue 15: such a job used
// to abort every worker it reached with std::bad_alloc, one after the other): the job fails with
// RESOURCE_EXHAUSTED naming the op and the size, reported to the client; every worker stays up,
// a following job runs, and every process exits 0 on SIGTERM.
TEST(ServiceMemoryLimitTest, AJobOverTheWorkersMemoryLimitFailsAndEveryWorkerKeepsServing) {
  auto cluster = ProcessCluster::Start(
      {.num_workers = 2, .worker_flags = {"--memory_limit=256MiB", "--max_element_bytes=64MiB"}});
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  ProcessCluster& c = **cluster;
  const std::vector<std::pair<std::string, std::string>> bad = {
      // Each worker refuses the batch at its element limit, which no other worker exceeds:
      // the job fails at once (not retried on the worker holding the job's other task, where
      // the process limit could be met first and hide the cause).
      {"from_tensors([1]).repeat().batch(1000000000)",
       "op 2 (batch): a batch of 1000000000 elements needs more than the memory limit of one "
       "element, 67108864 bytes (--max_element_bytes)"},
      {"range(4).map(one_hot(100000000000))",
       "one_hot(100000000000) (int64 []): the one-hot output: a float32 tensor of shape "
       "[100000000000] (400000000256 bytes) needs more than the memory limit of one element, "
       "67108864 bytes"},
      {"range(10000000).shuffle(10000000, seed=1).batch(2)",
       " of the process's memory limit of 268435456 bytes are in use (--memory_limit)"},
  };
  for (size_t i = 0; i < bad.size(); ++i) {
    SCOPED_TRACE(bad[i].first);
    auto r = RunSluicectl({"run", "--coordinator=" + c.coordinator(), absl::StrCat("--job=big", i),
                           "--pipeline=" + bad[i].first, "--devices=CPU:0,CPU:1", "--steps=1",
                           "--retry_deadline=30s"});
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_NE(r->exit_code, 0) << r->stdout_text;
    EXPECT_THAT(r->stderr_text, ::testing::HasSubstr(bad[i].second)) << c.Logs();
    EXPECT_THAT(r->stderr_text, ::testing::Not(::testing::HasSubstr("bad_alloc")));
    if (i < 2) {  // refused at the element limit: not tried on the other worker
      EXPECT_THAT(r->stderr_text, ::testing::HasSubstr("no other live worker has a memory limit "
                                                       "of one element above 67108864 bytes"));
    }
    auto status = c.Status();
    ASSERT_TRUE(status.ok()) << status.status();
    ASSERT_EQ(status->workers_size(), 2);
    for (const proto::WorkerStatus& w : status->workers()) {
      EXPECT_TRUE(w.alive()) << w.address() << "\n" << c.Logs();
    }
  }
  auto good = RunSluicectl({"run", "--coordinator=" + c.coordinator(), "--job=after",
                            std::string("--pipeline=") + kGoodPipeline, "--devices=CPU:0,CPU:1",
                            "--format=json", "--retry_deadline=30s"});
  ASSERT_TRUE(good.ok()) << good.status();
  EXPECT_EQ(good->exit_code, 0) << good->stderr_text << c.Logs();
  EXPECT_THAT(good->stdout_text, ::testing::HasSubstr("\"values\": [6, 7]}]}"));
  absl::Status stopped = c.StopAll();  // FAILED_PRECONDITION if a worker had died
  EXPECT_TRUE(stopped.ok()) << stopped;
}

// Issue 25's pipelines that used to take workers (or sluicectl) down or hang the client: the
// bulk range->batch path (aborted both workers with std::bad_alloc), a bulk map feeding a
// 3-billion batch (grew to 24 GB), a huge shuffle buffer, and two nested batches (each task
// gathered a quarter of the machine, so two workers on one machine ran it out of memory, died,
// and the client waited with no error until its retry deadline). Each now ends in
// RESOURCE_EXHAUSTED naming its op, in-process and through a coordinator and two workers run
// with a 1 GiB limit; both workers stay alive and the next job is served.
TEST(ServiceMemoryLimitTest, Issue25PipelinesFailNamingTheirOpAndEveryWorkerKeepsServing) {
  auto cluster = ProcessCluster::Start({.num_workers = 2, .worker_flags = {"--memory_limit=1GiB"}});
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  ProcessCluster& c = **cluster;
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"range(100000000000).batch(10000000000)",
       "op 1 (batch): a batch of 10000000000 elements: source (range): a tensor of shape "
       "(10000000000,) and dtype int64 needs 80000000000 bytes, more than the memory limit of "
       "one element, 268435456 bytes (--max_element_bytes)"},
      {"range(100000000000).map(cast(tf.int32)).batch(3000000000)",
       "op 2 (batch): a batch of 3000000000 elements: source (range): a tensor of shape "
       "(3000000000,) and dtype int64 needs 24000000000 bytes, more than the memory limit of "
       "one element, 268435456 bytes (--max_element_bytes)"},
      {"range(100000000000).batch(100000).batch(100000)",
       "op 2 (batch): a batch of 100000 elements needs more than the memory limit of one "
       "element, 268435456 bytes (--max_element_bytes)"},
      // Last: it fills each worker's whole process limit, and the task on the other worker
      // may hold its share for a moment after the job failed (until it fails too), during
      // which any job's allocation there is refused.
      {"range(100000000000).shuffle(100000000000, seed=1).batch(2)",
       " of the process's memory limit of 1073741824 bytes are in use (--memory_limit)"},
  };
  for (size_t i = 0; i < bad.size(); ++i) {
    SCOPED_TRACE(bad[i].first);
    // In-process (sluicectl's own limit), then through the service.
    auto local = RunSluicectl({"run", "--pipeline=" + bad[i].first, "--devices=CPU:0,CPU:1",
                               "--steps=1", "--memory_limit=1GiB"});
    ASSERT_TRUE(local.ok()) << local.status();
    EXPECT_EQ(local->exit_code, 1) << local->stdout_text << local->stderr_text;
    EXPECT_THAT(local->stderr_text, ::testing::HasSubstr(bad[i].second));
    auto r = RunSluicectl({"run", "--coordinator=" + c.coordinator(),
                           absl::StrCat("--job=issue25-", i), "--pipeline=" + bad[i].first,
                           "--devices=CPU:0,CPU:1", "--steps=1", "--retry_deadline=30s"});
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_NE(r->exit_code, 0) << r->stdout_text;
    EXPECT_THAT(r->stderr_text, ::testing::HasSubstr(bad[i].second)) << c.Logs();
    EXPECT_THAT(r->stderr_text, ::testing::Not(::testing::HasSubstr("no progress"))) << c.Logs();
    auto status = c.Status();
    ASSERT_TRUE(status.ok()) << status.status();
    ASSERT_EQ(status->workers_size(), 2);
    for (const proto::WorkerStatus& w : status->workers()) {
      EXPECT_TRUE(w.alive()) << w.address() << "\n" << c.Logs();
    }
  }
  // The memory comes back: a small job runs (a few tries, for the moment the shuffle's last
  // task takes to fail on its own).
  absl::StatusOr<SubprocessResult> good;
  for (int attempt = 0; attempt < 10; ++attempt) {
    good = RunSluicectl({"run", "--coordinator=" + c.coordinator(),
                         absl::StrCat("--job=after-issue25-", attempt),
                         std::string("--pipeline=") + kGoodPipeline, "--devices=CPU:0,CPU:1",
                         "--format=json", "--retry_deadline=30s"});
    ASSERT_TRUE(good.ok()) << good.status();
    if (good->exit_code == 0) break;
    absl::SleepFor(absl::Milliseconds(500));
  }
  EXPECT_EQ(good->exit_code, 0) << good->stderr_text << c.Logs();
  EXPECT_THAT(good->stdout_text, ::testing::HasSubstr("\"values\": [6, 7]}]}"));
  absl::Status stopped = c.StopAll();  // FAILED_PRECONDITION if a worker had died
  EXPECT_TRUE(stopped.ok()) << stopped;
}

}  // namespace
}  // namespace sluice
