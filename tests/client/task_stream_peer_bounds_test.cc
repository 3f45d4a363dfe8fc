// A consumer facing a worker it cannot trust (docs/SERVICE.md, "The data plane trusts no
// peer"): a frame beyond the credit the consumer granted is DATA_LOSS naming the task and the
// worker, refused before anything is allocated for it; a message over the channel's receive
// limit (derived from the receive budget) fails the task instead of being received; and a
// worker whose connection goes silent (a partition: a loopback proxy that stops forwarding)
// ends in a retry through keepalive instead of a hang; a task its worker stopped once the
// consumer's retry deadline had passed ends in the job's error when the job failed; and the
// raise of a stream's credit is sent only when the credit may be what holds the worker back.
// A fake coordinator and fake workers in-process on loopback.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <limits>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/service_step_source.h"
#include "core/rpc/step_frame.h"
#include "core/tensor/proto_convert.h"
#include "core/util/status_macros.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/impl/rpc_service_method.h"
#include "grpcpp/support/method_handler.h"
#include "gtest/gtest.h"
#include "proto/coordinator.grpc.pb.h"
#include "proto/worker.pb.h"
#include "sluice/composite_tensor.h"
#include "sluice/element.h"
#include "sluice/tensor.h"
#include "tests/seeded_rng.h"

namespace sluice {
namespace {

constexpr int64_t kJob = 7;
constexpr absl::Duration kStuck = absl::Seconds(60);  // liveness bound only

using Stream = grpc::ServerReaderWriter<grpc::ByteBuffer, grpc::ByteBuffer>;

// One task (id 1, index 0) on `worker`, until FailJob: then the job's error.
class FakeCoordinator : public proto::CoordinatorService::Service {
 public:
  explicit FakeCoordinator(std::string worker) : worker_(std::move(worker)) {}
  void FailJob(grpc::Status error) {
    absl::MutexLock lock(&mu_);
    job_error_ = std::move(error);
  }
  grpc::Status ClientHeartbeat(grpc::ServerContext*, const proto::ClientHeartbeatRequest*,
                               proto::ClientHeartbeatResponse* response) override {
    {
      absl::MutexLock lock(&mu_);
      if (!job_error_.ok()) return job_error_;
    }
    response->set_num_tasks(1);
    response->set_num_tasks_created(1);
    proto::TaskInfo* t = response->add_tasks();
    t->set_task_id(1);
    t->set_task_index(0);
    t->set_worker_address(worker_);
    return grpc::Status::OK;
  }

 private:
  const std::string worker_;
  absl::Mutex mu_;
  grpc::Status job_error_ ABSL_GUARDED_BY(mu_);
};

// A StreamSteps that answers each call with `serve(start_step, stream)`, whatever the credit.
class FakeWorker : public grpc::Service {
 public:
  using Serve = std::function<grpc::Status(int64_t start_step, grpc::ServerContext*, Stream*)>;
  explicit FakeWorker(Serve serve) : serve_(std::move(serve)) {
    AddMethod(new grpc::internal::RpcServiceMethod(
        "/sluice.proto.WorkerService/StreamSteps", grpc::internal::RpcMethod::BIDI_STREAMING,
        new grpc::internal::BidiStreamingHandler<FakeWorker, grpc::ByteBuffer, grpc::ByteBuffer>(
            [](FakeWorker* w, grpc::ServerContext* context, Stream* stream) {
              grpc::ByteBuffer bb;
              if (!stream->Read(&bb)) return grpc::Status(grpc::StatusCode::CANCELLED, "none");
              proto::ConsumerMessage m;
              if (!DecodeConsumerMessage(bb, &m).ok() || !m.has_request()) {
                return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "bad request");
              }
              return w->serve_(m.request().start_step(), context, stream);
            },
            this)));
  }

