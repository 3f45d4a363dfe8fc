// A thread that cannot start (the system refuses it: EAGAIN under RLIMIT_DATA or RLIMIT_NPROC)
// fails the one thing it was for with RESOURCE_EXHAUSTED naming what could not start, and the
// worker keeps serving. Driven through StartThread's fault seam (core/util/start_thread.h) in
// one process: a task whose runner pool cannot start and a pipeline whose parallel map cannot
// start the process's thread pool fail their job, and the next job reads every element; a
// stream whose bulk sender cannot start ends with the error, and its consumer's next call
// reads on, exactly once; a consumer's call whose bulk receiver cannot start stays on gRPC; a
// worker whose service's pools cannot start does not start, and says why. (ctest runs each test
// in its own process: the process's pools are not started yet when a test arms the seam.)
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/synchronization/mutex.h"
#include "core/rpc/bulk_channel.h"
#include "core/util/logging.h"
#include "core/util/start_thread.h"
#include "gtest/gtest.h"
#include "sluice/service.h"
#include "tests/worker/in_process_cluster.h"
#include "worker/worker_server.h"

namespace sluice {
namespace {

constexpr int64_t kElements = 64;

Dataset Pipeline(const std::string& text) {
  absl::StatusOr<Dataset> ds = Dataset::Parse(text);
  EXPECT_TRUE(ds.ok()) << ds.status();
  return ds.ok() ? *ds : Dataset::Range(0);
}

ServiceOptions Job(const std::string& name) {
  ServiceOptions options;
  options.job_name = name;
  return options;
}

// A job reading `pipeline` whose next thread start for `what` is refused fails with
// RESOURCE_EXHAUSTED naming that thread and `also_named` (the op that needed it, if given);
// the next job through the same worker reads every element.
void ExpectTheJobFailsAndTheNextIsServed(const std::string& pipeline, const std::string& what,
                                         const std::string& also_named = "") {
  Cluster cluster(1);
  const Dataset ds = Pipeline(pipeline);
  TEST_FailThreadStarts(1, what);
  Consumed failed = Consume(cluster.address(), ds, Job("refused"), 2);
  if (TEST_ThreadStartsLeftToFail() == 1) {
    TEST_FailThreadStarts(0);
    GTEST_SKIP() << "nothing started a thread for " << what
                 << ": its pool already ran (tests sharing a process)";
  }
  EXPECT_EQ(failed.status.code(), absl::StatusCode::kResourceExhausted) << failed.status;
  EXPECT_TRUE(absl::StrContains(failed.status.message(), "cannot start a thread for " + what))
      << failed.status;
  EXPECT_TRUE(absl::StrContains(failed.status.message(), also_named)) << failed.status;
  Consumed next = Consume(cluster.address(), ds, Job("the-next-job"), 2);
  ASSERT_TRUE(next.status.ok()) << next.status;
  ExpectExactlyOnce({next}, kElements);
}

TEST(ServiceThreadStartTest, ATaskWhoseRunnerPoolCannotStartFailsAndTheWorkerServesOn) {
  ExpectTheJobFailsAndTheNextIsServed("range(64).batch(8)", "a task runner");
}

TEST(ServiceThreadStartTest, AParallelMapWhosePoolCannotStartFailsAndTheWorkerServesOn) {
  ExpectTheJobFailsAndTheNextIsServed(
      "range(64).map(cast(tf.int64), num_parallel_calls=2).batch(8)",
      "the process's thread pool", "(map)");
}

// Steps of 16384 int64 per replica, read by a consumer on another host (no shared memory):
// frames large enough for the bulk channel.
constexpr int64_t kLarge = 16384 * 2 * 8;

// Reads kLarge elements through a one-worker cluster with the next thread start for `what`
// refused; what the read got, the bulk frames received meanwhile and the warnings logged whose
// text has `warning` in it.
struct BulkRead {
  Consumed read;
  int64_t bulk_frames = 0;
  int warnings = 0;
};
BulkRead ReadWithABulkThreadRefused(const std::string& what, const std::string& warning) {
  absl::Mutex mu;
  int warnings = 0;
  ConfigureLogging({.min_level = LogLevel::kWarning, .sink = [&](absl::string_view line) {
                      absl::MutexLock lock(&mu);
                      warnings += absl::StrContains(line, warning);
                    }});
  Cluster cluster(1);
  ServiceOptions remote = Job("bulk");
  remote.shared_memory = false;
  const int64_t before = ProcessBulkChannelCounts().frames_received;
  TEST_FailThreadStarts(1, what);
  BulkRead out;
  out.read = Consume(cluster.address(), Dataset::Range(kLarge).Batch(16384), remote, 2);
  EXPECT_EQ(TEST_ThreadStartsLeftToFail(), 0) << "nothing started a thread for " << what;
  TEST_FailThreadStarts(0);
  ConfigureLogging({});
  out.bulk_frames = ProcessBulkChannelCounts().frames_received - before;
  absl::MutexLock lock(&mu);
  out.warnings = warnings;
  return out;
}

TEST(ServiceThreadStartTest, AStreamWhoseBulkSenderCannotStartEndsAndItsConsumerReadsOn) {
  BulkRead r = ReadWithABulkThreadRefused(
      "the bulk sender", "cannot start a thread for the bulk sender of task");
  ASSERT_TRUE(r.read.status.ok()) << r.read.status;
  ExpectExactlyOnce({r.read}, kLarge);
  EXPECT_EQ(r.warnings, 1);  // "StreamSteps: ...; the stream ends", once
  EXPECT_GT(r.bulk_frames, 0);  // the next call's sender started: its frames took the socket
}

// The consumer's side: a call whose bulk receiver cannot start declines the channel (the worker
// waits for that answer) and reads on over gRPC.
TEST(ServiceThreadStartTest, ACallWhoseBulkReceiverCannotStartStaysOnGrpc) {
  BulkRead r = ReadWithABulkThreadRefused(
      "the bulk receiver", "cannot start a thread for the bulk receiver of task");
  ASSERT_TRUE(r.read.status.ok()) << r.read.status;
  ExpectExactlyOnce({r.read}, kLarge);
  EXPECT_EQ(r.warnings, 1);  // "...; this call stays on gRPC"
  EXPECT_EQ(r.bulk_frames, 0);
}

// The service's pools start with the worker (the pump pool runs the streams' wake-ups, the open
// pool opens them): a worker that cannot start one does not start, and WorkerServer::Start
// returns RESOURCE_EXHAUSTED naming the pool (sluice-worker prints it and exits) rather than
// ending the process that called it. With every thread allowed, the same options start.
TEST(ServiceThreadStartTest, AWorkerWhoseServicePoolCannotStartFailsItsStart) {
  WorkerServerOptions options;
  options.coordinator_address = "127.0.0.1:1";  // not reached before the start fails
  options.log = [](absl::string_view) {};
  for (const std::string pool :
       {"the worker service's pump pool", "the worker service's open pool"}) {
    SCOPED_TRACE(pool);
    TEST_FailThreadStarts(1, pool);
    absl::StatusOr<std::unique_ptr<WorkerServer>> worker = WorkerServer::Start(options);
    EXPECT_EQ(TEST_ThreadStartsLeftToFail(), 0) << "nothing started a thread for " << pool;
    TEST_FailThreadStarts(0);
    ASSERT_FALSE(worker.ok());
    EXPECT_EQ(worker.status().code(), absl::StatusCode::kResourceExhausted) << worker.status();
    EXPECT_TRUE(absl::StrContains(worker.status().message(), "cannot start a thread for " + pool))
        << worker.status();
  }
  absl::StatusOr<std::unique_ptr<WorkerServer>> worker = WorkerServer::Start(options);
  ASSERT_TRUE(worker.ok()) << worker.status();
}

}  // namespace
}  // namespace sluice
