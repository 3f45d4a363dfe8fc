// ServiceStepSource against an in-process fake coordinator and a fake worker whose StreamSteps
// can "freeze" (like a SIGSTOPped worker process) right after sending a task's end: the call
// then never gets the worker's status, and no TCP error ever comes.
#include "client/service_step_source.h"
#include "client/device_prefetcher.h"

#include <cstdint>
#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "core/rpc/step_frame.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/impl/rpc_service_method.h"
#include "grpcpp/support/client_interceptor.h"
#include "grpcpp/support/method_handler.h"
#include "gtest/gtest.h"
#include "proto/coordinator.grpc.pb.h"
#include "proto/worker.pb.h"
#include "sluice/element.h"
#include "sluice/tensor.h"

namespace sluice {
namespace {

constexpr int64_t kJob = 7;
constexpr int64_t kTasks = 3;
constexpr int64_t kStepsPerTask = 2;
// Liveness bound only: how long a frozen call waits before the test calls the consumer stuck.
constexpr absl::Duration kStuck = absl::Seconds(30);

using Stream = grpc::ServerReaderWriter<grpc::ByteBuffer, grpc::ByteBuffer>;

// Lists the job's kTasks ranges (task id = index + 1), all on one worker.
class FakeCoordinator : public proto::CoordinatorService::Service {
 public:
  explicit FakeCoordinator(std::string worker) : worker_(std::move(worker)) {}

  grpc::Status ClientHeartbeat(grpc::ServerContext*, const proto::ClientHeartbeatRequest* request,
                               proto::ClientHeartbeatResponse* response) override {
    {
      absl::MutexLock lock(&mu_);
      input_wait_us_ += request->input_wait_us();
    }
    response->set_num_tasks(kTasks);
    response->set_num_tasks_created(kTasks);
    for (int64_t i = 0; i < kTasks; ++i) {
      proto::TaskInfo* t = response->add_tasks();
      t->set_task_id(i + 1);
      t->set_task_index(i);
      t->set_worker_address(worker_);
      t->set_first_step(i * kStepsPerTask);
      t->set_num_steps(kStepsPerTask);
    }
    return grpc::Status::OK;
  }

  // The trainer's input wait the consumer reported so far, in all (docs/AUTOSCALING.md).
  int64_t input_wait_us() {
    absl::MutexLock lock(&mu_);
    return input_wait_us_;
  }

 private:
  const std::string worker_;
  absl::Mutex mu_;
  int64_t input_wait_us_ ABSL_GUARDED_BY(mu_) = 0;
};

// Task index i has the int64 scalars 2i, 2i + 1; one frame carries both steps and the end. The
// task with index `frozen_index` then freezes: it neither reads the consumer's half-close nor
// returns, until Release() or the call is cancelled. Each call sends its frame `delay` after
// the request.
class FakeWorker : public grpc::Service {
 public:
  explicit FakeWorker(int64_t frozen_index, absl::Duration delay = absl::ZeroDuration())
      : frozen_index_(frozen_index), delay_(delay) {
    AddMethod(new grpc::internal::RpcServiceMethod(
        "/sluice.proto.WorkerService/StreamSteps", grpc::internal::RpcMethod::BIDI_STREAMING,
        new grpc::internal::BidiStreamingHandler<FakeWorker, grpc::ByteBuffer, grpc::ByteBuffer>(
            [](FakeWorker* w, grpc::ServerContext* context, Stream* stream) {
              return w->StreamSteps(context, stream);
            },
            this)));
  }

  void Release() {
    absl::MutexLock lock(&mu_);
    released_ = true;
  }
  // Waits (bounded by kStuck) until the frozen call has ended; true if it was cancelled while
  // frozen (not released, not given up).
  bool WaitForFrozenCallCancelled() {
    absl::MutexLock lock(&mu_);
    mu_.AwaitWithTimeout(absl::Condition(&frozen_done_), kStuck + absl::Seconds(5));
    return cancelled_while_frozen_;
  }
  bool gave_up() {
    absl::MutexLock lock(&mu_);
    return gave_up_;
  }
  // Waits (bounded by kStuck) until `calls` unfrozen calls have ended; the task indexes whose
  // call ended with the consumer's half-close after the end frame (not cancelled), sorted.
  std::vector<int64_t> WaitForHalfClosedAfterEnd(size_t calls) {
    absl::MutexLock lock(&mu_);
    auto done = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return half_closed_after_end_.size() + cancelled_after_end_.size() >= calls;
    };
    mu_.AwaitWithTimeout(absl::Condition(&done), kStuck);
    std::vector<int64_t> out = half_closed_after_end_;
    std::sort(out.begin(), out.end());
    return out;
  }