 private:
  Serve serve_;
};

// Steps start..end-1 of int64 scalars (or `elements`-long vectors), in one frame.
grpc::ByteBuffer Frame(int64_t start, int64_t end, bool end_of_task, int64_t elements = 0) {
  StepFrame frame;
  for (int64_t s = start; s < end; ++s) {
    WireStep w;
    w.task_step = s;
    w.num_real_pieces = 1;
    if (elements > 0) {
      Tensor t = Tensor::Allocate(DType::kInt64, Shape({elements}));
      for (int64_t i = 0; i < elements; ++i) t.mutable_data<int64_t>()[i] = s;
      w.pieces.push_back({std::move(t)});
    } else {
      w.pieces.push_back({Tensor::Scalar<int64_t>(s)});
    }
    frame.steps.push_back(std::move(w));
  }
  frame.end_of_task = end_of_task;
  grpc::ByteBuffer out;
  EXPECT_TRUE(EncodeStepFrame(frame, &out).ok());
  return out;
}

// Reads `stream`'s messages until the consumer half-closes or goes away.
grpc::Status DrainAndEnd(Stream* stream) {
  grpc::ByteBuffer bb;
  while (stream->Read(&bb)) {
  }
  return grpc::Status::OK;
}

// A fake worker and the fake coordinator that lists it (at `advertised`, by default its own
// address).
class Servers {
 public:
  explicit Servers(FakeWorker::Serve serve) : worker_(std::move(serve)) {
    int port = 0;
    grpc::ServerBuilder wb;
    wb.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    wb.RegisterService(&worker_);
    worker_server_ = wb.BuildAndStart();
    worker_address_ = "127.0.0.1:" + std::to_string(port);
  }
  // Starts the coordinator, listing the worker at `advertised` (empty: its own address).
  void StartCoordinator(const std::string& advertised = "") {
    coordinator_ =
        std::make_unique<FakeCoordinator>(advertised.empty() ? worker_address_ : advertised);
    int port = 0;
    grpc::ServerBuilder cb;
    cb.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    cb.RegisterService(coordinator_.get());
    coordinator_server_ = cb.BuildAndStart();
    coordinator_address_ = "127.0.0.1:" + std::to_string(port);
  }
  ~Servers() {
    if (coordinator_server_ != nullptr) coordinator_server_->Shutdown();
    worker_server_->Shutdown();
  }
  const std::string& worker_address() const { return worker_address_; }
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

ServiceStepSourceOptions Options(const std::string& coordinator, ElementSpec spec) {
  ServiceStepSourceOptions o;
  o.coordinator_address = coordinator;
  o.job_id = kJob;
  o.num_local_replicas = 1;
  o.per_replica_spec = std::move(spec);
  o.retry_deadline = absl::Seconds(60);
  o.compact_headers = false;
  return o;
}

// Reads to the end of data: each step's first value, or the error.
absl::StatusOr<std::vector<int64_t>> ReadAll(ServiceStepSource& source) {
  std::vector<int64_t> values;
  for (int i = 0; i < 1000; ++i) {
    std::vector<Element> replicas;
    bool end = false;
    RETURN_IF_ERROR(source.GetNextStep(&replicas, &end));
    if (end) return values;
    values.push_back(*replicas.at(0).leaf().data<int64_t>());
  }
  return absl::InternalError("no end of data after 1000 steps");
}

TEST(TaskStreamPeerBoundsTest, AFrameBeyondTheGrantedCreditIsDataLossBeforeAllocation) {
  // The worker ignores the credit: 100 steps of 72 credit bytes at once, for a budget of 1 KiB.
  Servers servers([](int64_t, grpc::ServerContext*, Stream* stream) {
    stream->Write(Frame(0, 100, /*end_of_task=*/true));
    return DrainAndEnd(stream);
  });
  servers.StartCoordinator();
  ServiceStepSourceOptions o =
      Options(servers.coordinator_address(), ElementSpec(TensorSpec{DType::kInt64, Shape()}));
  o.receive_budget_bytes = 1024;
  auto allocations = std::make_shared<std::atomic<int64_t>>(0);
  o.allocator = [allocations](size_t bytes) {
    allocations->fetch_add(1);
    return AllocateUninitializedHost(bytes);
  };
  auto source = ServiceStepSource::Create(o);
  ASSERT_TRUE(source.ok()) << source.status();
  absl::StatusOr<std::vector<int64_t>> got = ReadAll(**source);
  ASSERT_FALSE(got.ok()) << "read " << got->size() << " steps past the credit";
  EXPECT_EQ(got.status().code(), absl::StatusCode::kDataLoss) << got.status();
  EXPECT_NE(got.status().message().find("task 1"), std::string::npos) << got.status();
  EXPECT_NE(got.status().message().find(servers.worker_address()), std::string::npos)
      << got.status();
  EXPECT_NE(got.status().message().find("credit"), std::string::npos) << got.status();
  EXPECT_EQ(allocations->load(), 0) << "the frame's tensors were allocated before the check";
}

TEST(TaskStreamPeerBoundsTest, TheChannelsReceiveLimitIsFiniteAndFromTheBudget) {
  EXPECT_EQ(ReceiveLimitBytes(int64_t{64} << 20), (257 << 20));
  EXPECT_EQ(ReceiveLimitBytes(int64_t{1} << 30), (1 << 30) + (1 << 20));
  EXPECT_EQ(ReceiveLimitBytes(int64_t{1} << 40), std::numeric_limits<int>::max());

  // A worker sends one step of 128 KiB (within the credit: the budget is 1 MiB) to a consumer
  // whose channels accept 64 KiB: the task fails with RESOURCE_EXHAUSTED instead.
  Servers servers([](int64_t, grpc::ServerContext*, Stream* stream) {
    stream->Write(Frame(0, 1, /*end_of_task=*/true, /*elements=*/16384));
    return DrainAndEnd(stream);
  });
  servers.StartCoordinator();
  ServiceStepSourceOptions o = Options(servers.coordinator_address(),
                                       ElementSpec(TensorSpec{DType::kInt64, Shape({-1})}));
  o.receive_budget_bytes = 1 << 20;
  o.max_receive_message_bytes = 64 << 10;
  auto source = ServiceStepSource::Create(o);
  ASSERT_TRUE(source.ok()) << source.status();
  absl::StatusOr<std::vector<int64_t>> got = ReadAll(**source);
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), absl::StatusCode::kResourceExhausted) << got.status();
}

