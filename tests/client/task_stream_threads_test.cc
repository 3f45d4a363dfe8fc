// A consumer holds no thread per task stream (issue 13, item 3): a coordinated consumer of
// kStreams tasks, each on an in-process fake worker (gRPC's callback API, so the worker side
// needs no thread per call either), receives a step from every task's stream, and the process's
// thread count (/proc/self/task) grows by less than kMaxNewThreads while all the streams are
// open. Then the consumer is destroyed with every call open: Shutdown cancels them and returns
// only once each has reached OnDone (a use-after-free here shows under ASan). A behaviour test:
// no timing.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "client/service_step_source.h"
#include "core/rpc/step_frame.h"
#include "grpcpp/generic/async_generic_service.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/coordinator.grpc.pb.h"
#include "proto/worker.pb.h"
#include "sluice/element.h"
#include "sluice/tensor.h"
#include "tests/core/thread_count.h"

namespace sluice {
namespace {

constexpr int64_t kJob = 3;
constexpr int kStreams = 200;
// The consumer's own threads are a constant few, gRPC's a pool that does not grow with calls.
constexpr int kMaxNewThreads = 40;

// Lists kStreams coordinated tasks (task id = index + 1), all on `worker`.
class FakeCoordinator : public proto::CoordinatorService::Service {
 public:
  explicit FakeCoordinator(std::string worker) : worker_(std::move(worker)) {}

  grpc::Status ClientHeartbeat(grpc::ServerContext*, const proto::ClientHeartbeatRequest*,
                               proto::ClientHeartbeatResponse* response) override {
    response->set_num_tasks(kStreams);
    response->set_num_tasks_created(kStreams);
    for (int64_t i = 0; i < kStreams; ++i) {
      proto::TaskInfo* t = response->add_tasks();
      t->set_task_id(i + 1);
      t->set_task_index(i);
      t->set_worker_address(worker_);
    }
    return grpc::Status::OK;
  }

 private:
  const std::string worker_;
};

// StreamSteps on the callback API: sends task step 0 (the int64 scalar task_id), reads the
// consumer's credit grants, and ends only when the call is cancelled.
class OneStepWorker : public grpc::CallbackGenericService {
 public:
  grpc::ServerGenericBidiReactor* CreateReactor(grpc::GenericCallbackServerContext*) override {
    return new Stream(this);
  }

  int opened() {
    absl::MutexLock lock(&mu_);
    return opened_;
  }

 private:
  class Stream : public grpc::ServerGenericBidiReactor {
   public:
    explicit Stream(OneStepWorker* worker) : worker_(worker) { StartRead(&in_); }

    void OnReadDone(bool ok) override {
      absl::MutexLock lock(&mu_);
      if (!ok) return;  // the consumer half-closed or went away: OnCancel ends the call
      if (!opened_) {
        opened_ = true;
        {
          // Counted before the step goes out: the consumer may have it before this returns.
          absl::MutexLock wlock(&worker_->mu_);
          ++worker_->opened_;
        }
        proto::ConsumerMessage m;
        if (DecodeConsumerMessage(in_, &m).ok() && m.has_request()) {
          StepFrame frame;
          WireStep step;
          step.task_step = 0;
          step.num_real_pieces = 1;
          step.pieces.push_back({Tensor::Scalar<int64_t>(m.request().task_id())});
          frame.steps.push_back(std::move(step));
          if (EncodeStepFrame(frame, &out_).ok()) {
            writing_ = true;
            StartWrite(&out_);
          }
        }
      }
      StartRead(&in_);
    }
    void OnWriteDone(bool) override {
      absl::MutexLock lock(&mu_);
      writing_ = false;
      if (cancelled_ && !finished_) {
        finished_ = true;
        Finish(grpc::Status::CANCELLED);
      }
    }
    void OnCancel() override {
      absl::MutexLock lock(&mu_);
      cancelled_ = true;
      if (!writing_ && !finished_) {
        finished_ = true;
        Finish(grpc::Status::CANCELLED);
      }
    }
    void OnDone() override { delete this; }

   private:
    OneStepWorker* const worker_;
    absl::Mutex mu_;
    grpc::ByteBuffer in_;
    grpc::ByteBuffer out_;
    bool opened_ ABSL_GUARDED_BY(mu_) = false;
    bool writing_ ABSL_GUARDED_BY(mu_) = false;
    bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
    bool finished_ ABSL_GUARDED_BY(mu_) = false;
  };

  absl::Mutex mu_;
  int opened_ ABSL_GUARDED_BY(mu_) = 0;
};

TEST(TaskStreamThreadsTest, AConsumerOfManyTaskStreamsHoldsNoThreadPerStream) {
  OneStepWorker worker;
  grpc::ServerBuilder wb;
  int port = 0;
  wb.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  wb.RegisterCallbackGenericService(&worker);
  std::unique_ptr<grpc::Server> worker_server = wb.BuildAndStart();
  ASSERT_NE(port, 0);
  FakeCoordinator coordinator(absl::StrCat("127.0.0.1:", port));
  grpc::ServerBuilder cb;
  cb.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  cb.RegisterService(&coordinator);
  std::unique_ptr<grpc::Server> coordinator_server = cb.BuildAndStart();
  ASSERT_NE(port, 0);

  ServiceStepSourceOptions o;
  o.coordinator_address = absl::StrCat("127.0.0.1:", port);
  o.job_id = kJob;
  o.consumer_index = 0;
  o.num_local_replicas = 1;
  o.per_replica_spec = ElementSpec(TensorSpec{DType::kInt64, Shape()});
  o.retry_deadline = absl::Seconds(60);

  const int before = ThreadCount();
  auto source = ServiceStepSource::Create(o);
  ASSERT_TRUE(source.ok()) << source.status();
  // The coordinated read order takes one step from each task in turn: every stream delivers.
  for (int i = 0; i < kStreams; ++i) {
    std::vector<Element> replicas;
    bool end = false;
    ASSERT_TRUE((*source)->GetNextStep(&replicas, &end).ok()) << "step " << i;
    ASSERT_FALSE(end);
    ASSERT_EQ(replicas.size(), 1u);
    EXPECT_EQ(*replicas[0].leaf().data<int64_t>(), i + 1);
  }
  const int reading = ThreadCount();
  EXPECT_EQ(worker.opened(), kStreams);
  EXPECT_LT(reading - before, kMaxNewThreads)
      << "threads: " << before << " before the consumer, " << reading << " with " << kStreams
      << " task streams open";
  std::printf("threads: %d before the consumer, %d with %d task streams open\n", before, reading,
              kStreams);

  // Every call is open (the worker never ends them): destroying the consumer cancels them all
  // and waits for each to finish.
  source->reset();
  coordinator_server->Shutdown();
  worker_server->Shutdown();
}

}  // namespace
}  // namespace sluice
