// A worker's StreamSteps facing consumers it cannot trust (docs/SERVICE.md, "The data plane
// trusts no peer"): hostile credit grants neither wrap the credit nor are ignored, compact specs
// are bounded and must match the task, two processes claiming one consumer_index are told so
// while a reconnect of the same one still works, an independent consumer that never
// acknowledges stops at its window while another reads everything, and private replays are
// bounded. A real GrpcWorkerService on port 0 and raw consumers; waits are on the worker's
// state or on the stream, bounded only as a liveness guard.
#include <algorithm>
#include <cstdint>
#include <limits>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "core/rpc/grpc_status.h"
#include "core/rpc/shm_ring.h"
#include "core/rpc/shm_segment.h"
#include "core/rpc/step_frame.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/impl/rpc_method.h"
#include "grpcpp/support/sync_stream.h"
#include "gtest/gtest.h"
#include "sluice/dataset.h"
#include "tests/worker/scalar_steps_task.h"
#include "worker/grpc_worker_service.h"
#include "worker/step_placement.h"
#include "worker/stream_request.h"
#include "worker/task_runner.h"

namespace sluice {
namespace {

constexpr absl::Duration kStuck = absl::Seconds(60);  // liveness bound only
constexpr int64_t kCost = 8 + static_cast<int64_t>(kStepCreditOverheadBytes);

proto::TaskDef Task(proto::ReadMode mode) {
  proto::TaskDef task;
  task.set_task_id(1);
  task.set_job_id(1);
  task.set_num_tasks(1);
  task.mutable_job()->set_num_consumers(1);
  task.mutable_job()->set_replicas_per_consumer(1);
  task.mutable_job()->set_read_mode(mode);
  return task;
}

// A task of `steps` int64 scalar steps 0, 1, ... (8 bytes each).
std::shared_ptr<TaskRunner> ScalarTask(proto::ReadMode mode, int64_t steps,
                                       size_t buffer_bytes = size_t{1} << 20) {
  TaskRunnerOptions options;
  options.buffer_bytes = buffer_bytes;
  return TaskRunner::StartWith(Task(mode), options, ScalarStepProducer(steps));
}

class OneTask : public TaskLookup {
 public:
  explicit OneTask(std::shared_ptr<TaskRunner> runner) : runner_(std::move(runner)) {}
  absl::StatusOr<std::shared_ptr<TaskRunner>> FindTask(int64_t, int64_t) override {
    return runner_;
  }
  TaskRunner* runner() { return runner_.get(); }

 private:
  std::shared_ptr<TaskRunner> runner_;
};

// A GrpcWorkerService serving `tasks` on a loopback port.
class Worker {
 public:
  explicit Worker(TaskLookup* tasks, WorkerServiceOptions options = {}) {
    options.coalesce_wait = absl::ZeroDuration();
    service_ = GrpcWorkerService::Create(tasks, options).value();
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(service_.get());
    server_ = builder.BuildAndStart();
    address_ = absl::StrCat("127.0.0.1:", port);
  }
  ~Worker() { server_->Shutdown(); }
  const std::string& address() const { return address_; }

 private:
  std::unique_ptr<GrpcWorkerService> service_;
  std::unique_ptr<grpc::Server> server_;
  std::string address_;
};

// A raw StreamSteps call.
class Call {
 public:
  Call(const std::string& address, const proto::StreamRequest& request)
      : channel_(grpc::CreateChannel(address, grpc::InsecureChannelCredentials())) {
    context_.set_deadline(absl::ToChronoTime(absl::Now() + kStuck));
    stream_.reset(
        grpc::internal::ClientReaderWriterFactory<grpc::ByteBuffer, grpc::ByteBuffer>::Create(
            channel_.get(),
            grpc::internal::RpcMethod(kStreamStepsMethod,
                                      grpc::internal::RpcMethod::BIDI_STREAMING, channel_),
            &context_));
    proto::ConsumerMessage m;
    *m.mutable_request() = request;
    EXPECT_TRUE(stream_->Write(EncodeConsumerMessage(m)));
    std::shared_ptr<const CompactSpec> spec;
    if (request.compact_headers()) {
      auto parsed = CompactSpec::FromProto(request.compact_spec());
      if (parsed.ok()) spec = std::make_shared<const CompactSpec>(*std::move(parsed));
    }
    decoder_ = std::make_unique<StepFrameDecoder>(TensorAllocator(), std::move(spec));
  }
  ~Call() {
    if (!finished_) {
      context_.TryCancel();
      (void)stream_->Finish();
    }
  }
  // Appends the next frame's values; false when the call ended.
  bool Next(std::vector<int64_t>* values, bool* end) {
    grpc::ByteBuffer bb;
    if (!stream_->Read(&bb)) return false;
    StepFrame frame;
    absl::Status s = decoder_->Decode(bb, &frame);
    EXPECT_TRUE(s.ok()) << s;
    for (const WireStep& w : frame.steps) values->push_back(w.pieces[0][0].data<int64_t>()[0]);
    *end = frame.end_of_task;
    return true;
  }
  // Reads until `n` values in all, the end, or the call's end.
  bool ReadUntil(std::vector<int64_t>* values, size_t n, bool* end) {
    *end = false;
    while (values->size() < n && !*end) {
      if (!Next(values, end)) return false;
    }
    return true;
  }
  void Grant(int64_t bytes, int64_t received, bool shm_declined = false) {
    proto::ConsumerMessage m;
    m.mutable_credit()->set_bytes(bytes);
    m.mutable_credit()->set_received_steps(received);
    if (shm_declined) m.mutable_credit()->set_shm_declined(true);
    (void)stream_->Write(EncodeConsumerMessage(m));
  }
  // Half-closes, reads what is left and returns the call's status.
  absl::Status Finish() {
    stream_->WritesDone();
    grpc::ByteBuffer bb;
    while (stream_->Read(&bb)) {
    }
    finished_ = true;
    return FromGrpcStatus(stream_->Finish());
  }