// A TCP proxy on loopback to `target`. Freeze() stops forwarding on the connections open now
// (their sockets stay open, as in a partition: no FIN, no RST); later connections forward.
class Proxy {
 public:
  explicit Proxy(int target_port) : target_port_(target_port) {
    listen_fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = 0;
    EXPECT_EQ(bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    EXPECT_EQ(listen(listen_fd_, 16), 0);
    socklen_t len = sizeof(addr);
    getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    accept_thread_ = std::thread([this] { AcceptLoop(); });
  }
  ~Proxy() {
    stop_.store(true);
    accept_thread_.join();
    for (auto& c : conns_) c->thread.join();
    close(listen_fd_);
  }
  int port() const { return port_; }
  void Freeze() {
    absl::MutexLock lock(&mu_);
    for (auto& c : conns_) c->frozen.store(true);
  }
  // Closes the connections open now (a TCP error for both sides).
  void Break() {
    absl::MutexLock lock(&mu_);
    for (auto& c : conns_) c->broken.store(true);
  }
  int connections() {
    absl::MutexLock lock(&mu_);
    return static_cast<int>(conns_.size());
  }

 private:
  struct Conn {
    int a = -1;  // the client's side
    int b = -1;  // the target's side
    std::atomic<bool> frozen{false};
    std::atomic<bool> broken{false};
    std::thread thread;
  };

  void AcceptLoop() {
    while (!stop_.load()) {
      pollfd p{listen_fd_, POLLIN, 0};
      if (poll(&p, 1, 10) <= 0) continue;
      const int a = accept(listen_fd_, nullptr, nullptr);
      if (a < 0) continue;
      const int b = socket(AF_INET, SOCK_STREAM, 0);
      sockaddr_in addr{};
      addr.sin_family = AF_INET;
      addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      addr.sin_port = htons(static_cast<uint16_t>(target_port_));
      if (connect(b, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
        close(a);
        close(b);
        continue;
      }
      absl::MutexLock lock(&mu_);
      auto c = std::make_unique<Conn>();
      c->a = a;
      c->b = b;
      Conn* raw = c.get();
      c->thread = std::thread([this, raw] { Forward(raw); });
      conns_.push_back(std::move(c));
    }
  }

  // Copies bytes both ways until either side closes, the proxy stops, or forever doing
  // nothing once frozen (until the proxy stops).
  void Forward(Conn* c) {
    char buf[65536];
    while (!stop_.load() && !c->broken.load()) {
      if (c->frozen.load()) {
        absl::SleepFor(absl::Milliseconds(5));
        continue;
      }
      pollfd p[2] = {{c->a, POLLIN, 0}, {c->b, POLLIN, 0}};
      if (poll(p, 2, 10) <= 0) continue;
      bool closed = false;
      for (int i = 0; i < 2 && !closed; ++i) {
        if ((p[i].revents & (POLLIN | POLLHUP | POLLERR)) == 0) continue;
        const int from = i == 0 ? c->a : c->b;
        const int to = i == 0 ? c->b : c->a;
        const ssize_t n = read(from, buf, sizeof(buf));
        if (n <= 0) {
          closed = true;
          break;
        }
        for (ssize_t off = 0; off < n;) {
          const ssize_t w = write(to, buf + off, static_cast<size_t>(n - off));
          if (w <= 0) {
            closed = true;
            break;
          }
          off += w;
        }
      }
      if (closed) break;
    }
    close(c->a);
    close(c->b);
  }

  const int target_port_;
  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread accept_thread_;
  absl::Mutex mu_;
  std::vector<std::unique_ptr<Conn>> conns_ ABSL_GUARDED_BY(mu_);
};

TEST(TaskStreamPeerBoundsTest, ASilentPartitionEndsInARetryThroughKeepalive) {
  // The first call gets step 0 and then nothing (the worker keeps the call open); a later call
  // gets the rest and the end.
  absl::Notification first_sent;
  std::atomic<int> calls{0};
  Servers servers([&](int64_t start, grpc::ServerContext*, Stream* stream) {
    if (calls.fetch_add(1) == 0) {
      stream->Write(Frame(0, 1, /*end_of_task=*/false));
      first_sent.Notify();
      return DrainAndEnd(stream);  // until the proxy drops the connection
    }
    stream->Write(Frame(start, 3, /*end_of_task=*/true));
    return DrainAndEnd(stream);
  });
  const int worker_port = std::stoi(servers.worker_address().substr(10));
  Proxy proxy(worker_port);
  servers.StartCoordinator(absl::StrCat("127.0.0.1:", proxy.port()));
  ServiceStepSourceOptions o =
      Options(servers.coordinator_address(), ElementSpec(TensorSpec{DType::kInt64, Shape()}));
  o.keepalive_time = absl::Milliseconds(200);
  o.keepalive_timeout = absl::Milliseconds(200);
  auto source = ServiceStepSource::Create(o);
  ASSERT_TRUE(source.ok()) << source.status();

  std::vector<Element> replicas;
  bool end = false;
  ASSERT_TRUE((*source)->GetNextStep(&replicas, &end).ok());
  ASSERT_FALSE(end);
  EXPECT_EQ(*replicas.at(0).leaf().data<int64_t>(), 0);
  // The link to the worker goes silent, both ways, with no error on either side.
  proxy.Freeze();
  absl::Notification done;
  absl::StatusOr<std::vector<int64_t>> rest;
  std::thread reader([&] {
    rest = ReadAll(**source);
    done.Notify();
  });
  const bool finished = done.WaitForNotificationWithTimeout(kStuck);
  EXPECT_TRUE(finished) << "the consumer still waits for its silent worker";
  if (!finished) proxy.Break();  // a TCP error ends the wait, so that the test ends
  reader.join();
  if (finished) {
    ASSERT_TRUE(rest.ok()) << rest.status();
    EXPECT_EQ(*rest, (std::vector<int64_t>{1, 2}));
    EXPECT_EQ(calls.load(), 2);
    EXPECT_GE(proxy.connections(), 2);  // the retry came over a new connection
  }
}

// A worker stops the tasks of a job that failed (here as it answers the consumer's call: the
// job failed on another task), after the consumer's retry_deadline passed without progress
// (a task slow to fail on two workers under load). The consumer asks the coordinator once more
// and reports the job's error, with its code and message, not UNAVAILABLE "no progress" with
// the worker's "task closed" (AdversarialTest gen-10 under load).
TEST(TaskStreamPeerBoundsTest, ATaskStoppedPastTheDeadlineBecauseItsJobFailedGivesTheJobsError) {
  constexpr absl::Duration kRetryDeadline = absl::Milliseconds(50);
  const std::string job_error =
      "job 7 failed: task 1 (index 0) failed the same way on worker 1 and worker 2: op 5 "
      "(rebatch): a piece of 1000000000 rows needs more than the memory limit of one element";
  std::atomic<FakeCoordinator*> coordinator{nullptr};
  std::atomic<int> calls{0};
  Servers servers([&](int64_t, grpc::ServerContext*, Stream*) {
    calls.fetch_add(1);
    // Past the consumer's deadline (twice over), the job fails and this worker stops the task.
    absl::SleepFor(2 * kRetryDeadline);
    coordinator.load()->FailJob(grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, job_error));
    return grpc::Status(grpc::StatusCode::UNAVAILABLE, "task closed on this worker");
  });
  servers.StartCoordinator();
  coordinator = &servers.coordinator();
  ServiceStepSourceOptions o =
      Options(servers.coordinator_address(), ElementSpec(TensorSpec{DType::kInt64, Shape()}));
  o.retry_deadline = kRetryDeadline;
  o.heartbeat_interval = absl::Hours(1);  // the connector's ask is the one that counts
  auto source = ServiceStepSource::Create(o);
  ASSERT_TRUE(source.ok()) << source.status();
  absl::StatusOr<std::vector<int64_t>> read = ReadAll(**source);
  ASSERT_FALSE(read.ok());
  EXPECT_EQ(read.status().code(), absl::StatusCode::kResourceExhausted) << read.status();
  EXPECT_TRUE(absl::StrContains(read.status().message(), job_error)) << read.status();
  EXPECT_EQ(calls.load(), 1);
}

// The raise (client/task_streams.h, "Steps larger than the window"): a trainer that waits for
// its next step while its worker holds credit for a step as large as any it sent is waiting on
// the pipeline, not on the credit, and sends no raise (a CreditGrant, each one waking gRPC's
// threads on both ends, per frame in stream_bench); a step larger than any before, held back by
// the worker, still comes once raise_credit_after_covered has passed.
TEST(TaskStreamPeerBoundsTest, ATrainerWaitingOnItsPipelineSendsNoRaiseWhileTheCreditCovers) {
  absl::Notification pipeline_ready;  // the worker's next step is built
  Servers servers([&](int64_t, grpc::ServerContext*, Stream* stream) {
    stream->Write(Frame(0, 1, /*end_of_task=*/false));
    // The pipeline is slow: the consumer's credit (the whole window but one step) is not what
    // holds the next step back.
    if (!pipeline_ready.WaitForNotificationWithTimeout(kStuck)) {
      return grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "no step to send");
    }
    stream->Write(Frame(1, 2, /*end_of_task=*/true));
    return DrainAndEnd(stream);
  });
  servers.StartCoordinator();
  ServiceStepSourceOptions o =
      Options(servers.coordinator_address(), ElementSpec(TensorSpec{DType::kInt64, Shape()}));
  o.receive_budget_bytes = 1024;  // a window of 1023 bytes, 14 steps of 72
  o.raise_credit_after = absl::Milliseconds(1);
  o.raise_credit_after_covered = absl::InfiniteDuration();
  auto source = ServiceStepSource::Create(o);
  ASSERT_TRUE(source.ok()) << source.status();
  std::vector<Element> replicas;
  bool end = false;
  ASSERT_TRUE((*source)->GetNextStep(&replicas, &end).ok());
  ASSERT_FALSE(end);
  // Waiting for step 0 (nothing received yet) may have raised; from now on the credit covers.
  const int64_t raises_before = (*source)->flow_stats().credit_raises;

