// One worker running 50 tasks keeps a thread count that does not grow with the tasks (issue 14:
// "a worker running 50 tasks does not start 50x the threads"): a real coordinator and worker
// in process (port 0); 50 jobs whose pipelines read files through a parallel interleave with
// prefetch, a parallel map and a prefetch, repeated forever; once every task has produced (so
// every pipeline runs, its buffer full), the process's thread count (/proc/self/task) is at
// most what it was before the jobs plus the fixed pools: the task runners' pool at its bound
// and the process's thread pool, plus a fixed slack for gRPC. The same pipelines with a thread
// per runner, per prefetch and per interleave slot would add 200 threads. A behaviour test: no
// timing (waits are bounded for liveness only).

#include <cstdint>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "core/util/thread_pool.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/coordinator.grpc.pb.h"
#include "proto/dataset.pb.h"
#include "tests/core/record_test_util.h"
#include "tests/core/thread_count.h"
#include "tests/worker/in_process_cluster.h"
#include "worker/task_runner.h"
#include "worker/task_runner_pool.h"

namespace sluice {
namespace {

constexpr int kTasks = 50;
// Threads gRPC and the harness may start lazily, whatever the number of tasks.
constexpr int kSlack = 16;
// Liveness bound only.
constexpr absl::Duration kStuck = absl::Seconds(120);

// Registers `pipeline` and makes a one-consumer job of it named `name` (one task per worker).
void MakeJob(proto::CoordinatorService::Stub* stub, const std::string& pipeline,
             const std::string& name) {
  proto::RegisterDatasetRequest reg;
  reg.set_wire_version(proto::WIRE_VERSION_1);
  reg.set_pipeline(pipeline);
  proto::RegisterDatasetResponse reg_resp;
  {
    grpc::ClientContext c;
    grpc::Status s = stub->RegisterDataset(&c, reg, &reg_resp);
    ASSERT_TRUE(s.ok()) << s.error_message();
  }
  proto::GetOrCreateJobRequest job;
  job.set_wire_version(proto::WIRE_VERSION_1);
  job.set_job_name(name);
  job.mutable_options()->set_dataset_id(reg_resp.dataset_id());
  job.mutable_options()->set_num_consumers(1);
  job.mutable_options()->set_replicas_per_consumer(1);
  job.mutable_options()->set_sharding_policy(proto::SHARDING_OFF);
  proto::GetOrCreateJobResponse job_resp;
  grpc::ClientContext c;
  grpc::Status s = stub->GetOrCreateJob(&c, job, &job_resp);
  ASSERT_TRUE(s.ok()) << s.error_message();
}

TEST(ServiceThreadBoundTest, AWorkerRunningFiftyTasksKeepsItsThreadsBounded) {
  record_test::TempDir dir;
  std::vector<std::string> files;
  for (int f = 0; f < 4; ++f) {
    std::string bytes;
    for (int64_t i = 0; i < 64; ++i) {
      const int64_t v = f * 1000 + i;
      bytes.append(reinterpret_cast<const char*>(&v), sizeof(v));
    }
    files.push_back(dir.File(absl::StrCat("f", f, ".bin")));
    record_test::WriteWholeFile(files.back(), bytes);
  }
  const std::string pipeline = absl::StrCat(
      "from_tensor_slices(['", files[0], "', '", files[1], "', '", files[2], "', '", files[3],
      "']).repeat().interleave(lambda f: fixed_length_record_dataset(f, 8).prefetch(2), "
      "cycle_length=2, num_parallel_calls=2).map(decode_raw(tf.int64), num_parallel_calls=2)"
      ".prefetch(2).batch(4)");

  Cluster cluster(1, absl::Seconds(10), /*buffer_bytes=*/1);  // one step buffered a task
  const int before = ThreadCount();
  ASSERT_GT(before, 0);
  auto stub = proto::CoordinatorService::NewStub(
      grpc::CreateChannel(cluster.address(), grpc::InsecureChannelCredentials()));
  for (int j = 0; j < kTasks; ++j) {
    ASSERT_NO_FATAL_FAILURE(MakeJob(stub.get(), pipeline, absl::StrCat("job-", j)));
  }
  // Every task runs: it has produced a step (its pipeline, with its interleave slots and
  // prefetches, has started) and waits for its consumer.
  const absl::Time give_up = absl::Now() + kStuck;
  bool all_running = false;
  while (!all_running && absl::Now() < give_up) {
    const auto runners = cluster.worker(0)->TaskRunners();
    all_running = runners.size() == static_cast<size_t>(kTasks);
    for (const auto& r : runners) {
      all_running = all_running && r->buffer()->stats().steps_produced >= 1;
      EXPECT_TRUE(r->buffer()->producer_status().ok()) << r->buffer()->producer_status();
    }
    if (!all_running) absl::SleepFor(absl::Milliseconds(5));
  }
  ASSERT_TRUE(all_running) << "the tasks did not all start within the liveness bound";

  // The runner pool at its bound and its monitor thread, the process pool, the slack.
  const int bound = before + ProcessTaskRunnerPool().value()->max_threads() + 1 + ProcessThreadPoolSize() +
                    kSlack;
  const int after = ThreadCount();
  std::cout << "threads before the jobs: " << before << ", with " << kTasks
            << " tasks running: " << after << ", bound " << bound << std::endl;
  EXPECT_LE(after, bound) << "threads before the jobs: " << before << ", with " << kTasks
                          << " tasks running: " << after;
  EXPECT_LE(ProcessTaskRunnerPool().value()->peak_threads(), ProcessTaskRunnerPool().value()->max_threads());
}

}  // namespace
}  // namespace sluice
