// SHARDING_RANGES (deterministic, elastic global order), DATA resume, worker drain and job
// garbage collection in the coordinator (docs/SERVICE.md, "Global order" and "Liveness and
// failure"). No network; a fake clock.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "core/util/clock.h"
#include "gmock/gmock.h"
#include "google/protobuf/text_format.h"
#include "gtest/gtest.h"
#include "server/coordinator.h"
#include "server/coordinator_state.h"
#include "server/task_planner.h"
#include "tests/server/server_test_util.h"

namespace sluice {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using server_test::RunValues;

// ----- Range cutting.

std::vector<std::vector<int64_t>> Cut(int64_t spe, int64_t epochs, int64_t start, int64_t rs) {
  auto cut = RangeCut::Make(spe, epochs, start, rs);
  EXPECT_TRUE(cut.ok()) << cut.status();
  std::vector<std::vector<int64_t>> out;
  for (int64_t i = 0; i < cut->num_ranges(); ++i) {
    GlobalRange r = cut->Range(i);
    EXPECT_EQ(r.index, i);
    out.push_back({r.epoch, r.first_step, r.num_steps});
  }
  return out;
}

TEST(RangeCutTest, CutsEachEpochFromTheStartStepWithAPartialLastRange) {
  // The worked example of docs/SERVICE.md.
  EXPECT_THAT(Cut(10, 2, 6, 4),
              ElementsAre(ElementsAre(0, 6, 4), ElementsAre(1, 10, 4), ElementsAre(1, 14, 4),
                          ElementsAre(1, 18, 2)));
  auto cut = RangeCut::Make(10, 2, 6, 4);
  ASSERT_TRUE(cut.ok());
  EXPECT_EQ(cut->total_steps(), 14);
  EXPECT_EQ(cut->Range(1).epoch_first_step, 10);
  // No start step: every epoch cut alike.
  EXPECT_THAT(Cut(5, 2, 0, 2),
              ElementsAre(ElementsAre(0, 0, 2), ElementsAre(0, 2, 2), ElementsAre(0, 4, 1),
                          ElementsAre(1, 5, 2), ElementsAre(1, 7, 2), ElementsAre(1, 9, 1)));
  // A range longer than an epoch is the epoch.
  EXPECT_THAT(Cut(3, 2, 0, 16), ElementsAre(ElementsAre(0, 0, 3), ElementsAre(1, 3, 3)));
  // A start step at an epoch boundary skips that epoch entirely.
  EXPECT_THAT(Cut(3, 2, 3, 2), ElementsAre(ElementsAre(1, 3, 2), ElementsAre(1, 5, 1)));
}

TEST(RangeCutTest, RangesTileTheStepsExactlyForManyShapes) {
  for (int64_t spe : {1, 2, 7, 16}) {
    for (int64_t epochs : {1, 3}) {
      for (int64_t rs : {1, 3, 16}) {
        for (int64_t start = 0; start <= spe * epochs; ++start) {
          auto cut = RangeCut::Make(spe, epochs, start, rs);
          ASSERT_TRUE(cut.ok()) << cut.status();
          int64_t next = start;
          for (int64_t i = 0; i < cut->num_ranges(); ++i) {
            GlobalRange r = cut->Range(i);
            ASSERT_EQ(r.first_step, next) << spe << " " << epochs << " " << rs << " " << start;
            ASSERT_GE(r.num_steps, 1);
            ASSERT_LE(r.num_steps, rs);
            ASSERT_EQ(r.epoch, r.first_step / spe);
            ASSERT_EQ((r.first_step + r.num_steps - 1) / spe, r.epoch) << "crosses an epoch";
            // A range starts at the start step, an epoch's start, or right after a full range.
            const int64_t from = std::max(start, r.epoch * spe);
            ASSERT_EQ((r.first_step - from) % rs, 0);
            next += r.num_steps;
          }
          EXPECT_EQ(next, spe * epochs);
          EXPECT_EQ(cut->total_steps(), spe * epochs - start);
        }
      }
    }
  }
}

TEST(RangeCutTest, BadArgumentsAndEmptyJobs) {
  EXPECT_EQ(RangeCut::Make(10, 1, 11, 4).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(RangeCut::Make(10, 1, 11, 4).status().message(), HasSubstr("start_step 11"));
  EXPECT_EQ(RangeCut::Make(10, 1, -1, 4).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(RangeCut::Make(10, 1, 0, 0).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(RangeCut::Make(10, 0, 0, 4).status().code(), absl::StatusCode::kInvalidArgument);
  auto end = RangeCut::Make(10, 2, 20, 4);
  ASSERT_TRUE(end.ok());
  EXPECT_EQ(end->num_ranges(), 0);
  auto empty = RangeCut::Make(0, 3, 0, 4);
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(empty->num_ranges(), 0);
}

// ----- The coordinator.

class RangesTest : public ::testing::Test {
 protected:
  RangesTest() { Restart(/*ranges_per_worker=*/2); }

  void Restart(int64_t ranges_per_worker, absl::Duration ttl = absl::Minutes(5)) {
    CoordinatorOptions options;
    options.clock = &clock_;
    options.worker_timeout = absl::Seconds(10);
    options.ranges_per_worker = ranges_per_worker;
    options.finished_job_ttl = ttl;
    options.log = [this](absl::string_view line) { log_.emplace_back(line); };
    coordinator_ = Coordinator::Create(options).value();
  }

  std::string Register(const std::string& pipeline) {
    proto::RegisterDatasetRequest req;
    req.set_wire_version(proto::WIRE_VERSION_1);
    req.set_pipeline(pipeline);
    proto::RegisterDatasetResponse resp;
    absl::Status s = coordinator_->RegisterDataset(req, &resp);
    EXPECT_TRUE(s.ok()) << pipeline << ": " << s;
    return resp.dataset_id();
  }

  proto::WorkerHeartbeatResponse Heartbeat(const std::string& address,
                                           std::vector<int64_t> active = {},
                                           std::vector<int64_t> finished = {},
                                           bool draining = false) {
    proto::WorkerHeartbeatRequest req;
    req.set_wire_version(proto::WIRE_VERSION_1);
    req.set_worker_address(address);
    for (int64_t t : active) req.add_active_task_ids(t);
    for (int64_t t : finished) req.add_finished_task_ids(t);
    req.set_draining(draining);
    proto::WorkerHeartbeatResponse resp;
    absl::Status s = coordinator_->WorkerHeartbeat(req, &resp);
    EXPECT_TRUE(s.ok()) << s;
    return resp;
  }

  static proto::JobOptions Ranges(const std::string& dataset_id, int64_t range_steps,
                                  int64_t epochs = 1, int64_t start_step = 0) {
    proto::JobOptions o;
    o.set_dataset_id(dataset_id);
    o.set_num_consumers(1);
    o.set_replicas_per_consumer(1);
    o.set_sharding_policy(proto::SHARDING_RANGES);
    o.mutable_order()->set_range_steps(range_steps);
    o.mutable_order()->set_num_epochs(epochs);
    o.set_start_step(start_step);
    return o;
  }

  absl::StatusOr<proto::GetOrCreateJobResponse> Job(const std::string& name,
                                                    const proto::JobOptions& options) {
    proto::GetOrCreateJobRequest req;
    req.set_wire_version(proto::WIRE_VERSION_1);
    req.set_job_name(name);
    *req.mutable_options() = options;
    proto::GetOrCreateJobResponse resp;
    absl::Status s = coordinator_->GetOrCreateJob(req, &resp);
    if (!s.ok()) return s;
    return resp;
  }

  absl::StatusOr<proto::ClientHeartbeatResponse> Client(int64_t job_id) {
    proto::ClientHeartbeatRequest req;
    req.set_wire_version(proto::WIRE_VERSION_1);
    req.set_job_id(job_id);
    proto::ClientHeartbeatResponse resp;
    absl::Status s = coordinator_->ClientHeartbeat(req, &resp);
    if (!s.ok()) return s;
    return resp;
  }

  // task_index of each task listed by ClientHeartbeat.
  std::vector<int64_t> ListedRanges(int64_t job_id) {
    auto hb = Client(job_id);
    EXPECT_TRUE(hb.ok()) << hb.status();
    std::vector<int64_t> out;
    for (const proto::TaskInfo& t : hb->tasks()) out.push_back(t.task_index());
    return out;
  }

  static std::vector<int64_t> Indices(const proto::WorkerHeartbeatResponse& r) {
    std::vector<int64_t> out;
    for (const proto::TaskDef& t : r.new_tasks()) out.push_back(t.task_index());
    return out;
  }
  static std::vector<int64_t> Ids(const proto::WorkerHeartbeatResponse& r) {
    std::vector<int64_t> out;
    for (const proto::TaskDef& t : r.new_tasks()) out.push_back(t.task_id());
    return out;
  }

  FakeClock clock_;
  std::vector<std::string> log_;
  std::unique_ptr<Coordinator> coordinator_;
};

TEST_F(RangesTest, RangesAreMadeLazilyUpToRangesPerWorkerInRangeOrder) {
  Heartbeat("w1:1");
  Heartbeat("w2:1");
  // 100 records, batches of 4: 25 steps per epoch; ranges of 5 steps: 5 ranges.
  auto job = Job("r", Ranges(Register("range(100).batch(4)"), 5));
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_TRUE(job->created());
  EXPECT_EQ(job->fallback_reason(), "");
  EXPECT_EQ(job->steps_per_epoch(), 25);
  EXPECT_EQ(job->total_steps(), 25);

  // Two workers with room for two each: ranges 0..3 now, round-robin by load.
  proto::WorkerHeartbeatResponse w1 = Heartbeat("w1:1");
  proto::WorkerHeartbeatResponse w2 = Heartbeat("w2:1");
  EXPECT_THAT(Indices(w1), ElementsAre(0, 2));
  EXPECT_THAT(Indices(w2), ElementsAre(1, 3));
  auto hb = Client(job->job_id());
  ASSERT_TRUE(hb.ok());
  EXPECT_EQ(hb->num_tasks(), 5);
  EXPECT_EQ(hb->num_tasks_created(), 4);
  ASSERT_EQ(hb->tasks_size(), 4);
  EXPECT_EQ(hb->tasks(1).worker_address(), "w2:1");
  EXPECT_EQ(hb->tasks(1).first_step(), 5);
  EXPECT_EQ(hb->tasks(1).num_steps(), 5);

  // A range's TaskDef: its steps, and exactly the records of those steps.
  const proto::TaskDef& range1 = w2.new_tasks(0);
  EXPECT_EQ(range1.first_step(), 5);
  EXPECT_EQ(range1.num_steps(), 5);
  EXPECT_EQ(range1.num_tasks(), 5);
  EXPECT_FALSE(range1.step_sharded());
  auto values = RunValues(range1.dataset());
  ASSERT_TRUE(values.ok()) << values.status();
  std::vector<int64_t> expected;
  for (int64_t v = 20; v < 40; ++v) expected.push_back(v);
  EXPECT_EQ(*values, expected);

  // Range 0 finishes on w1: w1 has room again and gets range 4, the last.
  proto::WorkerHeartbeatResponse again =
      Heartbeat("w1:1", {Ids(w1)[1]}, {Ids(w1)[0]});
  EXPECT_THAT(Indices(again), ElementsAre(4));
  EXPECT_THAT(ListedRanges(job->job_id()), ElementsAre(1, 2, 3, 4));
  hb = Client(job->job_id());
  EXPECT_EQ(hb->num_tasks_created(), 5);
  EXPECT_FALSE(hb->job_finished());

  // Everything finishes: the job too.
  Heartbeat("w1:1", {}, {Ids(w1)[0], Ids(w1)[1], Ids(again)[0]});
  EXPECT_FALSE(Client(job->job_id())->job_finished());
  Heartbeat("w2:1", {}, Ids(w2));
  hb = Client(job->job_id());
  EXPECT_TRUE(hb->job_finished());
  EXPECT_THAT(hb->tasks(), IsEmpty());
}

TEST_F(RangesTest, EveryRangeOfEveryEpochHasTheGlobalOrdersRecords) {
  Heartbeat("w1:1");
  Restart(/*ranges_per_worker=*/100);
  Heartbeat("w1:1");
  // 10 records, batch 3: steps of 3, 3, 3, 1; two epochs unshuffled; resume at step 2.
  auto job = Job("", Ranges(Register("range(10).batch(3)"), 3, /*epochs=*/2, /*start=*/2));
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->steps_per_epoch(), 4);
  EXPECT_EQ(job->total_steps(), 6);
  proto::WorkerHeartbeatResponse w = Heartbeat("w1:1");
  ASSERT_EQ(w.new_tasks_size(), 3);  // [2,4) [4,7) [7,8)
  std::vector<int64_t> all;
  for (const proto::TaskDef& t : w.new_tasks()) {
    auto v = RunValues(t.dataset());
    ASSERT_TRUE(v.ok()) << v.status();
    all.insert(all.end(), v->begin(), v->end());
  }
  EXPECT_THAT(all, ElementsAre(6, 7, 8, 9, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9));
}

TEST_F(RangesTest, AWorkerJoiningMidEpochGetsRangesAtItsFirstHeartbeat) {
  Heartbeat("w1:1");
  auto job = Job("r", Ranges(Register("range(100).batch(4)"), 2));
  ASSERT_TRUE(job.ok());
  EXPECT_THAT(Indices(Heartbeat("w1:1")), ElementsAre(0, 1));
  proto::WorkerHeartbeatResponse late = Heartbeat("w9:1");
  EXPECT_EQ(late.worker_id(), 2);
  EXPECT_THAT(Indices(late), ElementsAre(2, 3));
  EXPECT_THAT(ListedRanges(job->job_id()), ElementsAre(0, 1, 2, 3));
}

TEST_F(RangesTest, ADeadWorkersRangesGoBackLowestFirstBeforeNewOnes) {
  Heartbeat("w1:1");
  Heartbeat("w2:1");
  auto job = Job("r", Ranges(Register("range(100).batch(4)"), 2));
  ASSERT_TRUE(job.ok());
  proto::WorkerHeartbeatResponse w1 = Heartbeat("w1:1");
  proto::WorkerHeartbeatResponse w2 = Heartbeat("w2:1");
  ASSERT_THAT(Indices(w1), ElementsAre(0, 2));
  ASSERT_THAT(Indices(w2), ElementsAre(1, 3));
  // w1 goes silent; w2 keeps heartbeating and takes ranges 0 and 2 back, over its room.
  clock_.Advance(absl::Seconds(6));
  Heartbeat("w2:1", Ids(w2));
  clock_.Advance(absl::Seconds(6));
  proto::WorkerHeartbeatResponse moved = Heartbeat("w2:1", Ids(w2));
  EXPECT_THAT(Indices(moved), ElementsAre(0, 2));
  auto hb = Client(job->job_id());
  ASSERT_EQ(hb->tasks_size(), 4);
  for (const proto::TaskInfo& t : hb->tasks()) EXPECT_EQ(t.worker_address(), "w2:1");
  EXPECT_EQ(hb->num_tasks_created(), 4);  // no new range while w2 is over its room
  // With no live worker, a range waits unassigned and goes, lowest first, to the next one.
  clock_.Advance(absl::Seconds(11));
  hb = Client(job->job_id());
  for (const proto::TaskInfo& t : hb->tasks()) EXPECT_EQ(t.worker_address(), "");
  proto::WorkerHeartbeatResponse w3 = Heartbeat("w3:1");
  EXPECT_THAT(Indices(w3), ElementsAre(0, 1, 2, 3));
}

TEST_F(RangesTest, ADrainingWorkersTasksMoveAtOnceAndItGetsNothingNew) {
  Heartbeat("w1:1");
  Heartbeat("w2:1");
  auto job = Job("r", Ranges(Register("range(100).batch(4)"), 2));
  ASSERT_TRUE(job.ok());
  proto::WorkerHeartbeatResponse w1 = Heartbeat("w1:1");
  proto::WorkerHeartbeatResponse w2 = Heartbeat("w2:1");
  ASSERT_THAT(Indices(w1), ElementsAre(0, 2));
  // w1 drains having finished range 0: range 2 goes to w2 now, no worker_timeout wait.
  proto::WorkerHeartbeatResponse drain =
      Heartbeat("w1:1", {Ids(w1)[1]}, {Ids(w1)[0]}, /*draining=*/true);
  EXPECT_THAT(drain.tasks_to_stop(), ElementsAre(Ids(w1)[1]));
  EXPECT_THAT(drain.new_tasks(), IsEmpty());
  EXPECT_THAT(log_, ::testing::Contains(HasSubstr("worker 1 (w1:1) is draining")));
  auto hb = Client(job->job_id());
  ASSERT_TRUE(hb.ok());
  std::map<int64_t, std::string> where;
  for (const proto::TaskInfo& t : hb->tasks()) where[t.task_index()] = t.worker_address();
  EXPECT_EQ(where.count(0), 0u) << "range 0 finished before the drain";
  EXPECT_EQ(where[2], "w2:1");
  EXPECT_THAT(Indices(Heartbeat("w2:1", Ids(w2))), ElementsAre(2));
  // Draining again never revives it, nor gives it anything.
  proto::WorkerHeartbeatResponse again = Heartbeat("w1:1", {}, {}, /*draining=*/true);
  EXPECT_THAT(again.new_tasks(), IsEmpty());
  auto after = Client(job->job_id());
  ASSERT_TRUE(after.ok());
  for (const proto::TaskInfo& t : after->tasks()) EXPECT_NE(t.worker_address(), "w1:1");
  // A restarted process at that address (not draining) is back and takes ranges again.
  proto::WorkerHeartbeatResponse back = Heartbeat("w1:1");
  EXPECT_EQ(back.worker_id(), 1);
  EXPECT_THAT(Indices(back), ElementsAre(4, 5));
}

TEST_F(RangesTest, DrainingMovesStaticTasksToo) {
  Heartbeat("w1:1");
  Heartbeat("w2:1");
  proto::JobOptions o = Ranges(Register("range(100).batch(4)"), 2);
  o.set_sharding_policy(proto::SHARDING_DATA);
  auto job = Job("d", o);
  ASSERT_TRUE(job.ok());
  proto::WorkerHeartbeatResponse w1 = Heartbeat("w1:1");
  ASSERT_EQ(w1.new_tasks_size(), 1);
  Heartbeat("w1:1", Ids(w1), {}, /*draining=*/true);
  auto hb = Client(job->job_id());
  ASSERT_EQ(hb->tasks_size(), 2);
  EXPECT_EQ(hb->tasks(0).worker_address(), "w2:1");
  EXPECT_EQ(hb->tasks(1).worker_address(), "w2:1");
  EXPECT_EQ(hb->num_tasks(), 2);
  EXPECT_EQ(hb->num_tasks_created(), 2);
}

TEST_F(RangesTest, APipelineWithoutRandomAccessFallsBackToDataOrIsRejectedWhenShuffled) {
  Heartbeat("w1:1");
  Heartbeat("w2:1");
  const std::string filtered = Register("range(100).filter(less(50)).batch(4)");
  auto job = Job("f", Ranges(filtered, 2, /*epochs=*/1, /*start_step=*/3));
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_THAT(job->fallback_reason(), HasSubstr("filter"));
  EXPECT_EQ(job->steps_per_epoch(), -1);
  EXPECT_EQ(job->total_steps(), -1);
  EXPECT_THAT(log_, ::testing::Contains(HasSubstr("falls back to DATA")));
  // DATA tasks, one per worker, resumed at step 3.
  proto::WorkerHeartbeatResponse w1 = Heartbeat("w1:1");
  ASSERT_EQ(w1.new_tasks_size(), 1);
  EXPECT_TRUE(w1.new_tasks(0).step_sharded());
  EXPECT_EQ(w1.new_tasks(0).skip_steps(), 3);
  EXPECT_EQ(w1.new_tasks(0).num_tasks(), 2);
  EXPECT_EQ(w1.new_tasks(0).num_steps(), 0);
  auto hb = Client(job->job_id());
  EXPECT_EQ(hb->num_tasks(), 2);
  EXPECT_EQ(hb->num_tasks_created(), 2);
  // Joining the job again reports the same fallback.
  auto joined = Job("f", Ranges(filtered, 2, 1, 3));
  ASSERT_TRUE(joined.ok());
  EXPECT_FALSE(joined->created());
  EXPECT_EQ(joined->fallback_reason(), job->fallback_reason());

  proto::JobOptions shuffled = Ranges(filtered, 2);
  shuffled.mutable_order()->set_shuffle(proto::SHUFFLE_FULL);
  auto bad = Job("", shuffled);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("random access"));
  EXPECT_THAT(bad.status().message(), HasSubstr("filter"));
  EXPECT_THAT(bad.status().message(), HasSubstr("SHUFFLE_FULL"));
}

TEST_F(RangesTest, AShuffledJobIsAPermutationOfTheEpoch) {
  Restart(/*ranges_per_worker=*/100);
  Heartbeat("w1:1");
  proto::JobOptions o = Ranges(Register("range(50).batch(5)"), 3);
  o.mutable_order()->set_shuffle(proto::SHUFFLE_FULL);
  o.mutable_order()->set_seed(7);
  auto job = Job("", o);
  ASSERT_TRUE(job.ok()) << job.status();
  proto::WorkerHeartbeatResponse w = Heartbeat("w1:1");
  ASSERT_EQ(w.new_tasks_size(), 4);
  std::vector<int64_t> all;
  for (const proto::TaskDef& t : w.new_tasks()) {
    auto v = RunValues(t.dataset());
    ASSERT_TRUE(v.ok()) << v.status();
    all.insert(all.end(), v->begin(), v->end());
  }
  std::vector<int64_t> sorted = all;
  std::sort(sorted.begin(), sorted.end());
  for (int64_t i = 0; i < 50; ++i) ASSERT_EQ(sorted[i], i);
  std::vector<int64_t> identity = sorted;
  EXPECT_NE(all, identity) << "SHUFFLE_FULL left the records in order";
}

TEST_F(RangesTest, StartStepIsValidatedByPolicy) {
  Heartbeat("w1:1");
  const std::string ds = Register("range(100).batch(4)");
  for (proto::ShardingPolicy p : {proto::SHARDING_OFF, proto::SHARDING_HINT,
                                  proto::SHARDING_DYNAMIC}) {
    proto::JobOptions o = Ranges(ds, 2, 1, /*start_step=*/3);
    o.set_sharding_policy(p);
    auto job = Job("", o);
    EXPECT_EQ(job.status().code(), absl::StatusCode::kInvalidArgument)
        << proto::ShardingPolicy_Name(p);
    EXPECT_THAT(job.status().message(),
                HasSubstr("resume (start_step) needs SHARDING_RANGES or SHARDING_DATA"));
  }
  // AUTO on a non-file source is DATA: resumable.
  proto::JobOptions autod = Ranges(ds, 2, 1, 3);
  autod.set_sharding_policy(proto::SHARDING_AUTO);
  auto a = Job("", autod);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(Heartbeat("w1:1").new_tasks(0).skip_steps(), 3);

  proto::JobOptions negative = Ranges(ds, 2, 1, -1);
  EXPECT_THAT(Job("", negative).status().message(), HasSubstr("start_step must be >= 0"));
  auto beyond = Job("", Ranges(ds, 2, 1, 26));
  EXPECT_EQ(beyond.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(beyond.status().message(), HasSubstr("start_step 26"));
  // Resuming at the very end: a job with nothing left, finished at once.
  auto end = Job("", Ranges(ds, 2, 1, 25));
  ASSERT_TRUE(end.ok()) << end.status();
  EXPECT_EQ(end->total_steps(), 0);
  EXPECT_TRUE(Client(end->job_id())->job_finished());

  proto::JobOptions independent = Ranges(ds, 2);
  independent.set_read_mode(proto::READ_MODE_INDEPENDENT);
  auto ind = Job("", independent);
  EXPECT_EQ(ind.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(ind.status().message(), HasSubstr("READ_MODE_INDEPENDENT"));
}

TEST_F(RangesTest, FinishedJobsAreRemovedAfterTheirTtl) {
  Restart(/*ranges_per_worker=*/2, /*ttl=*/absl::Seconds(30));
  Heartbeat("w1:1");
  auto job = Job("gc", Ranges(Register("range(8).batch(4)"), 1));
  ASSERT_TRUE(job.ok());
  proto::WorkerHeartbeatResponse w = Heartbeat("w1:1");
  ASSERT_EQ(w.new_tasks_size(), 2);
  Heartbeat("w1:1", {}, Ids(w));
  ASSERT_TRUE(Client(job->job_id())->job_finished());

  clock_.Advance(absl::Seconds(20));
  Heartbeat("w1:1", {}, Ids(w));
  ASSERT_TRUE(Client(job->job_id()).ok());
  clock_.Advance(absl::Seconds(11));
  Heartbeat("w1:1", {}, Ids(w));
  auto gone = Client(job->job_id());
  EXPECT_EQ(gone.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(gone.status().message(),
              HasSubstr(absl::StrCat("job ", job->job_id(), " was finished and removed")));
  EXPECT_THAT(log_, ::testing::Contains(HasSubstr("removed")));
  // A worker still reporting its tasks is told to stop (forget) them.
  proto::WorkerHeartbeatResponse told = Heartbeat("w1:1", {Ids(w)[0]}, {Ids(w)[1]});
  EXPECT_THAT(told.tasks_to_stop(), ::testing::UnorderedElementsAre(Ids(w)[0], Ids(w)[1]));
  // GetSplit and GetElementSpec say the same; an id never used is just unknown.
  proto::GetSplitRequest split;
  split.set_job_id(job->job_id());
  split.set_task_id(Ids(w)[0]);
  proto::GetSplitResponse split_resp;
  absl::Status s = coordinator_->GetSplit(split, &split_resp);
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(s.message(), HasSubstr("was finished and removed"));
  auto unknown = Client(999);
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(unknown.status().message(), ::testing::Not(HasSubstr("removed")));
  // The name is free again: a new job.
  auto again = Job("gc", Ranges(Register("range(8).batch(4)"), 1));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_TRUE(again->created());
  EXPECT_NE(again->job_id(), job->job_id());
}

TEST_F(RangesTest, AnUnfinishedJobIsNeverCollected) {
  Restart(/*ranges_per_worker=*/2, /*ttl=*/absl::Seconds(1));
  Heartbeat("w1:1");
  auto job = Job("", Ranges(Register("range(8).batch(4)"), 1));
  ASSERT_TRUE(job.ok());
  proto::WorkerHeartbeatResponse w = Heartbeat("w1:1");
  for (int i = 0; i < 5; ++i) {
    clock_.Advance(absl::Seconds(5));
    Heartbeat("w1:1", Ids(w));
  }
  EXPECT_TRUE(Client(job->job_id()).ok());
}

// One RANGES job whose ranges can no longer be planned (its file changed while the coordinator
// was down) used to fail every worker's heartbeat, so every job stalled. It now fails alone:
// retried ranges_plan_attempts times ranges_retry_interval apart (shown in GetStatus as
// retrying), then failed where everyone sees it: its consumers get the error, GetStatus shows
// it, the workers' heartbeats succeed, other jobs go on, and the failed job is removed at
// finished_job_ttl like any finished job, so that its name can be used again.
TEST_F(RangesTest, AJobWhoseRangesCannotBePlannedFailsAloneAndOtherJobsGoOn) {
  const std::string dir = absl::StrCat(::testing::TempDir(), "/sluice_ranges_fail_", getpid());
  std::system(absl::StrCat("rm -rf '", dir, "'; mkdir -p '", dir, "/journal'").c_str());
  const std::string file = dir + "/records.bin";
  auto write_records = [&](int n) {
    std::ofstream out(file, std::ios::binary | std::ios::trunc);
    for (int i = 0; i < n; ++i) out.write("abcd", 4);
  };
  write_records(8);
  CoordinatorOptions options;
  options.clock = &clock_;
  options.worker_timeout = absl::Seconds(10);
  options.ranges_per_worker = 1;
  options.ranges_plan_attempts = 3;
  options.ranges_retry_interval = absl::Seconds(2);
  options.finished_job_ttl = absl::Seconds(30);
  options.work_dir = dir + "/journal";
  options.log = [this](absl::string_view line) { log_.emplace_back(line); };
  auto created = Coordinator::Create(options);
  ASSERT_TRUE(created.ok()) << created.status();
  coordinator_ = *std::move(created);

  const std::string records =
      Register(absl::StrCat("fixed_length_record_dataset(['", file, "'], 4).batch(2)"));
  Heartbeat("w1:1");  // a job needs a registered worker
  auto ranges = Job("ranges", Ranges(records, /*range_steps=*/1));
  ASSERT_TRUE(ranges.ok()) << ranges.status();
  EXPECT_THAT(Indices(Heartbeat("w1:1")), ElementsAre(0));  // 4 steps: 1 range at a time

  // The coordinator restarts (the journal holds the job) after the file grew: 6 steps now.
  coordinator_.reset();
  write_records(12);
  created = Coordinator::Create(options);
  ASSERT_TRUE(created.ok()) << created.status();
  coordinator_ = *std::move(created);
  proto::JobOptions data;
  data.set_dataset_id(Register("range(8).batch(2)"));
  data.set_num_consumers(1);
  data.set_replicas_per_consumer(1);
  data.set_sharding_policy(proto::SHARDING_DATA);
  auto other = Job("other", data);
  ASSERT_TRUE(other.ok()) << other.status();

  // The worker finishes range 0: room for range 1, whose planning fails. Its heartbeat succeeds
  // all the same (Heartbeat() asserts it) and gets the other job's task.
  // (The plan runs on the planner thread, without the lock: awaited.)
  const proto::WorkerHeartbeatResponse hb = Heartbeat("w1:1", /*active=*/{}, /*finished=*/{1});
  coordinator_->TEST_AwaitReplans();
  ASSERT_EQ(hb.new_tasks_size(), 1);
  EXPECT_EQ(hb.new_tasks(0).job_id(), other->job_id());
  EXPECT_TRUE(Client(other->job_id()).ok());
  // Attempt 1 failed: the job waits to retry, its consumers wait (no error yet) and the
  // status says why.
  EXPECT_TRUE(Client(ranges->job_id()).ok());
  auto retrying_job = [&]() -> proto::JobStatus {
    proto::GetStatusResponse status;
    EXPECT_TRUE(coordinator_->GetStatus({}, &status).ok());
    for (const proto::JobStatus& j : status.jobs()) {
      if (j.job_id() == ranges->job_id()) return j;
    }
    return proto::JobStatus();
  };
  EXPECT_THAT(retrying_job().retrying(), HasSubstr("attempt 1 of 3"));
  // Not retried before ranges_retry_interval; then attempts 2 and 3 (by the ticker).
  Heartbeat("w1:1", /*active=*/{hb.new_tasks(0).task_id()});
  EXPECT_THAT(retrying_job().retrying(), HasSubstr("attempt 1 of 3"));
  for (int attempt = 2; attempt <= 3; ++attempt) {
    clock_.Advance(absl::Seconds(2));
    Heartbeat("w1:1", /*active=*/{hb.new_tasks(0).task_id()});
    coordinator_->TEST_AwaitReplans();
    coordinator_->CheckWorkerLiveness();
  }
  // The broken job's consumers are told why, naming it.
  auto broken = Client(ranges->job_id());
  ASSERT_FALSE(broken.ok());
  EXPECT_EQ(broken.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(broken.status().message()),
              HasSubstr(absl::StrCat("job ", ranges->job_id(), " (ranges) cannot make its "
                                     "ranges (attempt 3 of 3, ranges_plan_attempts): job ",
                                     ranges->job_id(), ": its dataset now has 6 "
                                     "steps per epoch, it had 4")));
  const proto::JobStatus failed = retrying_job();
  EXPECT_TRUE(failed.finished());
  EXPECT_THAT(failed.error(), HasSubstr("cannot make its ranges"));
  EXPECT_EQ(failed.retrying(), "");
  EXPECT_EQ(coordinator_->TEST_TableSizes().failed_jobs, 0u);
  // Later heartbeats too (the error is kept, not recomputed into a failure each time).
  Heartbeat("w1:1", /*active=*/{hb.new_tasks(0).task_id()});
  // Removed finished_job_ttl later: the name is free again.
  for (int i = 0; i < 4; ++i) {
    clock_.Advance(absl::Seconds(9));
    Heartbeat("w1:1", /*active=*/{hb.new_tasks(0).task_id()});
  }
  EXPECT_EQ(Client(ranges->job_id()).status().code(), absl::StatusCode::kNotFound);
  write_records(8);
  auto again = Job("ranges", Ranges(records, /*range_steps=*/1));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_TRUE(again->created());
  std::system(absl::StrCat("rm -rf '", dir, "'").c_str());
}

// After a restart a RANGES job is planned again from its data (a remote listing, a large
// record index: slow). The plan runs without the coordinator's lock: while it is blocked,
// workers' heartbeats (a new worker's registration too), another job's creation and consumers'
// heartbeats are all answered; once it returns, its result is applied exactly once (one plan,
// each range made once) and the ranges it was waiting for are made.
TEST_F(RangesTest, ReplanningAfterARestartRunsWithoutTheLockAndIsAppliedOnce) {
  const std::string dir = absl::StrCat(::testing::TempDir(), "/sluice_ranges_replan_", getpid());
  std::system(absl::StrCat("rm -rf '", dir, "'; mkdir -p '", dir, "'").c_str());
  CoordinatorOptions options;
  options.clock = &clock_;
  options.worker_timeout = absl::Seconds(10);
  options.ranges_per_worker = 1;
  options.work_dir = dir;
  options.log = [this](absl::string_view line) { log_.emplace_back(line); };
  auto created = Coordinator::Create(options);
  ASSERT_TRUE(created.ok()) << created.status();
  coordinator_ = *std::move(created);
  const std::string ds = Register("range(40).batch(2)");  // 20 steps: 10 ranges of 2
  Heartbeat("w1:1");
  auto job = Job("ranges", Ranges(ds, /*range_steps=*/2));
  ASSERT_TRUE(job.ok()) << job.status();
  const proto::WorkerHeartbeatResponse first = Heartbeat("w1:1");
  ASSERT_THAT(Indices(first), ElementsAre(0));

  // The restarted coordinator re-plans the job on its first chance, with a planner that blocks
  // until the test releases it (30 s at most: what it waits out is this test's own calls).
  coordinator_.reset();
  absl::Notification entered, release;
  std::atomic<int> plans{0};
  std::atomic<bool> released_in_time{true};
  options.before_replanning = [&](int64_t job_id) {
    EXPECT_EQ(job_id, job->job_id());
    ++plans;
    if (!entered.HasBeenNotified()) entered.Notify();
    if (!release.WaitForNotificationWithTimeout(absl::Seconds(30))) released_in_time = false;
  };
  created = Coordinator::Create(options);
  ASSERT_TRUE(created.ok()) << created.status();
  coordinator_ = *std::move(created);
  // w1 finished range 0: room for range 1, which needs the plan.
  EXPECT_THAT(Indices(Heartbeat("w1:1", {}, {first.new_tasks(0).task_id()})), IsEmpty());
  ASSERT_TRUE(entered.WaitForNotificationWithTimeout(absl::Seconds(60)));

  // While the plan is blocked: heartbeats, a new worker, another job and its consumer.
  Heartbeat("w1:1");
  Heartbeat("w2:1");
  proto::JobOptions data;
  data.set_dataset_id(Register("range(8).batch(2)"));
  data.set_num_consumers(1);
  data.set_replicas_per_consumer(1);
  data.set_sharding_policy(proto::SHARDING_DATA);
  auto other = Job("other", data);
  ASSERT_TRUE(other.ok()) << other.status();
  EXPECT_TRUE(Client(other->job_id()).ok());
  // (Consumers list the unfinished ranges: range 0 is finished.)
  EXPECT_THAT(ListedRanges(job->job_id()), IsEmpty()) << "no range without the plan";
  EXPECT_FALSE(release.HasBeenNotified());
  release.Notify();
  coordinator_->TEST_AwaitReplans();
  EXPECT_TRUE(released_in_time.load())
      << "the plan held up a request: it ran under the coordinator's lock";

  // Applied once: ranges 1 and 2, one per worker (ranges_per_worker 1), each made once, and no
  // second plan on later heartbeats.
  EXPECT_THAT(ListedRanges(job->job_id()), ElementsAre(1, 2));
  Heartbeat("w1:1");
  Heartbeat("w2:1");
  coordinator_->TEST_AwaitReplans();
  EXPECT_THAT(ListedRanges(job->job_id()), ElementsAre(1, 2));
  EXPECT_EQ(plans.load(), 1);
  EXPECT_EQ(std::count_if(log_.begin(), log_.end(),
                          [](const std::string& l) {
                            return l.find("planning its ranges again") != std::string::npos;
                          }),
            1);
  coordinator_.reset();
  std::system(absl::StrCat("rm -rf '", dir, "'").c_str());
}

TEST(CoordinatorStateRemoveJobTest, RemovesOnlyFinishedJobsWithTheirTasks) {
  CoordinatorState state;
  auto apply = [&](const std::string& text) {
    proto::Update u;
    EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(text, &u)) << text;
    return state.Apply(u);
  };
  ASSERT_TRUE(apply("register_dataset { dataset_id: 'ds' }").ok());
  ASSERT_TRUE(apply("register_worker { worker_id: 1 address: 'w:1' }").ok());
  ASSERT_TRUE(apply("create_job { job_id: 1 job_name: 'j' options { dataset_id: 'ds' } "
                    "ranges: true num_ranges: 2 steps_per_epoch: 4 total_steps: 4 }")
                  .ok());
  ASSERT_TRUE(apply("create_task { task_id: 1 job_id: 1 task_index: 0 worker_id: 1 "
                    "first_step: 0 num_steps: 2 }")
                  .ok());
  EXPECT_EQ(apply("create_task { task_id: 2 job_id: 1 task_index: 2 num_steps: 2 }").code(),
            absl::StatusCode::kInvalidArgument);  // only 2 ranges
  ASSERT_TRUE(apply("finish_task { task_id: 1 }").ok());
  // One range of two made: not finished yet.
  EXPECT_EQ(apply("finish_job { job_id: 1 }").code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(apply("remove_job { job_id: 1 }").code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(apply("create_task { task_id: 2 job_id: 1 task_index: 1 worker_id: 1 "
                    "first_step: 2 num_steps: 2 }")
                  .ok());
  ASSERT_TRUE(apply("finish_task { task_id: 2 }").ok());
  ASSERT_TRUE(apply("finish_job { job_id: 1 }").ok());
  ASSERT_TRUE(apply("remove_job { job_id: 1 }").ok());
  EXPECT_EQ(state.FindJob(1), nullptr);
  EXPECT_EQ(state.FindJobByName("j"), nullptr);
  EXPECT_EQ(state.FindTask(1), nullptr);
  EXPECT_THAT(state.FindWorker(1)->task_ids, IsEmpty());
  EXPECT_TRUE(state.JobWasRemoved(1));
  EXPECT_FALSE(state.JobWasRemoved(2));
  EXPECT_EQ(apply("remove_job { job_id: 1 }").code(), absl::StatusCode::kNotFound);
  // Ids are never reused.
  EXPECT_EQ(state.NextJobId(), 2);
  EXPECT_EQ(state.NextTaskId(), 3);
}

}  // namespace
}  // namespace sluice

namespace sluice {
namespace {

// Consumers report the tasks whose end they received; a task every consumer reported is
// finished even if no worker says so (its worker died after sending the end, and the task's
// new worker would otherwise hold it, and its room, forever).
TEST_F(RangesTest, ATaskEveryConsumerReadToItsEndIsFinishedWithoutItsWorker) {
  Heartbeat("w1:1");
  proto::JobOptions options = Ranges(Register("range(100).batch(4)"), 2);
  options.set_num_consumers(2);
  auto job = Job("r", options);
  ASSERT_TRUE(job.ok());
  proto::WorkerHeartbeatResponse w1 = Heartbeat("w1:1");
  ASSERT_THAT(Indices(w1), ElementsAre(0, 1));
  const int64_t range0 = Ids(w1)[0];
  auto report = [&](int64_t consumer, int64_t task_id) {
    proto::ClientHeartbeatRequest req;
    req.set_wire_version(proto::WIRE_VERSION_1);
    req.set_job_id(job->job_id());
    req.set_consumer_index(consumer);
    req.add_completed_task_ids(task_id);
    proto::ClientHeartbeatResponse resp;
    EXPECT_TRUE(coordinator_->ClientHeartbeat(req, &resp).ok());
    return resp;
  };
  // One consumer of two: not finished yet (and a repeated report changes nothing).
  report(0, range0);
  report(0, range0);
  EXPECT_THAT(ListedRanges(job->job_id()), ElementsAre(0, 1));
  // The second consumer: finished, no longer listed, and w1's room takes range 2.
  proto::ClientHeartbeatResponse after = report(1, range0);
  std::vector<int64_t> listed;
  for (const proto::TaskInfo& t : after.tasks()) listed.push_back(t.task_index());
  EXPECT_THAT(listed, ElementsAre(1, 2));
  // The worker still running it is told to stop it.
  proto::WorkerHeartbeatResponse again = Heartbeat("w1:1", Ids(w1));
  EXPECT_THAT(again.tasks_to_stop(), ElementsAre(range0));
  // Reports for unknown tasks or another job's are ignored.
  report(0, 987654);
  EXPECT_THAT(ListedRanges(job->job_id()), ElementsAre(1, 2));
}

}  // namespace
}  // namespace sluice