  absl::Status next;
  std::thread trainer([&] { next = (*source)->GetNextStep(&replicas, &end); });
  // The trainer waits for step 1; a consumer that raised after raise_credit_after (1 ms) would
  // have done so many times over by the end of this bounded wait.
  const bool raised = (*source)->WaitForFlowStats(
      [&](const ServiceStepSource::FlowStats& f) { return f.credit_raises > raises_before; },
      absl::Milliseconds(300));
  pipeline_ready.Notify();
  trainer.join();
  ASSERT_TRUE(next.ok()) << next;
  ASSERT_FALSE(end);
  EXPECT_EQ(*replicas.at(0).leaf().data<int64_t>(), 1);
  EXPECT_FALSE(raised);
  ASSERT_TRUE((*source)->GetNextStep(&replicas, &end).ok());
  EXPECT_TRUE(end);
  EXPECT_EQ((*source)->flow_stats().credit_raises, raises_before);
}

TEST(TaskStreamPeerBoundsTest, AStepLargerThanAnyBeforeComesOnceTheCoveredWaitHasPassed) {
  // Step 0 has one int64 (72 credit bytes); step 1 has 200 (1664), more than the whole window
  // (1023 bytes): as a real worker, this one sends it only once its credit reaches the window
  // + 1 (CreditForAnyStep of the window_bytes the request names), which only a raise gives. A
  // worker whose credit does not get there within kStuck ends the task without it (the test
  // then fails, bounded).
  Servers servers([](int64_t, grpc::ServerContext*, Stream* stream) {
    constexpr int64_t kWindow = 1023;
    stream->Write(Frame(0, 1, /*end_of_task=*/false, /*elements=*/1));
    absl::Mutex mu;
    int64_t credit = kWindow - 72;  // the initial credit (the window), less step 0
    std::thread reader([&] {
      grpc::ByteBuffer bb;
      proto::ConsumerMessage m;
      while (stream->Read(&bb)) {
        if (DecodeConsumerMessage(bb, &m).ok() && m.has_credit()) {
          absl::MutexLock lock(&mu);
          credit += m.credit().bytes();
        }
      }
    });
    bool raised = false;
    {
      absl::MutexLock lock(&mu);
      raised = mu.AwaitWithTimeout(absl::Condition(
                                       +[](int64_t* c) { return *c >= kWindow + 1; }, &credit),
                                   kStuck);
    }
    if (raised) {
      stream->Write(Frame(1, 2, /*end_of_task=*/true, /*elements=*/200));
    } else {
      stream->Write(Frame(1, 1, /*end_of_task=*/true));
    }
    reader.join();  // until the consumer half-closes
    return grpc::Status::OK;
  });
  servers.StartCoordinator();
  ServiceStepSourceOptions o =
      Options(servers.coordinator_address(), ElementSpec(TensorSpec{DType::kInt64, Shape({-1})}));
  o.receive_budget_bytes = 1024;
  o.raise_credit_after_covered = absl::Milliseconds(20);
  auto source = ServiceStepSource::Create(o);
  ASSERT_TRUE(source.ok()) << source.status();
  std::vector<int64_t> sizes;
  for (int i = 0; i < 3; ++i) {
    std::vector<Element> replicas;
    bool end = false;
    absl::Status s = (*source)->GetNextStep(&replicas, &end);
    ASSERT_TRUE(s.ok()) << s;
    if (end) break;
    sizes.push_back(replicas.at(0).leaf().num_elements());
  }
  EXPECT_EQ(sizes, (std::vector<int64_t>{1, 200})) << "the step larger than any before";
  EXPECT_GE((*source)->flow_stats().credit_raises, 1);
}