 private:
  grpc::Status StreamSteps(grpc::ServerContext* context, Stream* stream) {
    grpc::ByteBuffer bb;
    if (!stream->Read(&bb)) return grpc::Status(grpc::StatusCode::CANCELLED, "no request");
    proto::ConsumerMessage m;
    if (!DecodeConsumerMessage(bb, &m).ok() || !m.has_request()) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "bad request");
    }
    const int64_t index = m.request().task_id() - 1;
    StepFrame frame;
    for (int64_t s = m.request().start_step(); s < kStepsPerTask; ++s) {
      WireStep w;
      w.task_step = s;
      w.global_step = index * kStepsPerTask + s;
      w.num_real_pieces = 1;
      w.pieces.push_back({Tensor::Scalar<int64_t>(index * kStepsPerTask + s)});
      frame.steps.push_back(std::move(w));
    }
    frame.end_of_task = true;
    absl::SleepFor(delay_);
    grpc::ByteBuffer out;
    if (!EncodeStepFrame(frame, &out).ok() || !stream->Write(out)) {
      return grpc::Status(grpc::StatusCode::INTERNAL, "write failed");
    }
    if (index != frozen_index_) {
      while (stream->Read(&bb)) {
      }
      absl::MutexLock lock(&mu_);
      // What a real worker counts as this consumer's end (worker/step_stream.cc).
      (context->IsCancelled() ? cancelled_after_end_ : half_closed_after_end_).push_back(index);
      return grpc::Status::OK;
    }
    // Frozen: no read, no status.
    absl::MutexLock lock(&mu_);
    const absl::Time give_up = absl::Now() + kStuck;
    while (!released_ && !context->IsCancelled()) {
      if (absl::Now() >= give_up) {
        gave_up_ = true;
        break;
      }
      mu_.AwaitWithTimeout(absl::Condition(&released_), absl::Milliseconds(20));
    }
    cancelled_while_frozen_ = !released_ && !gave_up_ && context->IsCancelled();
    frozen_done_ = true;
    return grpc::Status(grpc::StatusCode::UNAVAILABLE, "thawed");
  }

  const int64_t frozen_index_;
  const absl::Duration delay_;
  absl::Mutex mu_;
  bool released_ ABSL_GUARDED_BY(mu_) = false;
  bool gave_up_ ABSL_GUARDED_BY(mu_) = false;
  bool cancelled_while_frozen_ ABSL_GUARDED_BY(mu_) = false;
  bool frozen_done_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<int64_t> half_closed_after_end_ ABSL_GUARDED_BY(mu_);
  std::vector<int64_t> cancelled_after_end_ ABSL_GUARDED_BY(mu_);
};

class Servers {
 public:
  explicit Servers(int64_t frozen_index, absl::Duration delay = absl::ZeroDuration())
      : worker_(frozen_index, delay) {
    int port = 0;
    grpc::ServerBuilder wb;
    wb.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    wb.RegisterService(&worker_);
    worker_server_ = wb.BuildAndStart();
    worker_address_ = "127.0.0.1:" + std::to_string(port);
    coordinator_ = std::make_unique<FakeCoordinator>(worker_address_);
    grpc::ServerBuilder cb;
    cb.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    cb.RegisterService(coordinator_.get());
    coordinator_server_ = cb.BuildAndStart();
    coordinator_address_ = "127.0.0.1:" + std::to_string(port);
  }
  ~Servers() {
    worker_.Release();
    coordinator_server_->Shutdown();
    worker_server_->Shutdown();
  }

  FakeWorker& worker() { return worker_; }
  FakeCoordinator& coordinator() { return *coordinator_; }
  const std::string& coordinator_address() const { return coordinator_address_; }

 private:
  FakeWorker worker_;
  std::unique_ptr<FakeCoordinator> coordinator_;
  std::unique_ptr<grpc::Server> worker_server_;
  std::unique_ptr<grpc::Server> coordinator_server_;
  std::string worker_address_;
  std::string coordinator_address_;
};

