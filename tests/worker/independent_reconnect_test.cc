// Independent reads across a broken call (docs/SERVICE.md, "Independent reads"): the worker
// keeps the steps it sent a consumer (by StreamRequest.consumer_id) until the consumer
// acknowledges them, and a new call of the same consumer gets the unacknowledged ones first, so
// a transient break loses and duplicates nothing. A real GrpcWorkerService on port 0, a task of
// 20 scalar steps, raw consumers of the StreamSteps call; synchronization on the step buffer's
// state, never on time.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "core/rpc/step_frame.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/impl/rpc_method.h"
#include "grpcpp/support/sync_stream.h"
#include "gtest/gtest.h"
#include "worker/cross_trainer_window.h"
#include "worker/grpc_worker_service.h"
#include "worker/task_runner.h"

namespace sluice {
namespace {

constexpr absl::Duration kStuck = absl::Seconds(60);  // liveness bound only
constexpr int64_t kSteps = 20;
constexpr int64_t kCost = 8 + static_cast<int64_t>(kStepCreditOverheadBytes);

class IndependentTask : public TaskLookup {
 public:
  // `cross_trainer`: a task of a job shared across trainers (its buffer is a window).
  explicit IndependentTask(bool cross_trainer = false) {
    proto::TaskDef task;
    task.mutable_job()->mutable_cross_trainer()->set_enabled(cross_trainer);
    task.set_task_id(1);
    task.set_job_id(1);
    task.set_num_tasks(1);
    task.mutable_job()->set_num_consumers(1);
    task.mutable_job()->set_replicas_per_consumer(1);
    task.mutable_job()->set_read_mode(proto::READ_MODE_INDEPENDENT);
    auto produced = std::make_shared<int64_t>(0);
    runner_ = TaskRunner::StartWith(task, TaskRunnerOptions{}, [produced](TaskStep* step,
                                                                         bool* end) {
      *end = *produced == kSteps;
      if (*end) return absl::OkStatus();
      step->task_step = *produced;
      step->num_real_pieces = 1;
      step->pieces = {{Tensor::Scalar<int64_t>(*produced)}};
      step->bytes = 8;
      ++*produced;
      return absl::OkStatus();
    });
  }
  absl::StatusOr<std::shared_ptr<TaskRunner>> FindTask(int64_t, int64_t) override {
    return runner_;
  }
  // Bounded wait until every step is produced and `queued` are still queued (not handed out).
  bool WaitQueued(size_t queued) {
    const absl::Time give_up = absl::Now() + kStuck;
    while (absl::Now() < give_up) {
      StepBuffer::Stats s = runner_->buffer()->stats();
      if (s.steps_produced == kSteps && s.steps == queued) return true;
      absl::SleepFor(absl::Microseconds(200));
    }
    return false;
  }
  size_t buffered_bytes() { return runner_->buffer()->buffered_bytes(); }
  // A shared job: bounded wait until every step is produced and trainer `id` was handed `read`.
  bool WaitTrainerRead(const std::string& id, int64_t read) {
    const absl::Time give_up = absl::Now() + kStuck;
    while (absl::Now() < give_up) {
      CrossTrainerWindow::Stats s = runner_->buffer()->cross_trainer_window()->stats();
      for (const auto& t : s.trainers) {
        if (s.steps_produced == kSteps && t.trainer_id == id && t.steps_read == read) return true;
      }
      absl::SleepFor(absl::Microseconds(200));
    }
    return false;
  }
  CrossTrainerWindow::Stats window_stats() {
    return runner_->buffer()->cross_trainer_window()->stats();
  }

