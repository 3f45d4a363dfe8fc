// SHARDING_RANGES through real workers (in process, port 0): a consumer reads the job's ranges
// in order straight from the workers' StreamSteps, as docs/SERVICE.md ("Global order") says a
// consumer does, and must get exactly the single-pipeline global order (GlobalOrderRange over
// whole epochs) whatever the number of workers, a drain or a worker joining mid-job.
#include <algorithm>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "core/data/executor.h"
#include "core/data/distribute/global_order.h"
#include "core/data/iterator.h"
#include "core/rpc/step_frame.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/impl/rpc_method.h"
#include "grpcpp/support/sync_stream.h"
#include "gtest/gtest.h"
#include "server/grpc_coordinator_service.h"
#include "worker/grpc_worker_service.h"
#include "worker/worker_server.h"

namespace sluice {
namespace {

void Quiet(absl::string_view) {}

struct Step {
  int64_t global_step = -1;
  std::vector<int64_t> values;
  bool operator==(const Step& o) const {
    return global_step == o.global_step && values == o.values;
  }
};

class RangesCluster {
 public:
  explicit RangesCluster(int num_workers) {
    CoordinatorServerOptions c;
    c.coordinator.log = Quiet;
    c.coordinator.ranges_per_worker = 2;
    auto coordinator = CoordinatorServer::Start(c);
    EXPECT_TRUE(coordinator.ok()) << coordinator.status();
    coordinator_ = *std::move(coordinator);
    for (int i = 0; i < num_workers; ++i) AddWorker();
    for (int i = 0; i < 2000; ++i) {
      if (std::all_of(workers_.begin(), workers_.end(),
                      [](const auto& w) { return w->registered(); })) {
        break;
      }
      absl::SleepFor(absl::Milliseconds(5));
    }
    for (const auto& w : workers_) EXPECT_TRUE(w->registered());
  }

  WorkerServer* AddWorker() {
    WorkerServerOptions w;
    w.coordinator_address = coordinator_->address();
    w.heartbeat_interval = absl::Milliseconds(50);
    w.buffer_bytes = size_t{1} << 20;
    w.log = Quiet;
    auto worker = WorkerServer::Start(w);
    EXPECT_TRUE(worker.ok()) << worker.status();
    workers_.push_back(*std::move(worker));
    return workers_.back().get();
  }

  Coordinator& coordinator() { return coordinator_->coordinator(); }
  WorkerServer* worker(int i) { return workers_[i].get(); }

 private:
  std::unique_ptr<CoordinatorServer> coordinator_;
  std::vector<std::unique_ptr<WorkerServer>> workers_;
};

// Reads task `task_id` from `address` from task step `start`; appends the steps it receives.
// OK at the end of the task, else the stream's error (UNAVAILABLE when the task moved).
absl::Status ReadTask(const std::string& address, int64_t job_id, int64_t task_id,
                      int64_t start, std::vector<Step>* out) {
  auto channel = grpc::CreateChannel(address, grpc::InsecureChannelCredentials());
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(60)));
  std::unique_ptr<grpc::ClientReaderWriter<grpc::ByteBuffer, grpc::ByteBuffer>> stream(
      grpc::internal::ClientReaderWriterFactory<grpc::ByteBuffer, grpc::ByteBuffer>::Create(
          channel.get(),
          grpc::internal::RpcMethod(kStreamStepsMethod, grpc::internal::RpcMethod::BIDI_STREAMING,
                                    channel),
          &context));
  proto::ConsumerMessage first;
  proto::StreamRequest* request = first.mutable_request();
  request->set_wire_version(proto::WIRE_VERSION_2);
  request->set_job_id(job_id);
  request->set_task_id(task_id);
  request->set_consumer_index(0);
  request->set_start_step(start);
  request->set_initial_credit_bytes(int64_t{1} << 30);
  request->set_window_bytes(int64_t{1} << 30);
  if (!stream->Write(EncodeConsumerMessage(first))) {
    return absl::UnavailableError("cannot write the StreamRequest");
  }
  absl::Status result;
  bool last = false;
  grpc::ByteBuffer bb;
  int64_t next = start;
  while (!last && stream->Read(&bb)) {
    StepFrame frame;
    absl::Status s = DecodeStepFrame(bb, {}, &frame);
    if (!s.ok()) return s;
    for (WireStep& w : frame.steps) {
      if (w.task_step != next) {
        return absl::DataLossError(absl::StrCat("task step ", w.task_step, ", expected ", next));
      }
      ++next;
      Step step;
      step.global_step = w.global_step;
      for (const auto& piece : w.pieces) {
        for (const Tensor& t : piece) {
          step.values.insert(step.values.end(), t.data<int64_t>(),
                             t.data<int64_t>() + t.num_elements());
        }
      }
      out->push_back(std::move(step));
    }
    if (!frame.status.ok() || frame.end_of_task) {
      result = frame.status;  // OK at the end of the task
      last = true;
    }
  }
  stream->WritesDone();
  grpc::Status finish = stream->Finish();
  if (!last) {
    // No last frame: the call's status says why (UNAVAILABLE for a worker that went away).
    result = finish.ok() ? absl::UnavailableError("stream ended before end_of_task")
                         : absl::Status(static_cast<absl::StatusCode>(finish.error_code()),
                                        finish.error_message());
    if (result.code() == absl::StatusCode::kCancelled) {
      result = absl::UnavailableError(result.message());
    }
  }
  return result;
}

