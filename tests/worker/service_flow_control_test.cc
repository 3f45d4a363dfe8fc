// Flow control in bytes (docs/SERVICE.md, "Flow control"): a consumer's receive budget is shared
// by its streams, a slow consumer holds its workers at the budget, credit goes back in batches
// (a quarter of a stream's window at a time), a step larger than a stream's window still flows,
// and the budget holds with 1 and with 64 workers. A consumer that reads nothing holds its
// workers there, and their producers stop at --buffer_bytes: both sides are asserted exactly,
// the consumer's bytes and steps (FlowStats) and each worker's (its task's StepBuffer stats, what
// /metrics exports as sluice_worker_buffer_bytes, _buffer_steps and _task_steps_produced_total,
// and the steps its streams delivered). Real coordinator and workers in process (port 0), a
// ServiceStepSource read directly so that its FlowStats can be seen; waits are on conditions
// (bounded), never on time.
#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/service_step_source.h"
#include "core/rpc/step_frame.h"
#include "core/tensor/proto_convert.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/coordinator.grpc.pb.h"
#include "proto/dataset.pb.h"
#include "sluice/dataset.h"
#include "tests/worker/in_process_cluster.h"
#include "worker/step_buffer.h"
#include "worker/task_runner.h"

namespace sluice {
namespace {

// Liveness bound only (a broken build hangs here instead of forever).
constexpr absl::Duration kStuck = absl::Seconds(60);

constexpr int64_t kBatch = 512;  // int64 rows: 4 KiB of payload a step
constexpr int64_t kSteps = 200;
// What a step costs the worker's buffer (TaskStep::bytes: its payload) and the consumer's
// budget (the payload plus the per-step overhead).
constexpr int64_t kStepPayload = kBatch * 8;
constexpr int64_t kStepCost = kStepPayload + static_cast<int64_t>(kStepCreditOverheadBytes);

// A DATA job of range(kBatch * kSteps).batch(kBatch) over the cluster's workers (one task
// each), one consumer with one replica; the source reading it with `budget` bytes.
std::unique_ptr<ServiceStepSource> OpenSource(const Cluster& cluster, int64_t budget) {
  auto stub = proto::CoordinatorService::NewStub(
      grpc::CreateChannel(cluster.address(), grpc::InsecureChannelCredentials()));
  const Dataset ds = Dataset::Range(kBatch * kSteps).Batch(kBatch);
  proto::RegisterDatasetRequest reg;
  reg.set_wire_version(proto::WIRE_VERSION_1);
  *reg.mutable_dataset() = ds.def();
  proto::RegisterDatasetResponse reg_resp;
  {
    grpc::ClientContext c;
    grpc::Status s = stub->RegisterDataset(&c, reg, &reg_resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
  }
  proto::GetOrCreateJobRequest job;
  job.set_wire_version(proto::WIRE_VERSION_1);
  job.mutable_options()->set_dataset_id(reg_resp.dataset_id());
  job.mutable_options()->set_num_consumers(1);
  job.mutable_options()->set_replicas_per_consumer(1);
  job.mutable_options()->set_sharding_policy(proto::SHARDING_DATA);
  proto::GetOrCreateJobResponse job_resp;
  {
    grpc::ClientContext c;
    grpc::Status s = stub->GetOrCreateJob(&c, job, &job_resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
  }
  proto::GetElementSpecRequest spec_req;
  spec_req.set_job_id(job_resp.job_id());
  proto::GetElementSpecResponse spec_resp;
  {
    grpc::ClientContext c;
    grpc::Status s = stub->GetElementSpec(&c, spec_req, &spec_resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
  }
  absl::StatusOr<ElementSpec> spec = ElementSpecFromProto(spec_resp.per_replica_spec());
  EXPECT_TRUE(spec.ok()) << spec.status();

  ServiceStepSourceOptions o;
  o.coordinator_address = cluster.address();
  o.job_id = job_resp.job_id();
  o.per_replica_spec = *spec;
  o.receive_budget_bytes = budget;
  absl::StatusOr<std::unique_ptr<ServiceStepSource>> source = ServiceStepSource::Create(o);
  EXPECT_TRUE(source.ok()) << source.status();
  return source.ok() ? *std::move(source) : nullptr;
}

int64_t StepsDelivered(Cluster& cluster) {
  int64_t n = 0;
  for (int w = 0; w < cluster.num_workers(); ++w) {
    for (const auto& runner : cluster.worker(w)->TaskRunners()) n += runner->steps_delivered();
  }
  return n;
}

// Whether every worker's task producer has stopped for want of room in its buffer (its last
// push was refused and it waits for space), so that what it buffered can no longer change
// while the consumer reads nothing.
bool EveryProducerStopped(Cluster& cluster) {
  for (int w = 0; w < cluster.num_workers(); ++w) {
    const auto runners = cluster.worker(w)->TaskRunners();
    if (runners.empty()) return false;
    for (const auto& runner : runners) {
      if (!runner->buffer()->stats().producer_waiting_for_space) return false;
    }
  }
  return true;
}

// Waits (bounded) until both sides have settled at once: `consumer_settled` holds for the
// consumer's stats, every producer has stopped, and the workers' delivered-step counts (a frame
// counts once its write completes, possibly after it arrived) add up to what the consumer
// received. One condition over both sides: a stream whose first call reached its worker before
// the worker ran the task is refused (UNAVAILABLE) and opened again, so its credit is
// outstanding, then not, then again; only the state once every stream runs is final.
bool WaitForBothSidesToSettle(
    Cluster& cluster, const ServiceStepSource& source,
    const std::function<bool(const ServiceStepSource::FlowStats&)>& consumer_settled) {
  for (int i = 0; i < 60000; ++i) {
    const ServiceStepSource::FlowStats f = source.flow_stats();
    if (consumer_settled(f) && EveryProducerStopped(cluster) &&
        StepsDelivered(cluster) == f.steps_received) {
      return true;
    }
    absl::SleepFor(absl::Milliseconds(1));
  }
  return false;
}

// The workers' side of a consumer that reads nothing, once every producer has stopped
// (WaitForBothSidesToSettle): each task's buffer holds exactly `buffer_bytes`, whole steps of
// kStepPayload bytes (what its streams have not sent), and its producer made what it sent plus
// those; each stream sent `sent_per_task`. (Whether the producer waits right now is not checked
// again: an attach elsewhere may wake it to try once more, and be refused, at any time.)
void ExpectProducersStoppedAtTheirBuffer(Cluster& cluster, int64_t buffer_bytes,
                                         int64_t sent_per_task) {
  ASSERT_EQ(buffer_bytes % kStepPayload, 0);
  const int64_t buffered_steps = buffer_bytes / kStepPayload;
  for (int w = 0; w < cluster.num_workers(); ++w) {
    for (const auto& runner : cluster.worker(w)->TaskRunners()) {
      const StepBuffer::Stats s = runner->buffer()->stats();
      SCOPED_TRACE(absl::StrCat("worker ", w, ", task ", runner->task().task_id()));
      EXPECT_EQ(s.max_bytes, static_cast<size_t>(buffer_bytes));
      EXPECT_EQ(s.bytes, static_cast<size_t>(buffer_bytes));
      EXPECT_EQ(s.steps, static_cast<size_t>(buffered_steps));
      EXPECT_EQ(runner->steps_delivered(), sent_per_task);
      EXPECT_EQ(s.steps_produced, sent_per_task + buffered_steps);
    }
  }
}

// Each stream's window: the budget less the byte kept for the raise, over the streams.
int64_t WindowOf(int64_t budget, int64_t streams) { return (budget - 1) / streams; }

// What the consumer may hold plus what its workers may still send, at most (docs/SERVICE.md):
// the budget, or, while it holds a step larger than a window, budget - 1 + (step - window):
// one such step at a time, whatever the number of workers.
int64_t BudgetBound(int64_t budget, int64_t streams) {
  return std::max(budget, budget - 1 + kStepCost - WindowOf(budget, streams));
}

// Reads every step; checks the job's order (round-robin over the DATA tasks is the single
// pipeline's order) and that the budget was never exceeded. Returns the steps read.
int64_t ReadAll(ServiceStepSource* source, int64_t budget_bound) {
  int64_t step = 0;
  for (; step <= kSteps; ++step) {
    std::vector<Element> replicas;
    bool end = false;
    absl::Status s = source->GetNextStep(&replicas, &end);
    EXPECT_TRUE(s.ok()) << s;
    if (!s.ok() || end) break;
    if (replicas.size() != 1 || !replicas[0].is_leaf()) {
      ADD_FAILURE() << "step " << step << ": not one replica with one leaf";
      break;
    }
    const Tensor& t = replicas[0].leaf();
    EXPECT_EQ(t.num_elements(), kBatch);
    EXPECT_EQ(t.data<int64_t>()[0], step * kBatch) << "step " << step;
    const ServiceStepSource::FlowStats f = source->flow_stats();
    EXPECT_LE(f.peak_bytes, budget_bound) << "after step " << step;
    EXPECT_LE(f.held_bytes, budget_bound) << "after step " << step;
  }
  return step;
}

// A consumer that reads nothing holds both workers at its budget: each stream gets half of it
// as its window, the workers send whole steps while they fit and then stop, and the consumer
// then holds exactly what it was sent.
TEST(ServiceFlowControlTest, SlowConsumerHoldsWorkersAtTheBudget) {
  constexpr int64_t kBufferBytes = 64 << 10;  // 16 steps
  Cluster cluster(2, absl::Seconds(10), /*buffer_bytes=*/kBufferBytes);
  constexpr int64_t kBudget = 64 << 10;
  std::unique_ptr<ServiceStepSource> source = OpenSource(cluster, kBudget);
  ASSERT_NE(source, nullptr);
  const int64_t window = WindowOf(kBudget, 2);
  const int64_t per_stream = window / kStepCost;  // whole steps that fit a window: 7
  ASSERT_GT(per_stream, 1);

  // Both workers have sent what their credit allows (less than one step of credit is left),
  // written exactly the steps the consumer holds, and their producers stopped at
  // --buffer_bytes.
  const auto consumer_settled = [&](const ServiceStepSource::FlowStats& f) {
    return f.steps_received == 2 * per_stream && f.outstanding_bytes < 2 * kStepCost &&
           f.held_bytes + f.outstanding_bytes == 2 * window;
  };
  ASSERT_TRUE(source->WaitForFlowStats(consumer_settled, kStuck))
      << "received " << source->flow_stats().steps_received;
  ASSERT_TRUE(WaitForBothSidesToSettle(cluster, *source, consumer_settled))
      << "delivered " << StepsDelivered(cluster) << ", received "
      << source->flow_stats().steps_received;
  ServiceStepSource::FlowStats f = source->flow_stats();
  EXPECT_EQ(f.window_bytes, window);
  EXPECT_EQ(f.held_bytes, 2 * per_stream * kStepCost);
  // Initial credit: the whole budget but the byte kept for a raise.
  EXPECT_EQ(f.held_bytes + f.outstanding_bytes, 2 * window);
  EXPECT_EQ(2 * window, kBudget - 2);
  EXPECT_LE(f.peak_bytes, kBudget);
  EXPECT_EQ(f.credit_grants, 0);  // nothing consumed, nothing granted back
  // The workers' side.
  EXPECT_EQ(StepsDelivered(cluster), f.steps_received);
  ExpectProducersStoppedAtTheirBuffer(cluster, kBufferBytes, per_stream);
  // Reading on: every step in order, the budget never exceeded, and credit granted back in
  // batches of at least a quarter of the window (at most one grant per window/4 bytes read,
  // where the old protocol granted once per step).
  EXPECT_EQ(ReadAll(source.get(), kBudget), kSteps);
  f = source->flow_stats();
  EXPECT_EQ(f.steps_received, kSteps);
  EXPECT_GE(f.credit_grants, 1);
  EXPECT_LE(f.credit_grants, kSteps * kStepCost / (window / 4) + 2);
  EXPECT_LT(f.credit_grants, kSteps / 2);
}

// Steps larger than the window (4 KiB steps, 1 KiB budget over two streams) still flow, in
// order, one at a time: the consumer never holds more than one of them.
TEST(ServiceFlowControlTest, StepsLargerThanTheWindowStillFlow) {
  Cluster cluster(2);
  constexpr int64_t kBudget = 1024;
  std::unique_ptr<ServiceStepSource> source = OpenSource(cluster, kBudget);
  ASSERT_NE(source, nullptr);
  EXPECT_EQ(ReadAll(source.get(), BudgetBound(kBudget, 2)), kSteps);
  EXPECT_EQ(source->flow_stats().steps_received, kSteps);
  EXPECT_LT(BudgetBound(kBudget, 2), kBudget + kStepCost);
}

// One budget, 1 or 64 workers (one DATA task each): a consumer that reads nothing at first
// holds its workers at its budget (held plus granted is the budget, the steps held are exactly
// the whole steps that fit each window) and every producer stops at its --buffer_bytes; then it
// reads every step once, in order, never holding more than the budget plus one step's excess
// over a window. With 64 workers the window (1023 bytes) is
// smaller than a step (4160 bytes): the consumer's one receive budget bounds what all of its
// streams hold together, however many they are (before the raise, each of the 64 streams took
// a step larger than its window: four times the budget).
class ServiceFlowControlWorkersTest : public ::testing::TestWithParam<int> {};

TEST_P(ServiceFlowControlWorkersTest, ConsumerStaysWithinItsBudget) {
  const int workers = GetParam();
  // Each producer stops at its buffer before its task ends: with 64 workers a task has 3 or 4
  // of the 200 steps, so the buffer holds 2 of them; with one, 16 of them.
  const int64_t buffer_bytes = workers == 1 ? int64_t{64} << 10 : 2 * kStepPayload;
  Cluster cluster(workers, absl::Seconds(10), static_cast<size_t>(buffer_bytes));
  constexpr int64_t kBudget = 64 << 10;
  std::unique_ptr<ServiceStepSource> source = OpenSource(cluster, kBudget);
  ASSERT_NE(source, nullptr);
  const int64_t window = WindowOf(kBudget, workers);
  const int64_t bound = BudgetBound(kBudget, workers);
  // Whole steps that fit a window (1 worker: 15; 64 workers: none, the steps wait for reads).
  const int64_t per_stream = window / kStepCost;
  ASSERT_EQ(per_stream, workers == 1 ? 15 : 0);

  // Reading nothing: every stream has its initial credit (the whole budget less the byte kept
  // for the raise), the workers have sent the whole steps it allows (64 workers: none, a step
  // is larger than a window and nobody waits for one, so nothing is raised), every producer
  // has stopped at its buffer, and the delivered counts have caught up with what arrived.
  const auto consumer_settled = [&](const ServiceStepSource::FlowStats& f) {
    return f.steps_received == workers * per_stream &&
           f.held_bytes + f.outstanding_bytes == workers * window;
  };
  ASSERT_TRUE(source->WaitForFlowStats(consumer_settled, kStuck))
      << "received " << source->flow_stats().steps_received << ", held + outstanding "
      << source->flow_stats().held_bytes + source->flow_stats().outstanding_bytes;
  ASSERT_TRUE(WaitForBothSidesToSettle(cluster, *source, consumer_settled))
      << "delivered " << StepsDelivered(cluster) << ", received "
      << source->flow_stats().steps_received << ", held + outstanding "
      << source->flow_stats().held_bytes + source->flow_stats().outstanding_bytes;
  ServiceStepSource::FlowStats f = source->flow_stats();
  EXPECT_EQ(f.window_bytes, window);
  EXPECT_EQ(f.steps_received, workers * per_stream);
  EXPECT_EQ(f.held_bytes, workers * per_stream * kStepCost);
  EXPECT_EQ(f.held_bytes + f.outstanding_bytes, workers * window);
  EXPECT_LE(workers * window, kBudget);
  EXPECT_LE(f.peak_bytes, kBudget);
  EXPECT_EQ(f.credit_raises, 0);
  EXPECT_EQ(StepsDelivered(cluster), f.steps_received);
  ExpectProducersStoppedAtTheirBuffer(cluster, buffer_bytes, per_stream);

  // Reading everything: each step once, in order, within the bound, which does not grow with
  // the number of workers (less than one step over the budget).
  EXPECT_EQ(ReadAll(source.get(), bound), kSteps);
  f = source->flow_stats();
  EXPECT_EQ(f.steps_received, kSteps);
  EXPECT_LE(f.peak_bytes, bound);
  EXPECT_LT(bound, kBudget + kStepCost);
  std::vector<Element> replicas;
  bool end = false;
  ASSERT_TRUE(source->GetNextStep(&replicas, &end).ok());
  EXPECT_TRUE(end);
}

INSTANTIATE_TEST_SUITE_P(Workers, ServiceFlowControlWorkersTest, ::testing::Values(1, 64),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return absl::StrCat(info.param);
                         });

}  // namespace
}  // namespace sluice