// Hostile SparseTensor / RaggedTensor components from a worker (issue 31): the job's spec says
// what each piece holds, the worker's frame carries only the dense components, so a worker can
// send row_splits that decrease or do not span the values, indices outside dense_shape, counts
// that disagree, or too few components. Each is DATA_LOSS naming the step and the composite,
// never a crash or a value handed to the trainer. A seeded generated set
// (SLUICE_ADVERSARIAL_SEED, printed), after a good value that must read back whole.
Tensor Int64s(const std::vector<int64_t>& v, std::vector<int64_t> dims) {
  Tensor t = Tensor::Allocate(DType::kInt64, Shape(std::move(dims)));
  for (size_t i = 0; i < v.size(); ++i) t.mutable_data<int64_t>()[i] = v[i];
  return t;
}

struct HostileComposite {
  std::string what;                 // the planted fault, for failure messages
  bool sparse = false;              // the spec: SparseTensor int64 [None, None], else ragged
  std::vector<Tensor> components;   // what the worker sends
  std::string named;                // what the error must name
};

// A ragged [n, None] value (flat_values, row_splits) or a sparse [a, b] one (indices, values,
// dense_shape), valid, then one fault planted.
HostileComposite GenerateHostile(SeededRng* rng) {
  HostileComposite h;
  h.sparse = rng->Chance(50);
  if (!h.sparse) {
    h.named = "RaggedTensor";
    const int64_t rows = rng->In(1, 6);
    std::vector<int64_t> splits = {0};
    for (int64_t r = 0; r < rows; ++r) splits.push_back(splits.back() + rng->In(0, 4));
    int64_t m = splits.back();
    switch (rng->In(0, 4)) {
      case 0: {  // a split below the one before it
        const size_t k = static_cast<size_t>(rng->In(1, rows));
        splits[k] = splits[k - 1] - rng->In(1, 3);
        h.what = "row_splits decrease";
        break;
      }
      case 1:
        splits[0] = rng->In(1, 3);
        if (splits[1] < splits[0]) splits[1] = splits[0];
        for (size_t k = 2; k < splits.size(); ++k) splits[k] = std::max(splits[k], splits[k - 1]);
        m = splits.back();
        h.what = "row_splits start above 0";
        break;
      case 2:
        m = splits.back() + (rng->Chance(50) ? rng->In(1, 5) : -rng->In(1, 5));
        if (m < 0) m = splits.back() + 1;
        h.what = "row_splits end away from the values";
        break;
      case 3:
        splits.clear();
        h.what = "no row_splits";
        break;
      default:
        splits.back() = std::numeric_limits<int64_t>::max() - rng->In(0, 3);
        h.what = "row_splits end far beyond the values";
        break;
    }
    std::vector<int64_t> values(static_cast<size_t>(m));
    for (int64_t i = 0; i < m; ++i) values[static_cast<size_t>(i)] = i;
    h.components = {Int64s(values, {m}),
                    Int64s(splits, {static_cast<int64_t>(splits.size())})};
  } else {
    h.named = "SparseTensor";
    std::vector<int64_t> dense_shape = {rng->In(1, 5), rng->In(1, 5)};
    const int64_t n = rng->In(1, 4);
    std::vector<int64_t> indices;
    for (int64_t i = 0; i < n; ++i) {
      indices.push_back(rng->In(0, dense_shape[0] - 1));
      indices.push_back(rng->In(0, dense_shape[1] - 1));
    }
    int64_t num_values = n;
    int64_t width = 2;
    const size_t at = static_cast<size_t>(rng->In(0, 2 * n - 1));
    switch (rng->In(0, 4)) {
      case 0:
        indices[at] = dense_shape[at % 2] + rng->In(0, 1000);
        h.what = "an index outside dense_shape";
        break;
      case 1:
        indices[at] = -rng->In(1, 1000);
        h.what = "a negative index";
        break;
      case 2:
        num_values = n + (rng->Chance(50) ? rng->In(1, 3) : -rng->In(1, n));
        h.what = "values and indices disagree on the count";
        break;
      case 3:
        dense_shape[static_cast<size_t>(rng->In(0, 1))] = -rng->In(1, 1000);
        h.what = "a negative dense_shape";
        break;
      default:
        indices.resize(static_cast<size_t>(n));  // one column for a rank-2 dense_shape
        width = 1;
        h.what = "indices narrower than the rank";
        break;
    }
    std::vector<int64_t> values(static_cast<size_t>(num_values), 7);
    h.components = {Int64s(indices, {n, width}), Int64s(values, {num_values}),
                    Int64s(dense_shape, {2})};
  }
  if (rng->Chance(15)) {  // a component missing: the counts of the spec and the frame disagree
    h.components.pop_back();
    h.what += ", a component missing";
    h.named = "";
  }
  return h;
}