// Reads the RANGES job the way docs/SERVICE.md says a consumer does: range 0 to its end, then
// range 1, ..., finding each range's worker with ClientHeartbeat and reopening a range on its
// new worker at the next task step after UNAVAILABLE. `after_range` runs after each range.
absl::StatusOr<std::vector<Step>> ReadJob(Coordinator& coordinator, int64_t job_id,
                                          const std::function<void(int64_t)>& after_range) {
  std::vector<Step> out;
  const absl::Time give_up = absl::Now() + absl::Seconds(120);
  int64_t num_ranges = -1;
  for (int64_t range = 0; num_ranges < 0 || range < num_ranges;) {
    if (absl::Now() > give_up) return absl::DeadlineExceededError("job did not finish");
    proto::ClientHeartbeatRequest req;
    req.set_wire_version(proto::WIRE_VERSION_1);
    req.set_job_id(job_id);
    proto::ClientHeartbeatResponse hb;
    absl::Status s = coordinator.ClientHeartbeat(req, &hb);
    if (!s.ok()) return s;
    num_ranges = hb.num_tasks();
    if (range >= num_ranges) break;
    const proto::TaskInfo* info = nullptr;
    for (const proto::TaskInfo& t : hb.tasks()) {
      if (t.task_index() == range) info = &t;
    }
    if (info == nullptr) {
      if (range < hb.num_tasks_created()) {
        return absl::InternalError(absl::StrCat("range ", range, " finished before it was read"));
      }
      absl::SleepFor(absl::Milliseconds(5));  // not made yet
      continue;
    }
    if (info->worker_address().empty()) {
      absl::SleepFor(absl::Milliseconds(5));
      continue;
    }
    // Steps of this range read so far (a previous stream of it may have broken).
    int64_t have = 0;
    for (const Step& st : out) {
      have += st.global_step >= info->first_step() &&
                      st.global_step < info->first_step() + info->num_steps()
                  ? 1
                  : 0;
    }
    absl::Status r = ReadTask(info->worker_address(), job_id, info->task_id(), have, &out);
    if (r.ok()) {
      if (after_range) after_range(range);
      ++range;
    } else if (r.code() != absl::StatusCode::kUnavailable) {
      return r;
    } else {
      absl::SleepFor(absl::Milliseconds(5));
    }
  }
  return out;
}

// The single pipeline's steps: GlobalOrderRange over each whole epoch.
std::vector<Step> Reference(const Dataset& ds, const GlobalOrderOptions& order, int64_t epochs) {
  std::vector<Step> out;
  auto plan = PlanGlobalOrder(ds);
  EXPECT_TRUE(plan.ok()) << plan.status();
  for (int64_t e = 0; e < epochs; ++e) {
    auto epoch = GlobalOrderRange(ds, *plan, order, e, 0, plan->steps_per_epoch);
    EXPECT_TRUE(epoch.ok()) << epoch.status();
    auto it = MakeIterator(*epoch);
    EXPECT_TRUE(it.ok()) << it.status();
    for (int64_t i = 0; i < 100000; ++i) {
      Element el;
      bool end = false;
      EXPECT_TRUE((*it)->GetNext(&el, &end).ok());
      if (end) break;
      Step step;
      step.global_step = static_cast<int64_t>(out.size());
      const Tensor t = el.Flatten()[0];
      step.values.assign(t.data<int64_t>(), t.data<int64_t>() + t.num_elements());
      out.push_back(std::move(step));
    }
  }
  return out;
}

