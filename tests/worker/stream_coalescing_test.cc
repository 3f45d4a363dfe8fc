// Frame coalescing in GrpcWorkerService (worker/grpc_worker_service.h): steps that are ready
// share one frame; a small frame waits (at most coalesce_wait) for more steps to join it; the
// end of the task rides on the last steps' frame; a frame never takes more than the credit.
// A real gRPC server on port 0 with a task whose producer the test releases step by step, and a
// raw consumer of the StreamSteps call (also: compact frame headers only for a consumer that
// asks for them). Synchronization is on the step buffer's cursor (the
// steps the stream has taken), never on time.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "core/rpc/step_frame.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/support/sync_stream.h"
#include "gtest/gtest.h"
#include "tests/worker/gated_stream_task.h"
#include "worker/grpc_worker_service.h"

namespace sluice {
namespace {

// Liveness bound only.
constexpr absl::Duration kStuck = absl::Seconds(60);

// A gated task (gated_stream_task.h) of int64 scalar steps 0, 1, ...
class ScalarTask : public GatedTask {
 public:
  explicit ScalarTask(int64_t total)
      : GatedTask(
            total,
            [](int64_t s, TaskStep* step) {
              step->num_real_pieces = 1;
              step->pieces = {{Tensor::Scalar<int64_t>(s)}};
              step->bytes = 8;
            },
            kStuck) {}
};

// A raw consumer: opens the call with `credit` bytes (and as its window) and reads frames.
class Consumer {
 public:
  // `spec`: ask for compact frame headers with it (StreamRequest.compact_headers).
  Consumer(const std::string& address, int64_t credit,
           std::shared_ptr<const CompactSpec> spec = nullptr)
      : call_(address, Request(credit, spec.get()), kStuck), decoder_(nullptr, spec) {}

  // The next frame's task steps (empty + *end for an end frame alone). False when the call
  // ended.
  bool Next(std::vector<int64_t>* steps, bool* end) {
    steps->clear();
    *end = false;
    grpc::ByteBuffer bb;
    StepFrame frame;
    if (!call_.ReadFrame(&decoder_, &bb, &frame)) return false;
    std::vector<grpc::Slice> slices;
    EXPECT_TRUE(bb.Dump(&slices).ok());
    std::string bytes;
    for (const grpc::Slice& sl : slices) bytes.append(reinterpret_cast<const char*>(sl.begin()), sl.size());
    uint32_t n = 0;
    for (int i = 0; i < 4; ++i) n |= uint32_t{static_cast<uint8_t>(bytes[i])} << (8 * i);
    EXPECT_TRUE(last_header.ParseFromString(bytes.substr(4, n)));
    EXPECT_TRUE(frame.status.ok()) << frame.status;
    for (const WireStep& w : frame.steps) {
      steps->push_back(w.task_step);
      EXPECT_EQ(w.pieces[0][0].data<int64_t>()[0], w.task_step);
    }
    *end = frame.end_of_task;
    return true;
  }

  proto::StepFrameHeader last_header;  // of the last frame Next read

  void Grant(int64_t bytes) {
    proto::ConsumerMessage m;
    m.mutable_credit()->set_bytes(bytes);
    EXPECT_TRUE(call_.Send(m));
  }

 private:
  // The call's first message: `credit`, and compact headers against `spec` if any.
  static proto::StreamRequest Request(int64_t credit, const CompactSpec* spec) {
    proto::StreamRequest r = GatedTaskRequest(credit);
    if (spec != nullptr) {
      r.set_compact_headers(true);
      spec->ToProto(r.mutable_compact_spec());
    }
    return r;
  }