ServiceStepSourceOptions SequentialOptions(const std::string& coordinator) {
  ServiceStepSourceOptions o;
  o.coordinator_address = coordinator;
  o.job_id = kJob;
  o.consumer_index = 0;
  o.num_local_replicas = 1;
  o.per_replica_spec = ElementSpec(TensorSpec{DType::kInt64, Shape()});
  o.sequential = true;
  o.retry_deadline = absl::Seconds(60);
  return o;
}

// Reads to the end of data: the values, or the error.
absl::StatusOr<std::vector<int64_t>> ReadAll(StepSource& source) {
  std::vector<int64_t> values;
  for (int i = 0; i < 1000; ++i) {
    std::vector<Element> replicas;
    bool end = false;
    absl::Status s = source.GetNextStep(&replicas, &end);
    if (!s.ok()) return s;
    if (end) return values;
    if (replicas.size() != 1 || !replicas[0].is_leaf()) {
      return absl::InternalError("expected one replica holding one tensor");
    }
    values.push_back(*replicas[0].leaf().data<int64_t>());
  }
  return absl::InternalError("no end of data after 1000 steps");
}

std::vector<int64_t> AllValues() {
  std::vector<int64_t> v;
  for (int64_t i = 0; i < kTasks * kStepsPerTask; ++i) v.push_back(i);
  return v;
}

// The frozen worker sent task 0's end and never sends the call's status. The consumer has
// every step of task 0 and its end: it must read on (tasks 1 and 2, opened one at a time by the
// monitor) while the worker stays frozen, without waiting for that status.
TEST(ServiceStepSourceTest, AWorkerFrozenAfterATasksEndDoesNotStopTheConsumer) {
  Servers servers(/*frozen_index=*/0);
  ServiceStepSourceOptions o = SequentialOptions(servers.coordinator_address());
  o.max_open_tasks = 1;  // the next task opens only through the monitor
  o.end_grace = absl::InfiniteDuration();  // nothing cancels the frozen call before the end
  auto source = ServiceStepSource::Create(o);
  ASSERT_TRUE(source.ok()) << source.status();
  absl::StatusOr<std::vector<int64_t>> got = ReadAll(**source);
  servers.worker().Release();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, AllValues());
  EXPECT_FALSE(servers.worker().gave_up())
      << "the consumer read on only once the frozen worker's call gave up";
  source->reset();  // joins every reader
}

// A host-path DevicePrefetcher reads the service's source on the trainer's thread
// (client/read_ahead_source.h): the source then still times the trainer's waits for its
// heartbeats, as it does unwrapped. Every frame comes 300 ms after its request, longer than the
// monitor's heartbeat interval, so a report is taken while the trainer waits.
TEST(ServiceStepSourceTest, UnderAHostPathPrefetcherTheTrainersWaitIsStillReported) {
  Servers servers(/*frozen_index=*/-1, /*delay=*/absl::Milliseconds(300));
  ServiceStepSourceOptions o = SequentialOptions(servers.coordinator_address());
  o.heartbeat_interval = absl::Milliseconds(50);
  auto source = ServiceStepSource::Create(o);
  ASSERT_TRUE(source.ok()) << source.status();
  DevicePrefetchOptions on_the_cpu;
  on_the_cpu.replicas.resize(1);
  on_the_cpu.buffer_size = 2;
  absl::StatusOr<std::unique_ptr<StepSource>> prefetcher =
      DevicePrefetcher::Wrap(*std::move(source), on_the_cpu);
  ASSERT_TRUE(prefetcher.ok()) << prefetcher.status();
  absl::StatusOr<std::vector<int64_t>> got = ReadAll(**prefetcher);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, AllValues());
  EXPECT_GT(servers.coordinator().input_wait_us(), 0) << "the trainer's waits went unreported";
  prefetcher->reset();
}

// The monitor cancels a call that got its end but no status end_grace later, which frees the
// reader thread while the worker is still frozen.
TEST(ServiceStepSourceTest, TheMonitorCancelsACallWaitingForAFrozenWorkersStatus) {
  Servers servers(/*frozen_index=*/1);
  ServiceStepSourceOptions o = SequentialOptions(servers.coordinator_address());
  o.end_grace = absl::Milliseconds(50);
  o.heartbeat_interval = absl::Milliseconds(20);
  auto source = ServiceStepSource::Create(o);
  ASSERT_TRUE(source.ok()) << source.status();
  absl::StatusOr<std::vector<int64_t>> got = ReadAll(**source);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, AllValues());
  // The source is still alive (its destructor would cancel too): only the monitor cancels.
  EXPECT_TRUE(servers.worker().WaitForFrozenCallCancelled());
  EXPECT_FALSE(servers.worker().gave_up());
  source->reset();
}