// A test-side model of a seeded RANGES order, written from the algorithm docs/SERVICE.md and
// core/util/index_permutation.h describe and sharing no code with it: SHUFFLE_FULL over the
// records of range(n), epoch by epoch, batched. The service's order must equal it (not only
// its own single-pipeline run).
uint64_t ModelMix(uint64_t z) {
  z ^= z >> 30;
  z *= 0xbf58476d1ce4e5b9ULL;
  z ^= z >> 27;
  z *= 0x94d049bb133111ebULL;
  z ^= z >> 31;
  return z;
}

uint64_t ModelFeistel(uint64_t x, uint64_t m, uint64_t key) {
  if (m <= 1) return x;
  int bits = 0;
  while ((uint64_t{1} << bits) < m) ++bits;  // values 0 .. m-1 fit in `bits` bits
  const int h = (bits + 1) / 2;
  const uint64_t mask = (uint64_t{1} << h) - 1;
  auto encrypt = [&](uint64_t v) {
    uint64_t left = v >> h, right = v & mask;
    for (uint64_t r = 0; r < 8; ++r) {
      const uint64_t round_key = ModelMix(key + (r + 1) * 0x9e3779b97f4a7c15ULL);
      const uint64_t next = left ^ (ModelMix(right ^ round_key) & mask);
      left = right;
      right = next;
    }
    return (left << h) | right;
  };
  uint64_t y = encrypt(x);
  while (y >= m) y = encrypt(y);  // cycle walking
  return y;
}

std::vector<Step> ModelSteps(int64_t n, int64_t batch, uint64_t seed, int64_t epochs) {
  std::vector<Step> out;
  for (int64_t e = 0; e < epochs; ++e) {
    const uint64_t key =
        ModelMix(seed ^ ModelMix(static_cast<uint64_t>(e) ^ 0x9e3779b97f4a7c15ULL));
    for (int64_t first = 0; first < n; first += batch) {
      Step step;
      step.global_step = static_cast<int64_t>(out.size());
      for (int64_t p = first; p < std::min(n, first + batch); ++p) {
        step.values.push_back(static_cast<int64_t>(
            ModelFeistel(static_cast<uint64_t>(p), static_cast<uint64_t>(n), key)));
      }
      out.push_back(std::move(step));
    }
  }
  return out;
}

constexpr int64_t kRecords = 203;
constexpr int64_t kBatch = 8;  // 26 steps per epoch, the last of 3 records

absl::StatusOr<int64_t> MakeJob(Coordinator& coordinator, const Dataset& ds, int64_t epochs) {
  proto::RegisterDatasetRequest reg;
  reg.set_wire_version(proto::WIRE_VERSION_1);
  *reg.mutable_dataset() = ds.def();
  proto::RegisterDatasetResponse reg_resp;
  absl::Status s = coordinator.RegisterDataset(reg, &reg_resp);
  if (!s.ok()) return s;
  proto::GetOrCreateJobRequest req;
  req.set_wire_version(proto::WIRE_VERSION_1);
  proto::JobOptions* o = req.mutable_options();
  o->set_dataset_id(reg_resp.dataset_id());
  o->set_num_consumers(1);
  o->set_replicas_per_consumer(1);
  o->set_sharding_policy(proto::SHARDING_RANGES);
  o->mutable_order()->set_shuffle(proto::SHUFFLE_FULL);
  o->mutable_order()->set_seed(11);
  o->mutable_order()->set_num_epochs(epochs);
  o->mutable_order()->set_range_steps(3);
  proto::GetOrCreateJobResponse resp;
  s = coordinator.GetOrCreateJob(req, &resp);
  if (!s.ok()) return s;
  if (!resp.fallback_reason().empty()) {
    return absl::InternalError(absl::StrCat("fell back: ", resp.fallback_reason()));
  }
  return resp.job_id();
}

GlobalOrderOptions Order() {
  GlobalOrderOptions g;
  g.shuffle = proto::SHUFFLE_FULL;
  g.seed = 11;
  return g;
}

void ExpectSameSteps(const std::vector<Step>& got, const std::vector<Step>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(got[i].global_step, want[i].global_step) << "step " << i;
    EXPECT_EQ(got[i].values, want[i].values) << "step " << i;
  }
}

class ServiceRangesTest : public ::testing::TestWithParam<int> {};