 private:
  std::shared_ptr<TaskRunner> runner_;
};

class Call {
 public:
  // A call of consumer `id` (of trainer `trainer_id` in a shared job) that has received
  // `received` steps, with `credit` bytes.
  Call(const std::string& address, uint64_t id, int64_t received, int64_t credit,
       const std::string& trainer_id = "")
      : channel_(grpc::CreateChannel(address, grpc::InsecureChannelCredentials())) {
    context_.set_deadline(absl::ToChronoTime(absl::Now() + kStuck));
    stream_.reset(
        grpc::internal::ClientReaderWriterFactory<grpc::ByteBuffer, grpc::ByteBuffer>::Create(
            channel_.get(),
            grpc::internal::RpcMethod(kStreamStepsMethod,
                                      grpc::internal::RpcMethod::BIDI_STREAMING, channel_),
            &context_));
    proto::ConsumerMessage m;
    proto::StreamRequest* r = m.mutable_request();
    r->set_wire_version(proto::WIRE_VERSION_2);
    r->set_job_id(1);
    r->set_task_id(1);
    r->set_start_step(received);
    r->set_consumer_id(id);
    r->set_initial_credit_bytes(credit);
    r->set_window_bytes(credit);
    r->set_trainer_id(trainer_id);
    EXPECT_TRUE(stream_->Write(EncodeConsumerMessage(m)));
  }
  ~Call() {
    context_.TryCancel();
    (void)stream_->Finish();
  }
  // Appends the next frame's values; false when the call ended. *end: the frame had the end.
  bool Next(std::vector<int64_t>* values, bool* end) {
    grpc::ByteBuffer bb;
    if (!stream_->Read(&bb)) return false;
    StepFrame frame;
    absl::Status s = DecodeStepFrame(bb, {}, &frame);
    EXPECT_TRUE(s.ok()) << s;
    for (const WireStep& w : frame.steps) values->push_back(w.pieces[0][0].data<int64_t>()[0]);
    *end = frame.end_of_task;
    return true;
  }
  void Grant(int64_t bytes, int64_t received) {
    proto::ConsumerMessage m;
    m.mutable_credit()->set_bytes(bytes);
    m.mutable_credit()->set_received_steps(received);
    EXPECT_TRUE(stream_->Write(EncodeConsumerMessage(m)));
  }
  void HalfClose() { stream_->WritesDone(); }