 private:
  std::shared_ptr<grpc::Channel> channel_;
  grpc::ClientContext context_;
  std::unique_ptr<grpc::ClientReaderWriter<grpc::ByteBuffer, grpc::ByteBuffer>> stream_;
  std::unique_ptr<StepFrameDecoder> decoder_;
  bool finished_ = false;
};

proto::StreamRequest Request(int64_t credit, int64_t window = -1) {
  proto::StreamRequest r;
  r.set_wire_version(proto::WIRE_VERSION_2);
  r.set_job_id(1);
  r.set_task_id(1);
  r.set_initial_credit_bytes(credit);
  r.set_window_bytes(window > 0 ? window : std::max<int64_t>(credit, 1));
  return r;
}

std::vector<int64_t> Iota(int64_t from, int64_t to) {
  std::vector<int64_t> v;
  for (int64_t i = from; i < to; ++i) v.push_back(i);
  return v;
}

TEST(StreamPeerBoundsTest, ANegativeGrantIsRefused) {
  OneTask task(ScalarTask(proto::READ_MODE_COORDINATED, 20));
  Worker worker(&task);
  Call call(worker.address(), Request(0, 10 * kCost));
  call.Grant(-5, 0);
  absl::Status s = call.Finish();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("negative"), std::string::npos) << s;
}

TEST(StreamPeerBoundsTest, HugeGrantsSaturateInsteadOfWrapping) {
  OneTask task(ScalarTask(proto::READ_MODE_COORDINATED, 20));
  Worker worker(&task);
  Call call(worker.address(), Request(0, 10 * kCost));
  // Two grants of INT64_MAX: a wrapping sum would be negative, and nothing would be sent.
  call.Grant(std::numeric_limits<int64_t>::max(), 0);
  call.Grant(std::numeric_limits<int64_t>::max(), 0);
  std::vector<int64_t> got;
  bool end = false;
  ASSERT_TRUE(call.ReadUntil(&got, 21, &end));
  EXPECT_TRUE(end);
  EXPECT_EQ(got, Iota(0, 20));
  EXPECT_TRUE(call.Finish().ok());
}

TEST(StreamPeerBoundsTest, ACompactSpecMustHaveTheTasksLeaves) {
  proto::TaskDef def = Task(proto::READ_MODE_COORDINATED);
  *def.mutable_dataset() = Dataset::Range(10).Batch(2).def();  // one int64 leaf
  auto runner = TaskRunner::Start(def, TaskRunnerOptions{});
  ASSERT_TRUE(runner.ok()) << runner.status();
  ASSERT_EQ((*runner)->piece_leaves(), 1);
  OneTask task(*runner);
  Worker worker(&task);
  auto with_leaves = [](int n) {
    proto::StreamRequest r = Request(1000);
    r.set_compact_headers(true);
    for (int i = 0; i < n; ++i) {
      proto::TensorSpecProto* leaf = r.add_compact_spec();
      leaf->set_dtype(proto::DT_INT64);
      leaf->add_shape(-1);
    }
    return r;
  };
  {
    Call call(worker.address(), with_leaves(2));
    absl::Status s = call.Finish();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_NE(s.message().find("2 leaves"), std::string::npos) << s;
  }
  {
    Call call(worker.address(), with_leaves(kMaxCompactSpecLeaves + 1));
    absl::Status s = call.Finish();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_NE(s.message().find(absl::StrCat("at most ", kMaxCompactSpecLeaves)),
              std::string::npos)
        << s;
  }
  {
    Call call(worker.address(), with_leaves(1));  // the task's own spec works
    std::vector<int64_t> got;
    bool end = false;
    ASSERT_TRUE(call.ReadUntil(&got, 100, &end));
    EXPECT_TRUE(end);
    EXPECT_EQ(got, (std::vector<int64_t>{0, 2, 4, 6, 8}));  // each step's first value
    EXPECT_TRUE(call.Finish().ok());
  }
}

TEST(StreamPeerBoundsTest, ASecondInstanceOfAConsumerIndexIsRefusedAReconnectIsNot) {
  OneTask task(ScalarTask(proto::READ_MODE_COORDINATED, 20));
  Worker worker(&task);
  constexpr uint64_t kFirst = 0x1111;
  constexpr uint64_t kSecond = 0x2222;
  auto request = [](uint64_t instance, int64_t start) {
    proto::StreamRequest r = Request(2 * kCost, 100 * kCost);
    r.set_consumer_instance(instance);
    r.set_start_step(start);
    return r;
  };
  std::vector<int64_t> got;
  bool end = false;
  auto first = std::make_unique<Call>(worker.address(), request(kFirst, 0));
  ASSERT_TRUE(first->ReadUntil(&got, 2, &end));  // its stream is open: it holds index 0
  {
    Call second(worker.address(), request(kSecond, 0));
    absl::Status s = second.Finish();
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
    EXPECT_NE(s.message().find(absl::StrFormat("%016x", kFirst)), std::string::npos) << s;
    EXPECT_NE(s.message().find(absl::StrFormat("%016x", kSecond)), std::string::npos) << s;
  }
  // The same instance reconnecting supersedes its old stream and reads on from step 2.
  Call again(worker.address(), request(kFirst, 2));
  again.Grant(100 * kCost, 0);
  ASSERT_TRUE(again.ReadUntil(&got, 21, &end));
  EXPECT_TRUE(end);
  EXPECT_EQ(got, Iota(0, 20));
  EXPECT_TRUE(again.Finish().ok());
}

TEST(StreamPeerBoundsTest, AConsumerThatNeverAcknowledgesDoesNotHoldTheOthersBack) {
  constexpr int64_t kSteps = 400;
  constexpr int64_t kWindowSteps = 20;
  // A buffer of 64 steps (a consumer may leave 4 x that unacknowledged, more than the window
  // below): the silent consumer's steps are counted in it, and the producer goes on for the
  // others only because that consumer stops at its window.
  OneTask task(ScalarTask(proto::READ_MODE_INDEPENDENT, kSteps, 64 * 8));
  Worker worker(&task);
  proto::StreamRequest silent_request = Request(kSteps * kCost, kWindowSteps * kCost);
  silent_request.set_consumer_id(7);
  Call silent(worker.address(), silent_request);
  // Its window, in the buffer's bytes (8 a step), is 20 x 72 / 8 = 180 steps: it gets those,
  // never acknowledging, with credit for everything, then nothing more.
  const size_t window_steps = kWindowSteps * kCost / 8;
  std::vector<int64_t> silent_got;
  bool end = false;
  ASSERT_TRUE(silent.ReadUntil(&silent_got, window_steps, &end));
  EXPECT_EQ(silent_got, Iota(0, window_steps));

  proto::StreamRequest other_request = Request(10 * kCost, 10 * kCost);
  other_request.set_consumer_id(9);
  Call other(worker.address(), other_request);
  std::vector<int64_t> other_got;
  for (int i = 0; i < kSteps && !end; ++i) {
    const size_t before = other_got.size();
    ASSERT_TRUE(other.Next(&other_got, &end));
    other.Grant(static_cast<int64_t>(other_got.size() - before) * kCost,
                static_cast<int64_t>(other_got.size()));
  }
  EXPECT_TRUE(end);
  // Every step once: the silent consumer's window, the other consumer the rest.
  EXPECT_EQ(other_got, Iota(window_steps, kSteps));
  EXPECT_TRUE(other.Finish().ok());
  // The silent consumer's steps stay (for its reconnect), at most its window.
  EXPECT_LE(task.runner()->buffer()->buffered_bytes(), window_steps * 8);
}

TEST(StreamPeerBoundsTest, PrivateReplaysAreBounded) {
  proto::TaskDef def = Task(proto::READ_MODE_COORDINATED);
  def.mutable_job()->set_sharding_policy(proto::SHARDING_OFF);
  *def.mutable_dataset() = Dataset::Range(40).Batch(2).def();  // 20 steps
  TaskRunnerOptions options;
  options.retention_bytes = 0;
  auto runner = TaskRunner::Start(def, options);
  ASSERT_TRUE(runner.ok()) << runner.status();
  // Consumer 0 reads every step and acknowledges them: nothing is kept.
  {
    auto reader = (*runner)->OpenReader(0, 0);
    ASSERT_TRUE(reader.ok()) << reader.status();
    int64_t read = 0;
    for (int i = 0; i < 1000 && read < 20; ++i) {
      std::vector<std::shared_ptr<const TaskStep>> steps;
      bool end = false;
      ASSERT_TRUE((*reader)->Next(64, 1 << 20, absl::Now() + absl::Seconds(1), &steps, &end).ok());
      read += static_cast<int64_t>(steps.size());
    }
    ASSERT_EQ(read, 20);
    (*reader)->Acknowledge(20);
  }
  // Reading from step 0 again needs a private replay: one slot, so one at a time.
  ReaderOptions open;
  open.replay_slots = std::make_shared<ReplaySlots>(1);
  auto replay = (*runner)->OpenReader(0, 0, open);
  ASSERT_TRUE(replay.ok()) << replay.status();
  EXPECT_TRUE((*replay)->replaying());
  auto refused = (*runner)->OpenReader(0, 0, open);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnavailable) << refused.status();
  EXPECT_NE(refused.status().message().find("max_concurrent_replays"), std::string::npos);
  replay->reset();  // its slot goes back
  auto next = (*runner)->OpenReader(0, 0, open);
  EXPECT_TRUE(next.ok()) << next.status();
  EXPECT_EQ(open.replay_slots->used(), 1);
}