  RawStreamStepsCall call_;
  StepFrameDecoder decoder_;
};

constexpr int64_t kCost = 8 + static_cast<int64_t>(kStepCreditOverheadBytes);

WorkerServiceOptions Options(absl::Duration coalesce_wait, size_t max_frame_steps = 64) {
  WorkerServiceOptions o;
  o.coalesce_wait = coalesce_wait;
  o.max_frame_steps = max_frame_steps;
  return o;
}

// Steps already buffered when the consumer comes all go in one frame, with the end.
TEST(StreamCoalescingTest, ReadyStepsShareOneFrameWithTheEnd) {
  ScalarTask task(10);
  TestStreamServer server(&task, Options(absl::ZeroDuration()));
  task.Release(10);
  ASSERT_TRUE(task.WaitProduced(10));
  Consumer consumer(server.address(), 1 << 20);
  std::vector<int64_t> steps;
  bool end = false;
  ASSERT_TRUE(consumer.Next(&steps, &end));
  EXPECT_EQ(steps, (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));
  // Without coalescing the end may or may not have been known when the frame was cut: read on.
  while (!end && consumer.Next(&steps, &end)) EXPECT_TRUE(steps.empty());
  EXPECT_TRUE(end);
}

// With coalescing on (a bound far beyond the test, so that only the end can close the frame),
// the end rides on the frame of the last steps (docs/SERVICE.md, "Coalescing"): steps ready
// before the consumer comes, and steps released one at a time while the frame fills, each
// arrive as one frame that carries the end; no end frame of its own follows.
TEST(StreamCoalescingTest, WithCoalescingTheEndRidesOnTheLastStepsFrame) {
  {
    SCOPED_TRACE("steps ready before the consumer");
    ScalarTask task(10);
    TestStreamServer server(&task, Options(absl::Minutes(10)));
    task.Release(10);
    ASSERT_TRUE(task.WaitProduced(10));
    Consumer consumer(server.address(), 1 << 20);
    std::vector<int64_t> steps;
    bool end = false;
    ASSERT_TRUE(consumer.Next(&steps, &end));
    EXPECT_EQ(steps, (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));
    EXPECT_TRUE(end) << "the end did not ride on the last steps' frame";
    EXPECT_TRUE(consumer.last_header.end_of_task());
  }
  {
    // The frame is cut while the producer still runs: it waits for more steps, and the end,
    // which comes after the fourth step, closes it.
    SCOPED_TRACE("steps released one at a time, then the end");
    ScalarTask task(4);
    TestStreamServer server(&task, Options(absl::Minutes(10)));
    Consumer consumer(server.address(), 1 << 20);
    for (int64_t s = 0; s < 4; ++s) {
      task.Release(1);
      ASSERT_TRUE(task.WaitTaken(s + 1));
    }
    std::vector<int64_t> steps;
    bool end = false;
    ASSERT_TRUE(consumer.Next(&steps, &end));
    EXPECT_EQ(steps, (std::vector<int64_t>{0, 1, 2, 3}));
    EXPECT_TRUE(end) << "the end did not ride on the last steps' frame";
    EXPECT_TRUE(consumer.last_header.end_of_task());
  }
}

// A consumer that asks for compact headers gets them (only what the spec leaves open: here
// nothing but each step's numbers); one that does not ask gets full headers, from the same
// worker and task.
TEST(StreamCoalescingTest, CompactHeadersOnlyForTheConsumerThatAsks) {
  auto scalar = std::make_shared<const CompactSpec>(
      CompactSpec::FromElementSpec(ElementSpec(TensorSpec{DType::kInt64, Shape()})));
  for (bool compact : {true, false}) {
    ScalarTask task(10);
    TestStreamServer server(&task, Options(absl::ZeroDuration()));
    task.Release(10);
    ASSERT_TRUE(task.WaitProduced(10));
    Consumer consumer(server.address(), 1 << 20, compact ? scalar : nullptr);
    std::vector<int64_t> steps;
    bool end = false;
    ASSERT_TRUE(consumer.Next(&steps, &end));
    EXPECT_EQ(steps, (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));
    if (compact) {
      EXPECT_EQ(consumer.last_header.steps_size(), 0);
      EXPECT_EQ(consumer.last_header.compact_steps(), 10u);
      EXPECT_EQ(consumer.last_header.compact_values_size(), 40);  // 4 numbers a step
    } else {
      EXPECT_EQ(consumer.last_header.steps_size(), 10);
      EXPECT_EQ(consumer.last_header.compact_steps(), 0u);
    }
    while (!end && consumer.Next(&steps, &end)) EXPECT_TRUE(steps.empty());
    EXPECT_TRUE(end);
  }
}

// Steps that do not match the consumer's spec still arrive, with full headers.
TEST(StreamCoalescingTest, StepsNotMatchingTheSpecGoWithFullHeaders) {
  auto vector = std::make_shared<const CompactSpec>(
      CompactSpec::FromElementSpec(ElementSpec(TensorSpec{DType::kInt64, Shape({-1})})));
  ScalarTask task(3);
  TestStreamServer server(&task, Options(absl::ZeroDuration()));
  task.Release(3);
  ASSERT_TRUE(task.WaitProduced(3));
  Consumer consumer(server.address(), 1 << 20, vector);
  std::vector<int64_t> steps;
  bool end = false;
  ASSERT_TRUE(consumer.Next(&steps, &end));
  EXPECT_EQ(steps, (std::vector<int64_t>{0, 1, 2}));
  EXPECT_EQ(consumer.last_header.steps_size(), 3);
  EXPECT_EQ(consumer.last_header.compact_steps(), 0u);
}

// A spec that cannot be one ends the call with INVALID_ARGUMENT before any frame.
TEST(StreamCoalescingTest, AnInvalidCompactSpecIsRefused) {
  ScalarTask task(3);
  TestStreamServer server(&task, Options(absl::ZeroDuration()));
  auto channel = grpc::CreateChannel(server.address(), grpc::InsecureChannelCredentials());
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + kStuck));
  std::unique_ptr<grpc::ClientReaderWriter<grpc::ByteBuffer, grpc::ByteBuffer>> stream =
      OpenStreamSteps(channel, &context);
  proto::ConsumerMessage m;
  proto::StreamRequest* r = m.mutable_request();
  r->set_wire_version(proto::WIRE_VERSION_2);
  r->set_job_id(1);
  r->set_task_id(1);
  r->set_initial_credit_bytes(1 << 20);
  r->set_window_bytes(1 << 20);
  r->set_compact_headers(true);
  proto::TensorSpecProto* leaf = r->add_compact_spec();
  leaf->set_dtype(proto::DT_INT64);
  leaf->add_shape(-5);
  ASSERT_TRUE(stream->Write(EncodeConsumerMessage(m)));
  grpc::ByteBuffer bb;
  EXPECT_FALSE(stream->Read(&bb));
  grpc::Status status = stream->Finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(status.error_message().find("leaf 0"), std::string::npos) << status.error_message();
}