grpc::ByteBuffer CompositeFrame(std::vector<Tensor> components) {
  StepFrame frame;
  WireStep w;
  w.task_step = 0;
  w.num_real_pieces = 1;
  w.pieces.push_back(std::move(components));
  frame.steps.push_back(std::move(w));
  frame.end_of_task = true;
  grpc::ByteBuffer out;
  EXPECT_TRUE(EncodeStepFrame(frame, &out).ok());
  return out;
}

TEST(TaskStreamPeerBoundsTest, HostileCompositeComponentsAreDataLossNamingTheComposite) {
  uint64_t seed = 31;
  if (const char* v = std::getenv("SLUICE_ADVERSARIAL_SEED")) seed = std::strtoull(v, nullptr, 10);
  std::cout << "SLUICE_ADVERSARIAL_SEED=" << seed << std::endl;
  SeededRng rng(seed);
  absl::Mutex mu;
  std::vector<Tensor> sent;  // what the worker sends next: one frame, one step
  Servers servers([&](int64_t, grpc::ServerContext*, Stream* stream) {
    std::vector<Tensor> components;
    {
      absl::MutexLock lock(&mu);
      components = sent;
    }
    stream->Write(CompositeFrame(std::move(components)));
    return DrainAndEnd(stream);
  });
  servers.StartCoordinator();
  const ElementSpec ragged_spec = RaggedTensorSpecOf(DType::kInt64, {kUnknownDim, kUnknownDim}, 1);
  const ElementSpec sparse_spec = SparseTensorSpecOf(DType::kInt64, {kUnknownDim, kUnknownDim});
  // Reads the one step the worker sends.
  auto read_one = [&](const ElementSpec& spec,
                      std::vector<Tensor> components) -> absl::StatusOr<Element> {
    {
      absl::MutexLock lock(&mu);
      sent = std::move(components);
    }
    auto source = ServiceStepSource::Create(Options(servers.coordinator_address(), spec));
    if (!source.ok()) return source.status();
    std::vector<Element> replicas;
    bool end = false;
    RETURN_IF_ERROR((*source)->GetNextStep(&replicas, &end));
    if (end) return absl::InternalError("end of data before the step");
    return replicas.at(0);
  };

  // A good ragged value [[1, 2], [], [3]] reads back whole: the harness delivers composites.
  absl::StatusOr<Element> good = read_one(
      ragged_spec, {Int64s({1, 2, 3}, {3}), Int64s({0, 2, 2, 3}, {4})});
  ASSERT_TRUE(good.ok()) << good.status();
  ASSERT_EQ(good->kind(), NestKind::kRagged);
  EXPECT_EQ(good->children()[1].leaf().shape().dim(0), 4);
  EXPECT_EQ(good->children()[1].leaf().data<int64_t>()[1], 2);

  // The spec the consumer reads pieces by comes from the coordinator as a proto: one claiming a
  // SparseTensor of 2 components (a worker's frame could then match it) is refused on arrival.
  {
    proto::ElementSpecProto p = ElementSpecToProto(sparse_spec);
    p.mutable_structure()->mutable_children()->RemoveLast();
    p.mutable_specs()->RemoveLast();
    absl::StatusOr<ElementSpec> spec = ElementSpecFromProto(p);
    ASSERT_FALSE(spec.ok()) << "a SparseTensor of 2 components was accepted";
    EXPECT_TRUE(absl::StrContains(spec.status().message(), "SparseTensor")) << spec.status();
  }

  constexpr int kCases = 60;
  for (int i = 0; i < kCases; ++i) {
    HostileComposite h = GenerateHostile(&rng);
    absl::StatusOr<Element> got =
        read_one(h.sparse ? sparse_spec : ragged_spec, std::move(h.components));
    ASSERT_FALSE(got.ok()) << "case " << i << " (" << h.what << ", seed " << seed
                           << ") was accepted";
    EXPECT_EQ(got.status().code(), absl::StatusCode::kDataLoss)
        << "case " << i << " (" << h.what << "): " << got.status();
    EXPECT_TRUE(absl::StrContains(got.status().message(), "task step 0"))
        << "case " << i << " (" << h.what << "): " << got.status();
    EXPECT_TRUE(absl::StrContains(got.status().message(), h.named))
        << "case " << i << " (" << h.what << "): " << got.status();
  }
}