 private:
  std::shared_ptr<grpc::Channel> channel_;
  grpc::ClientContext context_;
  std::unique_ptr<grpc::ClientReaderWriter<grpc::ByteBuffer, grpc::ByteBuffer>> stream_;
};

// A GrpcWorkerService serving `task` on a loopback port 0, frames sent at once (no
// coalescing wait), at most `max_frame_steps` steps each.
struct Served {
  Served(IndependentTask* task, size_t max_frame_steps)
      : service(task, Options(max_frame_steps)) {
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(&service);
    server = builder.BuildAndStart();
    address = absl::StrCat("127.0.0.1:", port);
  }
  static WorkerServiceOptions Options(size_t max_frame_steps) {
    WorkerServiceOptions options;
    options.max_frame_steps = max_frame_steps;
    options.coalesce_wait = absl::ZeroDuration();
    return options;
  }
  GrpcWorkerService service;
  std::unique_ptr<grpc::Server> server;
  std::string address;
};

std::vector<int64_t> Iota(int64_t n) {
  std::vector<int64_t> v;
  for (int64_t i = 0; i < n; ++i) v.push_back(i);
  return v;
}

TEST(IndependentReconnectTest, ABrokenCallLosesAndDuplicatesNothing) {
  IndependentTask task;
  Served served(&task, /*max_frame_steps=*/2);
  const std::string& address = served.address;
  constexpr uint64_t kId = 77;

  std::vector<int64_t> got;
  bool end = false;
  // Every step buffered before the first call, so that its first frame is full (the producer
  // pushes its first step alone, and then a block).
  ASSERT_TRUE(task.WaitQueued(kSteps));
  {
    // Credit for 10 steps: the worker hands out 10 (in frames of 2); the consumer reads only
    // the first frame, then its call breaks (cancelled) with 8 steps sent and never read.
    Call first(address, kId, 0, 10 * kCost);
    ASSERT_TRUE(task.WaitQueued(kSteps - 10));
    ASSERT_TRUE(first.Next(&got, &end));
    ASSERT_EQ(got, (std::vector<int64_t>{0, 1}));
  }
  // Every step is still buffered: the 10 queued and the 10 handed to the consumer.
  EXPECT_EQ(task.buffered_bytes(), kSteps * 8u);
  {
    // The same consumer calls again, having received 2: it gets 2..9 again first, then the rest.
    Call second(address, kId, 2, 100 * kCost);
    while (!end && second.Next(&got, &end)) {
      second.Grant(0, static_cast<int64_t>(got.size()));  // acknowledge as it reads
    }
    EXPECT_TRUE(end);
    second.HalfClose();
  }
  EXPECT_EQ(got, Iota(kSteps));
}

// The same for a trainer of a job shared across trainers (issue 29): the window keeps what it
// handed the broken call, and the trainer's sequence stays gap-free and duplicate-free while
// another trainer reads every step of its own.
TEST(IndependentReconnectTest, ASharedJobsTrainerLosesAndDuplicatesNothingAcrossABrokenCall) {
  IndependentTask task(/*cross_trainer=*/true);
  Served served(&task, /*max_frame_steps=*/2);
  const std::string& address = served.address;
  constexpr uint64_t kId = 77;

  std::vector<int64_t> got;
  bool end = false;
  {
    // Credit for 10 steps: trainer A's consumer is handed 10, reads the first frame, and its
    // call breaks with 8 steps sent and never read.
    Call first(address, kId, 0, 10 * kCost, "A");
    ASSERT_TRUE(task.WaitTrainerRead("A", 10));
    ASSERT_TRUE(first.Next(&got, &end));
    ASSERT_EQ(got, (std::vector<int64_t>{0, 1}));
  }
  // Trainer B reads all of its own meanwhile.
  std::vector<int64_t> got_b;
  bool end_b = false;
  {
    Call b(address, 88, 0, 100 * kCost, "B");
    while (!end_b && b.Next(&got_b, &end_b)) b.Grant(0, static_cast<int64_t>(got_b.size()));
    b.HalfClose();
  }
  EXPECT_EQ(got_b, Iota(kSteps));
  {
    Call second(address, kId, 2, 100 * kCost, "A");
    while (!end && second.Next(&got, &end)) {
      second.Grant(0, static_cast<int64_t>(got.size()));
    }
    EXPECT_TRUE(end);
    second.HalfClose();
  }
  EXPECT_EQ(got, Iota(kSteps));
  const CrossTrainerWindow::Stats s = task.window_stats();
  EXPECT_EQ(s.steps_produced, kSteps);  // produced once for both trainers
  EXPECT_EQ(s.steps_redelivered, 8);
}

// A consumer that acknowledges as it reads lets the worker release the steps: nothing stays
// buffered once it has acknowledged everything.
TEST(IndependentReconnectTest, AcknowledgedStepsAreReleased) {
  IndependentTask task;
  Served served(&task, WorkerServiceOptions().max_frame_steps);
  Call call(served.address, 5, 0, 10 * kCost);
  ASSERT_TRUE(task.WaitQueued(kSteps - 10));
  std::vector<int64_t> got;
  bool end = false;
  while (got.size() < 10 && call.Next(&got, &end)) {
  }
  ASSERT_EQ(got, Iota(10));
  EXPECT_EQ(task.buffered_bytes(), kSteps * 8u);  // none acknowledged yet
  call.Grant(0, 10);
  const absl::Time give_up = absl::Now() + kStuck;
  while (task.buffered_bytes() != (kSteps - 10) * 8u && absl::Now() < give_up) {
    absl::SleepFor(absl::Microseconds(200));
  }
  EXPECT_EQ(task.buffered_bytes(), (kSteps - 10) * 8u);
}

}  // namespace
}  // namespace sluice