// A consumer on the worker's host that cannot map the segment it was offered answers
// shm_declined: every step comes inline over the call, once and in order, also those the worker
// built in the ring while it waited for the answer (a stream's ring takes its task's steps from
// the offer on, worker/step_placement.h), and the segment is let go at the decline, while the
// call goes on (steps placed in it are moved to ordinary memory), not at the call's end.
TEST(StreamPeerBoundsTest, AConsumerThatDeclinesTheSegmentGetsEveryStepInline) {
  const std::string boot_id = HostBootId();
  if (boot_id.empty()) GTEST_SKIP() << "no boot id here: no shared memory";
  // A buffer of two steps: the producer builds the next ones only as the stream takes them, so
  // some are built while the worker waits for the answer.
  OneTask task(ScalarTask(proto::READ_MODE_COORDINATED, 40, /*buffer_bytes=*/16));
  WorkerServiceOptions options;
  options.close_grace = absl::Hours(1);  // the call ends only when this consumer ends it
  Worker worker(&task, options);
  const int64_t writers = ProcessShmRingCounts().writers_alive;
  const int64_t placed = ProcessStepPlacementCounts().steps_copied_to_ring;
  proto::StreamRequest request = Request(100 * kCost);
  request.mutable_shm_offer()->set_boot_id(boot_id);
  Call call(worker.address(), request);
  std::vector<int64_t> values;
  bool end = false;
  ASSERT_TRUE(call.Next(&values, &end));  // the frame with the offer; the worker waits now
  ASSERT_EQ(ProcessShmRingCounts().writers_alive, writers + 1) << "no segment offered";
  for (int i = 0; i < 2000 && ProcessStepPlacementCounts().steps_copied_to_ring == placed; ++i) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  ASSERT_GT(ProcessStepPlacementCounts().steps_copied_to_ring, placed)
      << "no step built in the ring before the answer";
  call.Grant(0, static_cast<int64_t>(values.size()), /*shm_declined=*/true);
  // To the end: the end of the task may come in a frame after the last step's, and a call
  // half-closed before it is read is a consumer gone (CANCELLED), not a clean end.
  ASSERT_TRUE(call.ReadUntil(&values, 41, &end));
  EXPECT_TRUE(end);
  EXPECT_EQ(values, Iota(0, 40));
  // Let go on the worker's pool after the decline: waited for, the call still open (the
  // bound, a liveness guard, stays under the call's deadline, whose expiry would let go of it).
  for (int i = 0; i < 2000 && ProcessShmRingCounts().writers_alive > writers; ++i) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_EQ(ProcessShmRingCounts().writers_alive, writers) << "the declined segment is kept";
  absl::Status finished = call.Finish();
  EXPECT_TRUE(finished.ok()) << finished;
}

}  // namespace
}  // namespace sluice