// Composite pieces of one step that disagree with the rest of their replica's piece: in a job
// that cuts batches across replicas every piece has one row count in all its components, so a
// worker sending replica 1 a RaggedTensor (or SparseTensor) of 3 rows next to a label of 2 is
// DATA_LOSS naming the step, the replica and the composite; the same step with consistent
// pieces reads back whole.
TEST(TaskStreamPeerBoundsTest, CompositePiecesInconsistentAcrossReplicasAreDataLoss) {
  absl::Mutex mu;
  StepFrame next;  // what the worker sends: one frame, one step of two pieces
  Servers servers([&](int64_t, grpc::ServerContext*, Stream* stream) {
    StepFrame frame;
    {
      absl::MutexLock lock(&mu);
      frame = next;
    }
    grpc::ByteBuffer out;
    EXPECT_TRUE(EncodeStepFrame(frame, &out).ok());
    stream->Write(out);
    return DrainAndEnd(stream);
  });
  servers.StartCoordinator();
  const ElementSpec ragged = RaggedTensorSpecOf(DType::kInt64, {kUnknownDim, kUnknownDim}, 1);
  const ElementSpec sparse = SparseTensorSpecOf(DType::kInt64, {kUnknownDim, kUnknownDim});
  const TensorSpec labels{DType::kInt64, Shape({kUnknownDim})};
  // A step whose replica 1 carries `rows1` composite rows beside 2 labels.
  auto step = [](bool is_sparse, int64_t rows1) {
    StepFrame frame;
    WireStep w;
    w.task_step = 0;
    w.num_real_pieces = 2;
    for (int64_t rows : {int64_t{2}, rows1}) {
      std::vector<Tensor> piece;
      if (is_sparse) {  // one entry in row 0
        piece = {Int64s({0, 1}, {1, 2}), Int64s({7}, {1}), Int64s({rows, 4}, {2})};
      } else {  // rows of one value each
        std::vector<int64_t> splits(static_cast<size_t>(rows) + 1);
        for (int64_t i = 0; i <= rows; ++i) splits[static_cast<size_t>(i)] = i;
        piece = {Int64s(std::vector<int64_t>(static_cast<size_t>(rows), 5), {rows}),
                 Int64s(splits, {rows + 1})};
      }
      piece.push_back(Int64s({1, 2}, {2}));
      w.pieces.push_back(std::move(piece));
    }
    frame.steps.push_back(std::move(w));
    frame.end_of_task = true;
    return frame;
  };
  for (const bool is_sparse : {false, true}) {
    const ElementSpec spec = ElementSpec::Tuple({is_sparse ? sparse : ragged, labels});
    for (const int64_t rows1 : {int64_t{2}, int64_t{3}}) {
      SCOPED_TRACE(absl::StrCat(is_sparse ? "sparse" : "ragged", ", replica 1 rows ", rows1));
      {
        absl::MutexLock lock(&mu);
        next = step(is_sparse, rows1);
      }
      ServiceStepSourceOptions o = Options(servers.coordinator_address(), spec);
      o.num_local_replicas = 2;
      o.pieces_are_cut = true;
      auto source = ServiceStepSource::Create(std::move(o));
      ASSERT_TRUE(source.ok()) << source.status();
      std::vector<Element> replicas;
      bool end = false;
      absl::Status s = (*source)->GetNextStep(&replicas, &end);
      if (rows1 == 2) {
        ASSERT_TRUE(s.ok()) << s;
        ASSERT_EQ(replicas.size(), 2u);
        EXPECT_TRUE(replicas[1].children()[0].is_composite());
        continue;
      }
      EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
      for (const std::string& part :
           {std::string("task step 0"), std::string("local replica 1"),
            std::string(is_sparse ? "SparseTensor component 0 has 3 rows"
                                  : "RaggedTensor component 0 has 3 rows")}) {
        EXPECT_TRUE(absl::StrContains(s.message(), part)) << s;
      }
    }
  }
}

