// A coordinator driven through a scripted history, for the journal tests: every kind of
// change a running service makes (datasets, workers registering, dying and coming back, static
// and DYNAMIC jobs, splits, reassignment, finished tasks and jobs).
#ifndef SLUICE_TESTS_SERVER_JOURNAL_HISTORY_H_
#define SLUICE_TESTS_SERVER_JOURNAL_HISTORY_H_

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "core/util/clock.h"
#include "gtest/gtest.h"
#include "proto/coordinator.pb.h"
#include "server/coordinator.h"

namespace sluice {
namespace journal_test {

inline std::string Register(Coordinator& c, const std::string& pipeline) {
  proto::RegisterDatasetRequest req;
  req.set_wire_version(proto::WIRE_VERSION_1);
  req.set_pipeline(pipeline);
  proto::RegisterDatasetResponse resp;
  absl::Status s = c.RegisterDataset(req, &resp);
  EXPECT_TRUE(s.ok()) << s;
  return resp.dataset_id();
}

inline absl::StatusOr<int64_t> MakeJob(Coordinator& c, const std::string& name, const std::string& ds,
                                proto::ShardingPolicy policy, int64_t num_tasks = 0) {
  proto::GetOrCreateJobRequest req;
  req.set_wire_version(proto::WIRE_VERSION_1);
  req.set_job_name(name);
  proto::JobOptions* o = req.mutable_options();
  o->set_dataset_id(ds);
  o->set_num_consumers(1);
  o->set_replicas_per_consumer(1);
  o->set_sharding_policy(policy);
  o->set_num_tasks(num_tasks);
  proto::GetOrCreateJobResponse resp;
  absl::Status s = c.GetOrCreateJob(req, &resp);
  if (!s.ok()) return s;
  return resp.job_id();
}

// Workers as the coordinator sees them: each remembers its active tasks.
class Workers {
 public:
  // Heartbeats `address`, reporting `finish` (of its active tasks) as finished.
  void Beat(Coordinator& c, const std::string& address, std::set<int64_t> finish = {}) {
    proto::WorkerHeartbeatRequest req;
    req.set_wire_version(proto::WIRE_VERSION_1);
    req.set_worker_address(address);
    std::set<int64_t>& active = active_[address];
    for (int64_t t : active) {
      if (finish.contains(t)) {
        req.add_finished_task_ids(t);
      } else {
        req.add_active_task_ids(t);
      }
    }
    proto::WorkerHeartbeatResponse resp;
    absl::Status s = c.WorkerHeartbeat(req, &resp);
    ASSERT_TRUE(s.ok()) << s;
    for (int64_t t : finish) active.erase(t);
    for (const proto::TaskDef& t : resp.new_tasks()) {
      active.insert(t.task_id());
      job_of_[t.task_id()] = t.job_id();
    }
    for (int64_t t : resp.tasks_to_stop()) active.erase(t);
  }
  std::set<int64_t> TasksOf(const std::string& address, int64_t job) {
    std::set<int64_t> out;
    for (int64_t t : active_[address]) {
      if (job_of_[t] == job) out.insert(t);
    }
    return out;
  }

 private:
  std::map<std::string, std::set<int64_t>> active_;
  std::map<int64_t, int64_t> job_of_;
};

inline void Split(Coordinator& c, int64_t job, int64_t task, int64_t index) {
  proto::GetSplitRequest req;
  req.set_job_id(job);
  req.set_task_id(task);
  req.set_task_split_index(index);
  proto::GetSplitResponse resp;
  absl::Status s = c.GetSplit(req, &resp);
  ASSERT_TRUE(s.ok()) << s;
}

// Every kind of change: datasets, workers registering, dying and coming back, static and
// DYNAMIC jobs created as one record each, splits, reassignment, finished tasks and jobs.
// `after` runs after each request.
inline void RunHistory(Coordinator& c, FakeClock& clock, const std::function<void()>& after) {
  Workers w;
  const std::string a = Register(c, "range(48).batch(2)");
  after();
  const std::string b = Register(c, "range(100).batch(4)");
  after();
  for (const char* addr : {"w1:1", "w2:1", "w3:1"}) {
    w.Beat(c, addr);
    after();
  }
  auto job1 = MakeJob(c, "static", a, proto::SHARDING_DATA);
  ASSERT_TRUE(job1.ok()) << job1.status();
  after();
  auto job2 = MakeJob(c, "dynamic", b, proto::SHARDING_DYNAMIC);
  ASSERT_TRUE(job2.ok()) << job2.status();
  after();
  auto job3 = MakeJob(c, "", a, proto::SHARDING_OFF, 2);
  ASSERT_TRUE(job3.ok()) << job3.status();
  after();
  for (const char* addr : {"w1:1", "w2:1", "w3:1"}) {
    w.Beat(c, addr);
    after();
  }
  for (const char* addr : {"w1:1", "w2:1"}) {
    for (int64_t t : w.TasksOf(addr, *job2)) {
      for (int64_t i = 0; i < 2; ++i) {
        Split(c, *job2, t, i);
        after();
      }
    }
  }
  w.Beat(c, "w1:1", w.TasksOf("w1:1", *job1));  // w1 finishes its static task
  after();
  // w1 falls silent: declared dead, its unfinished tasks move to w2 and w3.
  clock.Advance(absl::Seconds(6));
  w.Beat(c, "w2:1");
  w.Beat(c, "w3:1");
  clock.Advance(absl::Seconds(6));
  w.Beat(c, "w2:1");
  after();
  w.Beat(c, "w3:1");
  after();
  w.Beat(c, "w1:1");  // back, under its old id
  after();
  for (const char* addr : {"w2:1", "w3:1", "w1:1"}) {
    w.Beat(c, addr, w.TasksOf(addr, *job1));
    after();
  }
}

}  // namespace journal_test
}  // namespace sluice

#endif  // SLUICE_TESTS_SERVER_JOURNAL_HISTORY_H_