// Delays every StreamSteps call's half-close (WritesDone) by `delay`: a reader thread descheduled between
// handing a task's end to the consumer and half-closing, as on a loaded machine.
class SlowHalfCloseInterceptor : public grpc::experimental::Interceptor {
 public:
  explicit SlowHalfCloseInterceptor(absl::Duration delay) : delay_(delay) {}
  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            grpc::experimental::InterceptionHookPoints::PRE_SEND_CLOSE)) {
      absl::SleepFor(delay_);
    }
    methods->Proceed();
  }

 private:
  const absl::Duration delay_;
};

class SlowHalfCloseFactory : public grpc::experimental::ClientInterceptorFactoryInterface {
 public:
  explicit SlowHalfCloseFactory(absl::Duration delay) : delay_(delay) {}
  grpc::experimental::Interceptor* CreateClientInterceptor(
      grpc::experimental::ClientRpcInfo* info) override {
    // Only the workers' streams: the trainer's last heartbeat to the coordinator (which may be
    // down) must not be slowed too.
    if (absl::string_view(info->method()) != "/sluice.proto.WorkerService/StreamSteps") {
      return nullptr;
    }
    return new SlowHalfCloseInterceptor(delay_);
  }

 private:
  const absl::Duration delay_;
};

// A trainer that shuts its source down the moment it has the last step and the end of data
// (the coordinator may be down, so the workers' count of its ends is the only record that it
// read every task) still half-closes every task's call: Shutdown lets a call whose end was
// handed over finish rather than cancelling it, even when the reader thread has not half-closed
// yet. Before the fix the end was noted only after the half-close, and this shutdown cancelled
// the last task's call (FaultTest.CoordinatorKilledAndRestartedMidEpoch/Data then left its job
// unfinished about 1 run in 40 under load).
TEST(ServiceStepSourceTest, ShutdownRightAfterTheEndLetsEveryEndedCallHalfClose) {
  Servers servers(/*frozen_index=*/-1);
  ServiceStepSourceOptions o = SequentialOptions(servers.coordinator_address());
  o.channel_factory = [](const std::string& address) {
    std::vector<std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>> slow;
    slow.push_back(std::make_unique<SlowHalfCloseFactory>(absl::Milliseconds(300)));
    return grpc::experimental::CreateCustomChannelWithInterceptors(
        address, grpc::InsecureChannelCredentials(), grpc::ChannelArguments(), std::move(slow));
  };
  auto source = ServiceStepSource::Create(o);
  ASSERT_TRUE(source.ok()) << source.status();
  absl::StatusOr<std::vector<int64_t>> got = ReadAll(**source);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, AllValues());
  source->reset();  // at once, as a trainer exiting after its last step
  EXPECT_EQ(servers.worker().WaitForHalfClosedAfterEnd(kTasks), (std::vector<int64_t>{0, 1, 2}))
      << "a task's call was cancelled after its end arrived: the worker never counts that end";
}

// A worker whose first call of each task breaks in the middle of the task: it sends a frame of
// steps 0-2 and fails the call with UNAVAILABLE, as a worker does whose connection breaks while
// the frame of steps 3-5 is on its way (that frame never arrives). Later calls send the task
// from the requested step to its end (step 5) in one frame. Task index i's steps hold
// 100 i + s. Frames have compact headers when the request asks for them (as the real worker's).
class BreakingWorker : public grpc::Service {
 public:
  static constexpr int64_t kSteps = 6;
  BreakingWorker() {
    AddMethod(new grpc::internal::RpcServiceMethod(
        "/sluice.proto.WorkerService/StreamSteps", grpc::internal::RpcMethod::BIDI_STREAMING,
        new grpc::internal::BidiStreamingHandler<BreakingWorker, grpc::ByteBuffer,
                                                 grpc::ByteBuffer>(
            [](BreakingWorker* w, grpc::ServerContext*, Stream* stream) {
              return w->StreamSteps(stream);
            },
            this)));
  }
  // Whether every request asked for compact headers with the spec [int64 ()]; whether none did.
  bool all_compact() {
    absl::MutexLock lock(&mu_);
    return compact_ == requests_;
  }
  bool none_compact() {
    absl::MutexLock lock(&mu_);
    return compact_ == 0;
  }
  // The start_step of every request of task index i, in order.
  std::vector<int64_t> starts(int64_t index) {
    absl::MutexLock lock(&mu_);
    return starts_[index];
  }