// A frame's steps are checked in the frame's order (the consumer packs them before it takes
// its lock, then checks their sequence): the first bad step names what is wrong with it, an
// out-of-sequence step before one with the wrong number of pieces is reported as out of
// sequence, and no step of a bad frame is handed out.
TEST(TaskStreamPeerBoundsTest, AFramesFirstBadStepIsTheErrorAndNoneOfItsStepsIsHandedOut) {
  struct Case {
    std::vector<std::pair<int64_t, int>> steps;  // task step, pieces
    std::string named;
  };
  const std::vector<Case> cases = {
      {{{0, 1}, {2, 2}, {3, 1}}, "expected task step 1, received 2"},
      {{{0, 1}, {1, 2}, {5, 1}}, "task step 1 has 2 pieces for 1 local replicas"},
      {{{0, 1}, {1, 1}, {2, 0}}, "task step 2 has 0 pieces"},
      {{{1, 2}}, "expected task step 0, received 1"},
  };
  absl::Mutex mu;
  const Case* current = nullptr;
  Servers servers([&](int64_t, grpc::ServerContext*, Stream* stream) {
    StepFrame frame;
    {
      absl::MutexLock lock(&mu);
      for (const auto& [task_step, pieces] : current->steps) {
        WireStep w;
        w.task_step = task_step;
        w.num_real_pieces = pieces;
        for (int p = 0; p < pieces; ++p) w.pieces.push_back({Tensor::Scalar<int64_t>(task_step)});
        frame.steps.push_back(std::move(w));
      }
    }
    frame.end_of_task = true;
    grpc::ByteBuffer out;
    EXPECT_TRUE(EncodeStepFrame(frame, &out).ok());
    stream->Write(out);
    return DrainAndEnd(stream);
  });
  servers.StartCoordinator();
  for (const Case& c : cases) {
    {
      absl::MutexLock lock(&mu);
      current = &c;
    }
    auto source = ServiceStepSource::Create(
        Options(servers.coordinator_address(), ElementSpec(TensorSpec{DType::kInt64, Shape()})));
    ASSERT_TRUE(source.ok()) << source.status();
    std::vector<Element> replicas;
    bool end = false;
    absl::Status s = (*source)->GetNextStep(&replicas, &end);
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << c.named << ": " << s;
    EXPECT_TRUE(absl::StrContains(s.message(), c.named)) << c.named << ": " << s;
    EXPECT_TRUE(replicas.empty()) << c.named;
  }
}

}  // namespace
}  // namespace sluice
