// A thread that cannot start (the system refuses it: EAGAIN under RLIMIT_DATA or RLIMIT_NPROC)
// fails the one thing it was for with RESOURCE_EXHAUSTED naming what could not start, and the
// worker keeps serving. Driven through StartThread's fault seam (core/util/start_thread.h) in
// one process: a task whose runner pool cannot start and a pipeline whose parallel map cannot
// start the process's thread pool fail their job, and the next job reads every element; a
// stream whose bulk sender cannot start ends with the error, and its consumer's next call
// reads on, exactly once. (ctest runs each test in its own process: the process's pools are
// not started yet when a test arms the seam.)
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/synchronization/mutex.h"
#include "core/rpc/bulk_channel.h"
#include "core/util/logging.h"
#include "core/util/start_thread.h"
#include "gtest/gtest.h"
#include "sluice/service.h"
#include "tests/worker/in_process_cluster.h"

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

TEST(ServiceThreadStartTest, AStreamWhoseBulkSenderCannotStartEndsAndItsConsumerReadsOn) {
  absl::Mutex mu;
  std::vector<std::string> warnings;
  ConfigureLogging({.min_level = LogLevel::kWarning, .sink = [&](absl::string_view line) {
                      absl::MutexLock lock(&mu);
                      warnings.emplace_back(line);
                    }});
  Cluster cluster(1);
  // Steps of 16384 int64 per replica: frames large enough for the bulk channel.
  constexpr int64_t kLarge = 16384 * 2 * 8;
  const Dataset ds = Dataset::Range(kLarge).Batch(16384);
  ServiceOptions remote = Job("no-sender");
  remote.shared_memory = false;  // as a consumer on another host: the bulk channel
  const BulkChannelCounts before = ProcessBulkChannelCounts();
  TEST_FailThreadStarts(1, "the bulk sender");
  Consumed read = Consume(cluster.address(), ds, remote, 2);
  EXPECT_EQ(TEST_ThreadStartsLeftToFail(), 0);  // the stream tried to start its sender
  TEST_FailThreadStarts(0);
  ConfigureLogging({});
  ASSERT_TRUE(read.status.ok()) << read.status;
  ExpectExactlyOnce({read}, kLarge);
  // The next call's sender started: its frames came over the socket.
  EXPECT_GT(ProcessBulkChannelCounts().frames_received, before.frames_received);
  absl::MutexLock lock(&mu);
  int ended = 0;
  for (const std::string& line : warnings) {
    ended += absl::StrContains(line, "cannot start a thread for the bulk sender of task") &&
             absl::StrContains(line, "the stream ends");
  }
  EXPECT_EQ(ended, 1) << "warnings: " << warnings.size();
}

}  // namespace
}  // namespace sluice
