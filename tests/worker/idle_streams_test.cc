// One worker serves 1,000 idle StreamSteps calls with a fixed set of threads (issue 13; 17 in
// all on a 2-core machine): a GrpcWorkerService on port 0 whose coordinated task has 1,000
// consumers, each with its stream open. The task makes one step, which every stream must
// deliver (so each is live and was woken), then nothing: the streams wait. The process's thread
// count (/proc/self/task) with all of them open, and idle after the step, is compared with the
// count with the first kFewStreams open: the bound is relative to this machine (the pools of the
// process and of gRPC are sized by its cores), never an absolute number. The test's own calls
// are synchronous client calls, which need no thread each. A behaviour test: no timing.

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "core/rpc/step_frame.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/impl/rpc_method.h"
#include "grpcpp/support/sync_stream.h"
#include "gtest/gtest.h"
#include "tests/core/thread_count.h"
#include "worker/grpc_worker_service.h"
#include "worker/task_runner.h"

namespace sluice {
namespace {

constexpr int kStreams = 1000;
constexpr int kFewStreams = 10;
// What 990 more streams may add to the threads of kFewStreams: gRPC's callback executor and
// pollers may start threads while a thousand callbacks are due at once (at most about two per
// core), and a few more for timers and the like; a thread per stream would add 990.
int ExtraThreadsAllowed() {
  return 16 + 2 * static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}
// Liveness bound only.
constexpr absl::Duration kStuck = absl::Seconds(120);

// A coordinated task of kStreams consumers that makes one step once released, then waits
// until closed; counts the streams that looked it up.
class OneStepTask : public TaskLookup {
 public:
  OneStepTask() {
    proto::TaskDef task;
    task.set_task_id(1);
    task.set_job_id(1);
    task.set_num_tasks(1);
    task.mutable_job()->set_num_consumers(kStreams);
    task.mutable_job()->set_replicas_per_consumer(1);
    runner_ = TaskRunner::StartWith(task, TaskRunnerOptions{}, [this](TaskStep* step, bool* end) {
      absl::MutexLock lock(&mu_);
      const absl::Time give_up = absl::Now() + kStuck;
      const int64_t want = produced_ == 0 ? 1 : 2;  // after step 0: only the close
      while (!closed_ && released_ < want && absl::Now() < give_up) {
        cv_.WaitWithDeadline(&mu_, give_up);
      }
      if (closed_ || produced_ > 0) {
        *end = true;
        return absl::OkStatus();
      }
      step->task_step = produced_++;
      step->num_real_pieces = kStreams;
      for (int c = 0; c < kStreams; ++c) step->pieces.push_back({Tensor::Scalar<int64_t>(c)});
      step->bytes = 8 * kStreams;
      *end = false;
      return absl::OkStatus();
    });
  }
  ~OneStepTask() override {
    {
      absl::MutexLock lock(&mu_);
      closed_ = true;
      cv_.SignalAll();
    }
    runner_.reset();
  }

  absl::StatusOr<std::shared_ptr<TaskRunner>> FindTask(int64_t, int64_t) override {
    absl::MutexLock lock(&mu_);
    ++lookups_;
    return runner_;
  }
  void Release() {
    absl::MutexLock lock(&mu_);
    ++released_;
    cv_.SignalAll();
  }
  bool WaitLookups(int n) {
    absl::MutexLock lock(&mu_);
    auto done = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return lookups_ >= n; };
    return mu_.AwaitWithTimeout(absl::Condition(&done), kStuck);
  }