// A small frame waits for steps that become ready after its first one: with the steps
// released one by one, each only after the stream took the previous, the first frame still
// carries max_frame_steps of them. With coalescing off, the same schedule gives one step.
TEST(StreamCoalescingTest, SmallFrameWaitsForMoreSteps) {
  for (const bool coalesce : {true, false}) {
    SCOPED_TRACE(coalesce ? "coalescing" : "no coalescing");
    ScalarTask task(4);
    // The bound is far beyond the test: it ends because the frame is full, not on time.
    TestStreamServer server(&task,
                            Options(coalesce ? absl::Minutes(10) : absl::ZeroDuration(), 4));
    Consumer consumer(server.address(), 1 << 20);
    for (int64_t s = 0; s < 4; ++s) {
      task.Release(1);
      ASSERT_TRUE(task.WaitTaken(s + 1));
    }
    std::vector<int64_t> steps, all;
    bool end = false;
    ASSERT_TRUE(consumer.Next(&steps, &end));
    if (coalesce) {
      EXPECT_EQ(steps, (std::vector<int64_t>{0, 1, 2, 3}));
    } else {
      EXPECT_EQ(steps, (std::vector<int64_t>{0}));
    }
    all = steps;
    while (!end && consumer.Next(&steps, &end)) all.insert(all.end(), steps.begin(), steps.end());
    EXPECT_TRUE(end);
    EXPECT_EQ(all, (std::vector<int64_t>{0, 1, 2, 3}));
  }
}

// The wait is bounded: a frame whose producer stalls goes out with what it has once
// coalesce_wait has passed (here the producer never makes step 1 until the test ends).
TEST(StreamCoalescingTest, FrameGoesOutAfterTheBound) {
  ScalarTask task(5);
  TestStreamServer server(&task, Options(absl::Milliseconds(2)));
  Consumer consumer(server.address(), 1 << 20);
  task.Release(1);
  std::vector<int64_t> steps;
  bool end = false;
  ASSERT_TRUE(consumer.Next(&steps, &end));
  EXPECT_EQ(steps, (std::vector<int64_t>{0}));
  EXPECT_FALSE(end);
  task.Release(4);
  std::vector<int64_t> rest;
  while (!end && consumer.Next(&steps, &end)) rest.insert(rest.end(), steps.begin(), steps.end());
  EXPECT_EQ(rest, (std::vector<int64_t>{1, 2, 3, 4}));
}

// A frame never takes more than the credit: with credit for exactly 3 steps and 6 ready, the
// first frame has 3 (at once: a spent credit ends the wait), the rest come after a grant.
TEST(StreamCoalescingTest, FrameStopsAtTheCredit) {
  ScalarTask task(6);
  TestStreamServer server(&task, Options(absl::Minutes(10)));
  task.Release(6);
  ASSERT_TRUE(task.WaitProduced(6));
  Consumer consumer(server.address(), 3 * kCost);
  std::vector<int64_t> steps;
  bool end = false;
  ASSERT_TRUE(consumer.Next(&steps, &end));
  EXPECT_EQ(steps, (std::vector<int64_t>{0, 1, 2}));
  consumer.Grant(3 * kCost);
  ASSERT_TRUE(consumer.Next(&steps, &end));
  EXPECT_EQ(steps, (std::vector<int64_t>{3, 4, 5}));
  if (!end) {
    consumer.Grant(kCost);  // the end frame needs a byte of credit
    ASSERT_TRUE(consumer.Next(&steps, &end));
    EXPECT_TRUE(steps.empty());
  }
  EXPECT_TRUE(end);
}

}  // namespace
}  // namespace sluice
