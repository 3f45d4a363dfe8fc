// Consumers that leave, with the real binaries (issue 15, docs/SERVICE.md "Consumers that
// leave"): two consumers of a coordinated job; consumer 1 reads a step and then hangs
// (SIGSTOP: attached, then silent). Workers buffer only a few steps, so before the coordinator
// declared consumers gone consumer 0 waited for it forever; now, after --consumer_timeout,
// the coordinator declares consumer 1 gone, the workers stop holding steps for it, and
// consumer 0 reads every one of its steps to the end.
//
// Every wait is bounded; every process is stopped (ProcessCluster, Subprocess destructors).
#include <signal.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/process_cluster.h"

namespace sluice {
namespace {

using ::testing::HasSubstr;

TEST(ConsumerGoneTest, AConsumerThatHangsNoLongerHoldsTheOthersBack) {
  ProcessClusterOptions o;
  o.num_workers = 2;
  o.worker_buffer_bytes = 512;  // a few steps ahead: a consumer that stops holds the others
  o.coordinator_flags = {"--consumer_timeout=2s", "--finished_job_ttl=1h"};
  auto started = ProcessCluster::Start(o);
  ASSERT_TRUE(started.ok()) << started.status();
  ProcessCluster& c = **started;
  constexpr int64_t kSteps = 500;  // range(4000).batch(8)
  std::vector<std::unique_ptr<Subprocess>> consumers;
  for (int i = 0; i < 2; ++i) {
    auto p = StartSluicectl({"run", "--coordinator=" + c.coordinator(), "--job=leave",
                             "--pipeline=range(4000).batch(8)", "--devices=CPU:0,CPU:1",
                             absl::StrCat("--consumer_index=", i), "--num_consumers=2",
                             "--sharding_policy=DATA", "--read_mode=coordinated",
                             "--format=json", "--retry_deadline=90s",
                             // A few steps per stream, so that a consumer that stops holds the
                             // others (the 64 MiB default would take the whole job at once).
                             "--receive_budget_bytes=1024"});
    ASSERT_TRUE(p.ok()) << p.status();
    consumers.push_back(*std::move(p));
  }
  // Consumer 1 has attached and read a step; then it hangs.
  auto first = consumers[1]->WaitForOutput(SubprocessStream::kStdout, "\"step\": 0,",
                                           absl::Seconds(60));
  ASSERT_TRUE(first.ok()) << first.status() << c.Logs();
  ASSERT_TRUE(consumers[1]->Signal(SIGSTOP).ok());
  absl::SleepFor(absl::Milliseconds(50));  // output in flight lands
  const std::string before = consumers[1]->stdout_text();
  ASSERT_LT(std::count(before.begin(), before.end(), '\n'), kSteps);

  // Consumer 0 reads every one of its steps to the end, in order.
  auto done = consumers[0]->Wait(absl::Seconds(120));
  ASSERT_TRUE(done.ok()) << done.status() << c.Logs();
  EXPECT_EQ(done->exit_code, 0) << done->stderr_text << c.Logs();
  EXPECT_EQ(std::count(done->stdout_text.begin(), done->stdout_text.end(), '\n'), kSteps);
  EXPECT_THAT(done->stdout_text, HasSubstr(absl::StrCat("{\"step\": ", kSteps - 1, ",")));
  EXPECT_THAT(c.Logs(), HasSubstr("consumer 1 of job 1 is gone"));
  // Consumer 1 stays stopped; the Subprocess destructor kills it. The servers stop cleanly.
  ASSERT_TRUE(consumers[1]->Signal(SIGKILL).ok());
  absl::Status stopped = c.StopAll();
  EXPECT_TRUE(stopped.ok()) << stopped;
}

}  // namespace
}  // namespace sluice
