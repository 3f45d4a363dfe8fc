// What the StreamSteps tests that drive a worker step by step share: a task whose producer
// the test releases one step at a time (GatedTask), a GrpcWorkerService on a real gRPC server
// on port 0 (TestStreamServer), and a raw StreamSteps call (OpenStreamSteps,
// RawStreamStepsCall). Every wait is for
// an event, bounded by the `stuck` each test gives (a liveness bound only).
#ifndef SLUICE_TESTS_WORKER_GATED_STREAM_TASK_H_
#define SLUICE_TESTS_WORKER_GATED_STREAM_TASK_H_

#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/impl/rpc_method.h"
#include "grpcpp/support/sync_stream.h"
#include "gtest/gtest.h"
#include "core/rpc/step_frame.h"
#include "tests/worker/task_step_test_util.h"
#include "worker/grpc_worker_service.h"
#include "worker/task_runner.h"

namespace sluice {

// A task of steps 0, 1, ... (each made by `make`, which sets everything but task_step) whose
// producer makes step s only once the test has released s + 1 steps, and ends after `total`.
class GatedTask : public TaskLookup {
 public:
  using MakeStep = std::function<void(int64_t step, TaskStep* out)>;
  GatedTask(int64_t total, MakeStep make, absl::Duration stuck) : stuck_(stuck) {
    runner_ = TaskRunner::StartWith(
        OneConsumerTask(), TaskRunnerOptions{}, [this, total, make = std::move(make)](TaskStep* step,
                                                                        bool* end) {
          absl::MutexLock lock(&mu_);
          const absl::Time give_up = absl::Now() + stuck_;
          while (!closed_ && produced_ < total && produced_ >= released_ &&
                 absl::Now() < give_up) {
            cv_.WaitWithDeadline(&mu_, give_up);
          }
          if (closed_ || produced_ >= total) {
            *end = true;
            return absl::OkStatus();
          }
          make(produced_, step);
          step->task_step = produced_;
          ++produced_;
          *end = false;
          return absl::OkStatus();
        });
  }
  ~GatedTask() override {
    {
      absl::MutexLock lock(&mu_);
      closed_ = true;
      cv_.SignalAll();
    }
    runner_.reset();
  }

  absl::StatusOr<std::shared_ptr<TaskRunner>> FindTask(int64_t, int64_t) override {
    return runner_;
  }

  void Release(int64_t n) {
    absl::MutexLock lock(&mu_);
    released_ += n;
    cv_.SignalAll();
  }
  // Steps the producer has pushed.
  int64_t produced() const { return runner_->buffer()->stats().steps_produced; }
  // Waits until the consumer's stream has taken `n` steps (its cursor in the step buffer).
  bool WaitTaken(int64_t n) const {
    return Until([&] {
      StepBuffer::Stats s = runner_->buffer()->stats();
      return !s.cursors.empty() && s.cursors[0] >= n;
    });
  }
  // Waits until the producer has pushed `n` steps.
  bool WaitProduced(int64_t n) const {
    return Until([&] { return produced() >= n; });
  }

 private:
  template <typename F>
  bool Until(F done) const {
    const absl::Time give_up = absl::Now() + stuck_;
    while (!done()) {
      if (absl::Now() > give_up) return false;
      absl::SleepFor(absl::Microseconds(200));
    }
    return true;
  }

  const absl::Duration stuck_;
  std::shared_ptr<TaskRunner> runner_;
  absl::Mutex mu_;
  absl::CondVar cv_;
  int64_t released_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t produced_ ABSL_GUARDED_BY(mu_) = 0;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
};

// A GrpcWorkerService serving `tasks` (borrowed) on 127.0.0.1, port 0.
class TestStreamServer {
 public:
  TestStreamServer(TaskLookup* tasks, WorkerServiceOptions options)
      : service_(GrpcWorkerService::Create(tasks, options).value()) {
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(service_.get());
    server_ = builder.BuildAndStart();
    address_ = absl::StrCat("127.0.0.1:", port);
  }
  ~TestStreamServer() { server_->Shutdown(); }
  const std::string& address() const { return address_; }

 private:
  const std::unique_ptr<GrpcWorkerService> service_;
  std::unique_ptr<grpc::Server> server_;
  std::string address_;
};

// A raw StreamSteps call on `channel` (byte buffers both ways, as the worker's service sees
// them); `context` must outlive it.
inline std::unique_ptr<grpc::ClientReaderWriter<grpc::ByteBuffer, grpc::ByteBuffer>>
OpenStreamSteps(const std::shared_ptr<grpc::Channel>& channel, grpc::ClientContext* context) {
  return std::unique_ptr<grpc::ClientReaderWriter<grpc::ByteBuffer, grpc::ByteBuffer>>(
      grpc::internal::ClientReaderWriterFactory<grpc::ByteBuffer, grpc::ByteBuffer>::Create(
          channel.get(),
          grpc::internal::RpcMethod(kStreamStepsMethod, grpc::internal::RpcMethod::BIDI_STREAMING,
                                    channel),
          context));
}

// A raw StreamSteps call to `address` that sends `request` first; destroying it unfinished
// half-closes and cancels the call (a broken call: what the worker sent and the test did not
// read is lost). Thread-compatible.
class RawStreamStepsCall {
 public:
  RawStreamStepsCall(const std::string& address, const proto::StreamRequest& request,
                     absl::Duration stuck)
      : channel_(grpc::CreateChannel(address, grpc::InsecureChannelCredentials())) {
    context_.set_deadline(absl::ToChronoTime(absl::Now() + stuck));
    stream_ = OpenStreamSteps(channel_, &context_);
    proto::ConsumerMessage m;
    *m.mutable_request() = request;
    Send(m);
  }
  ~RawStreamStepsCall() {
    if (finished_) return;
    if (!half_closed_) stream_->WritesDone();
    context_.TryCancel();
    (void)stream_->Finish();
  }
  // Reads the next frame into `raw` and decodes it with `decoder`; false when the call ended
  // or the frame did not decode (a test failure).
  bool ReadFrame(StepFrameDecoder* decoder, grpc::ByteBuffer* raw, StepFrame* frame) {
    if (!stream_->Read(raw)) return false;
    absl::Status s = decoder->Decode(*raw, frame);
    EXPECT_TRUE(s.ok()) << s;
    return s.ok();
  }
  // False when the call ended.
  bool Send(const proto::ConsumerMessage& m) { return stream_->Write(EncodeConsumerMessage(m)); }
  void HalfClose() {
    half_closed_ = true;
    stream_->WritesDone();
  }
  // The call's status, once the worker ended it (after HalfClose, or on its own).
  grpc::Status Finish() {
    finished_ = true;
    return stream_->Finish();
  }

 private:
  std::shared_ptr<grpc::Channel> channel_;
  grpc::ClientContext context_;
  std::unique_ptr<grpc::ClientReaderWriter<grpc::ByteBuffer, grpc::ByteBuffer>> stream_;
  bool half_closed_ = false;
  bool finished_ = false;
};

// The StreamRequest of a raw consumer of the gated task (job 1, task 1): `credit` bytes at
// first and as its window.
inline proto::StreamRequest GatedTaskRequest(int64_t credit) {
  proto::StreamRequest r;
  r.set_wire_version(proto::WIRE_VERSION_2);
  r.set_job_id(1);
  r.set_task_id(1);
  r.set_initial_credit_bytes(credit);
  r.set_window_bytes(std::max<int64_t>(credit, 1));
  return r;
}

}  // namespace sluice

#endif  // SLUICE_TESTS_WORKER_GATED_STREAM_TASK_H_