 private:
  grpc::Status StreamSteps(Stream* stream) {
    grpc::ByteBuffer bb;
    if (!stream->Read(&bb)) return grpc::Status(grpc::StatusCode::CANCELLED, "no request");
    proto::ConsumerMessage m;
    if (!DecodeConsumerMessage(bb, &m).ok() || !m.has_request()) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "bad request");
    }
    const int64_t index = m.request().task_id() - 1;
    const int64_t start = m.request().start_step();
    bool first;
    std::shared_ptr<const CompactSpec> spec;
    if (m.request().compact_headers()) {
      absl::StatusOr<CompactSpec> parsed = CompactSpec::FromProto(m.request().compact_spec());
      if (!parsed.ok()) return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "bad spec");
      spec = std::make_shared<const CompactSpec>(*std::move(parsed));
    }
    {
      absl::MutexLock lock(&mu_);
      first = starts_[index].empty();
      starts_[index].push_back(start);
      ++requests_;
      if (spec != nullptr &&
          spec->leaves() == std::vector<TensorSpec>{TensorSpec{DType::kInt64, Shape()}}) {
        ++compact_;
      }
    }
    StepFrame frame;
    const int64_t stop = first ? std::min<int64_t>(start + 3, kSteps) : kSteps;
    for (int64_t s = start; s < stop; ++s) {
      WireStep w;
      w.task_step = s;
      w.num_real_pieces = 1;
      w.pieces.push_back({Tensor::Scalar<int64_t>(index * 100 + s)});
      frame.steps.push_back(std::move(w));
    }
    frame.end_of_task = !first;
    grpc::ByteBuffer out;
    StepFrameEncoder encoder(spec);
    if (!encoder.Encode(frame, &out).ok() || !stream->Write(out) ||
        encoder.last_compact() != (spec != nullptr)) {
      return grpc::Status(grpc::StatusCode::INTERNAL, "write failed");
    }
    if (first) return grpc::Status(grpc::StatusCode::UNAVAILABLE, "connection broke mid-task");
    while (stream->Read(&bb)) {
    }
    return grpc::Status::OK;
  }

  absl::Mutex mu_;
  std::map<int64_t, std::vector<int64_t>> starts_ ABSL_GUARDED_BY(mu_);
  int64_t requests_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t compact_ ABSL_GUARDED_BY(mu_) = 0;
};

// A stream broken after a multi-step frame, with the next frame lost: the consumer reconnects
// at the first step it has not received (3), and reads every step exactly once, in order.
TEST(ServiceStepSourceTest, AReconnectMidTaskLosesAndDuplicatesNothing) {
  for (bool compact : {true, false}) {
    SCOPED_TRACE(compact ? "compact headers" : "full headers");
    BreakingWorker worker;
    int port = 0;
    grpc::ServerBuilder wb;
    wb.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    wb.RegisterService(&worker);
    std::unique_ptr<grpc::Server> worker_server = wb.BuildAndStart();
    FakeCoordinator coordinator("127.0.0.1:" + std::to_string(port));
    grpc::ServerBuilder cb;
    cb.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    cb.RegisterService(&coordinator);
    std::unique_ptr<grpc::Server> coordinator_server = cb.BuildAndStart();
    {
      ServiceStepSourceOptions o = SequentialOptions("127.0.0.1:" + std::to_string(port));
      o.receive_budget_bytes = 1 << 20;
      o.compact_headers = compact;
      auto source = ServiceStepSource::Create(o);
      ASSERT_TRUE(source.ok()) << source.status();
      absl::StatusOr<std::vector<int64_t>> got = ReadAll(**source);
      ASSERT_TRUE(got.ok()) << got.status();
      std::vector<int64_t> want;
      for (int64_t i = 0; i < kTasks; ++i) {
        for (int64_t s = 0; s < BreakingWorker::kSteps; ++s) want.push_back(i * 100 + s);
      }
      EXPECT_EQ(*got, want);
      for (int64_t i = 0; i < kTasks; ++i) {
        EXPECT_EQ(worker.starts(i), (std::vector<int64_t>{0, 3})) << "task index " << i;
      }
      EXPECT_TRUE(compact ? worker.all_compact() : worker.none_compact());
    }
    coordinator_server->Shutdown();
    worker_server->Shutdown();
  }
}

}  // namespace
}  // namespace sluice