 private:
  std::shared_ptr<TaskRunner> runner_;
  absl::Mutex mu_;
  absl::CondVar cv_;
  int lookups_ ABSL_GUARDED_BY(mu_) = 0;
  int released_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t produced_ ABSL_GUARDED_BY(mu_) = 0;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
};

struct Call {
  grpc::ClientContext context;
  std::unique_ptr<grpc::ClientReaderWriter<grpc::ByteBuffer, grpc::ByteBuffer>> stream;
};

// Opens a StreamSteps call for task 1 of job 1 as coordinated consumer `consumer` with
// `initial_credit` bytes (window 1 MiB) and sends its StreamRequest; null if the write failed.
std::unique_ptr<Call> OpenCall(grpc::Channel* channel, const grpc::internal::RpcMethod& method,
                               int consumer, int64_t initial_credit) {
  auto call = std::make_unique<Call>();
  call->context.set_deadline(absl::ToChronoTime(absl::Now() + kStuck));
  call->stream.reset(
      grpc::internal::ClientReaderWriterFactory<grpc::ByteBuffer, grpc::ByteBuffer>::Create(
          channel, method, &call->context));
  proto::ConsumerMessage m;
  proto::StreamRequest* r = m.mutable_request();
  r->set_wire_version(proto::WIRE_VERSION_2);
  r->set_job_id(1);
  r->set_task_id(1);
  r->set_consumer_index(consumer);
  r->set_initial_credit_bytes(initial_credit);
  r->set_window_bytes(1 << 20);
  if (!call->stream->Write(EncodeConsumerMessage(m))) return nullptr;
  return call;
}

TEST(IdleStreamsTest, AThousandIdleStreamsUseAFixedSetOfThreads) {
  OneStepTask task;
  std::unique_ptr<GrpcWorkerService> service = GrpcWorkerService::Create(&task).value();
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(service.get());
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ASSERT_NE(port, 0);
  const std::string address = absl::StrCat("127.0.0.1:", port);
  std::shared_ptr<grpc::Channel> channel =
      grpc::CreateChannel(address, grpc::InsecureChannelCredentials());
  const grpc::internal::RpcMethod method(kStreamStepsMethod,
                                         grpc::internal::RpcMethod::BIDI_STREAMING, channel);

  std::vector<std::unique_ptr<Call>> calls;
  int few_threads = 0;
  for (int c = 0; c < kStreams; ++c) {
    std::unique_ptr<Call> call = OpenCall(channel.get(), method, c, 1 << 20);
    ASSERT_NE(call, nullptr) << "stream " << c;
    calls.push_back(std::move(call));
    if (c + 1 == kFewStreams) {
      ASSERT_TRUE(task.WaitLookups(kFewStreams));
      few_threads = ThreadCount();
    }
  }
  ASSERT_TRUE(task.WaitLookups(kStreams));
  const int open_threads = ThreadCount();

  // Every stream delivers the step (its consumer's piece), then waits for the next.
  task.Release();
  for (int c = 0; c < kStreams; ++c) {
    grpc::ByteBuffer bb;
    ASSERT_TRUE(calls[c]->stream->Read(&bb)) << "stream " << c;
    StepFrame frame;
    ASSERT_TRUE(DecodeStepFrame(bb, {}, &frame).ok());
    ASSERT_TRUE(frame.status.ok()) << frame.status;
    ASSERT_EQ(frame.steps.size(), 1u) << "stream " << c;
    EXPECT_EQ(frame.steps[0].task_step, 0);
    ASSERT_EQ(frame.steps[0].pieces.size(), 1u);
    EXPECT_EQ(frame.steps[0].pieces[0][0].data<int64_t>()[0], c);
  }
  const int idle_threads = ThreadCount();
  ASSERT_GT(few_threads, 0);
  const int bound = few_threads + ExtraThreadsAllowed();
  EXPECT_LE(open_threads, bound) << "threads with " << kStreams << " streams open, "
                                 << few_threads << " with " << kFewStreams;
  EXPECT_LE(idle_threads, bound) << "threads with " << kStreams << " idle streams, "
                                 << few_threads << " with " << kFewStreams;
  std::printf("threads: %d with %d streams open, %d with %d opening, %d with them idle after a "
              "step (bound %d, %u cores)\n",
              few_threads, kFewStreams, open_threads, kStreams, idle_threads, bound,
              std::thread::hardware_concurrency());

  for (auto& call : calls) call->context.TryCancel();
  for (auto& call : calls) (void)call->stream->Finish();
  server->Shutdown(absl::ToChronoTime(absl::Now()));
}

// A server shut down with streams open (waiting for steps, for credit, or filling a frame under
// a long coalescing bound) ends every call and frees every stream: the clients' calls end with
// an error status, and the service and task go away without a hang or a crash.
TEST(IdleStreamsTest, ShutdownWithStreamsOpenEndsThem) {
  OneStepTask task;
  WorkerServiceOptions options;
  options.coalesce_wait = absl::Hours(1);
  auto service = GrpcWorkerService::Create(&task, options).value();
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(service.get());
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ASSERT_NE(port, 0);
  std::shared_ptr<grpc::Channel> channel = grpc::CreateChannel(
      absl::StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials());
  const grpc::internal::RpcMethod method(kStreamStepsMethod,
                                         grpc::internal::RpcMethod::BIDI_STREAMING, channel);
  constexpr int kOpen = 20;
  std::vector<std::unique_ptr<Call>> calls;
  for (int c = 0; c < kOpen; ++c) {
    // Even streams have no credit (they wait for a grant), odd ones wait for steps; after the
    // one step, those fill a frame for an hour.
    std::unique_ptr<Call> call = OpenCall(channel.get(), method, c, c % 2 == 0 ? 0 : 1 << 20);
    ASSERT_NE(call, nullptr) << "stream " << c;
    calls.push_back(std::move(call));
  }
  ASSERT_TRUE(task.WaitLookups(kOpen));
  task.Release();
  server->Shutdown(absl::ToChronoTime(absl::Now()));
  for (auto& call : calls) {
    grpc::ByteBuffer bb;
    while (call->stream->Read(&bb)) {
    }
    EXPECT_FALSE(call->stream->Finish().ok());
  }
  server.reset();
  service.reset();
}

}  // namespace
}  // namespace sluice