TEST_P(ServiceRangesTest, StepsAreTheSinglePipelinesGlobalOrderForAnyNumberOfWorkers) {
  RangesCluster cluster(GetParam());
  const Dataset ds = Dataset::Range(kRecords).Batch(kBatch);
  auto job = MakeJob(cluster.coordinator(), ds, /*epochs=*/2);
  ASSERT_TRUE(job.ok()) << job.status();
  auto steps = ReadJob(cluster.coordinator(), *job, nullptr);
  ASSERT_TRUE(steps.ok()) << steps.status();
  ExpectSameSteps(*steps, Reference(ds, Order(), 2));
  // And the test-side model of the seeded permutation (Order(): seed 11, SHUFFLE_FULL).
  ExpectSameSteps(*steps, ModelSteps(kRecords, kBatch, 11, 2));
}

// The model itself is no identity and depends on the seed and the epoch, so that the check
// above cannot pass by accident.
TEST(ServiceRangesModelTest, TheModelPermutesEachEpochDifferentlyPerSeed) {
  const std::vector<Step> a = ModelSteps(kRecords, kBatch, 11, 2);
  ASSERT_EQ(a.size(), 52u);
  std::vector<int64_t> epoch0, epoch1;
  for (size_t i = 0; i < 52; ++i) {
    std::vector<int64_t>& epoch = i < 26 ? epoch0 : epoch1;
    epoch.insert(epoch.end(), a[i].values.begin(), a[i].values.end());
  }
  std::vector<int64_t> sorted = epoch0;
  std::sort(sorted.begin(), sorted.end());
  for (int64_t i = 0; i < kRecords; ++i) ASSERT_EQ(sorted[static_cast<size_t>(i)], i);
  EXPECT_NE(epoch0, sorted);
  EXPECT_NE(epoch0, epoch1);
  EXPECT_NE(ModelSteps(kRecords, kBatch, 12, 1)[0].values, a[0].values);
}

INSTANTIATE_TEST_SUITE_P(Workers, ServiceRangesTest, ::testing::Values(1, 2, 4));

TEST(ServiceRangesDrainTest, ADrainingWorkersRangesMoveAndNothingIsLostOrRepeated) {
  RangesCluster cluster(2);
  const Dataset ds = Dataset::Range(kRecords).Batch(kBatch);
  auto job = MakeJob(cluster.coordinator(), ds, /*epochs=*/1);
  ASSERT_TRUE(job.ok()) << job.status();
  std::thread drainer;
  absl::Notification drained;
  auto steps = ReadJob(cluster.coordinator(), *job, [&](int64_t range) {
    if (range == 1) {
      drainer = std::thread([&] {
        cluster.worker(0)->Drain(absl::Seconds(10));
        drained.Notify();
      });
    }
  });
  if (drainer.joinable()) drainer.join();
  ASSERT_TRUE(steps.ok()) << steps.status();
  EXPECT_TRUE(drained.HasBeenNotified());
  ExpectSameSteps(*steps, Reference(ds, Order(), 1));
}

TEST(ServiceRangesElasticTest, AWorkerAddedMidJobTakesRanges) {
  RangesCluster cluster(1);
  const Dataset ds = Dataset::Range(kRecords).Batch(kBatch);
  auto job = MakeJob(cluster.coordinator(), ds, /*epochs=*/2);
  ASSERT_TRUE(job.ok()) << job.status();
  WorkerServer* late = nullptr;
  auto steps = ReadJob(cluster.coordinator(), *job, [&](int64_t range) {
    if (range == 2) late = cluster.AddWorker();
  });
  ASSERT_TRUE(steps.ok()) << steps.status();
  ExpectSameSteps(*steps, Reference(ds, Order(), 2));
  ASSERT_NE(late, nullptr);
  proto::GetStatusResponse status;
  ASSERT_TRUE(cluster.coordinator().GetStatus(proto::GetStatusRequest(), &status).ok());
  // The ranges it ran (finished ones keep the worker they ran on; WorkerStatus.task_ids lists
  // unfinished tasks only).
  bool late_ran_some = false;
  for (const proto::JobStatus& j : status.jobs()) {
    for (const proto::TaskInfo& t : j.tasks()) {
      late_ran_some = late_ran_some || t.worker_address() == late->address();
    }
  }
  EXPECT_TRUE(late_ran_some) << "the worker added mid-job got no range";
}

}  // namespace
}  // namespace sluice
