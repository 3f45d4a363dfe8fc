// A late consumer of a coordinated task, through the task runner (worker/task_runner.h): within
// the retention window it reads every step from memory, with no replay of the pipeline; beyond
// it, through a private replay. Either way it reads every step of the task exactly once, in
// the pipeline's order, and its end counts for the task (finished()).
#include <cstdint>
#include <memory>
#include <vector>

#include "gtest/gtest.h"
#include "sluice/dataset.h"
#include "worker/task_runner.h"

namespace sluice {
namespace {

// A coordinated task of `ds` with two consumers of one replica each.
proto::TaskDef TwoConsumerTask(const Dataset& ds) {
  proto::TaskDef t;
  t.set_task_id(100);
  t.set_job_id(7);
  t.set_num_tasks(1);
  *t.mutable_dataset() = ds.def();
  t.mutable_job()->set_num_consumers(2);
  t.mutable_job()->set_replicas_per_consumer(1);
  t.mutable_job()->set_read_mode(proto::READ_MODE_COORDINATED);
  t.mutable_job()->set_sharding_policy(proto::SHARDING_OFF);
  return t;
}

// Consumer `consumer`'s piece of every step of the task, as the pipeline makes them.
std::vector<std::vector<int64_t>> WantedPieces(const proto::TaskDef& task, int64_t consumer) {
  auto it = TaskStepIterator::Create(task);
  EXPECT_TRUE(it.ok()) << it.status();
  std::vector<std::vector<int64_t>> out;
  if (!it.ok()) return out;
  for (int i = 0; i < 10000; ++i) {
    TaskStep s;
    bool end = false;
    EXPECT_TRUE((*it)->GetNext(&s, &end).ok());
    if (end) break;
    const Tensor& t = s.pieces[consumer][0];
    out.emplace_back(t.data<int64_t>(), t.data<int64_t>() + t.num_elements());
  }
  return out;
}

// Reads `reader` to the end of the task (confirming it, as a stream does once the consumer
// half-closes): consumer `consumer`'s piece of each step, and each step's task_step.
struct Read {
  std::vector<std::vector<int64_t>> pieces;
  std::vector<int64_t> task_steps;
  bool ended = false;
};
Read ReadToEnd(StepReader* reader, int64_t consumer) {
  Read out;
  for (int i = 0; i < 100000; ++i) {
    std::vector<std::shared_ptr<const TaskStep>> steps;
    bool end = false;
    absl::Status s = reader->Next(3, 1 << 20, absl::Now() + absl::Seconds(1), &steps, &end);
    EXPECT_TRUE(s.ok()) << s;
    if (!s.ok()) break;
    if (end) {
      reader->ConfirmEnd();
      out.ended = true;
      break;
    }
    for (const auto& step : steps) {
      const Tensor& t = step->pieces[consumer][0];
      out.pieces.emplace_back(t.data<int64_t>(), t.data<int64_t>() + t.num_elements());
      out.task_steps.push_back(step->task_step);
    }
  }
  return out;
}

void ExpectEveryStepOnceInOrder(const Read& got, const std::vector<std::vector<int64_t>>& want) {
  EXPECT_TRUE(got.ended);
  ASSERT_EQ(got.pieces.size(), want.size());
  for (size_t s = 0; s < want.size(); ++s) {
    EXPECT_EQ(got.task_steps[s], static_cast<int64_t>(s));
    EXPECT_EQ(got.pieces[s], want[s]) << "step " << s;
  }
}

// Consumer 0 reads the whole task while consumer 1 stays away: the producer, blocked on it
// (a budget of one step), detaches it as late at once. Then consumer 1 comes. (Consumer 0 may
// be detached as late too, if the producer blocks before its reader opens: it then reads from
// the window or a replay as well; the counts below are consumer 1's own.)
struct LateRun {
  std::shared_ptr<TaskRunner> runner;
  std::vector<std::vector<int64_t>> want0, want1;
  int64_t replays_before = 0;  // the runner's counts when consumer 1 comes
  int64_t hits_before = 0;
};
LateRun ConsumerZeroFirst(size_t retention_bytes) {
  const proto::TaskDef task = TwoConsumerTask(Dataset::Range(400).Batch(8));  // 50 steps
  LateRun run;
  run.want0 = WantedPieces(task, 0);
  run.want1 = WantedPieces(task, 1);
  TaskRunnerOptions options;
  options.buffer_bytes = 64;  // one step: the producer waits for consumer 1
  options.detach_unattached_after = absl::ZeroDuration();
  options.retention_bytes = retention_bytes;
  auto runner = TaskRunner::Start(task, options);
  EXPECT_TRUE(runner.ok()) << runner.status();
  if (!runner.ok()) return run;
  run.runner = *runner;
  auto r0 = run.runner->OpenReader(0, 0);
  EXPECT_TRUE(r0.ok()) << r0.status();
  if (!r0.ok()) return run;
  ExpectEveryStepOnceInOrder(ReadToEnd(r0->get(), 0), run.want0);
  EXPECT_FALSE(run.runner->finished());  // consumer 1 has not read the task
  run.replays_before = run.runner->replays();
  run.hits_before = run.runner->buffer()->stats().retention_hits;
  return run;
}

TEST(LateConsumerTest, WithinTheRetentionWindowItReadsEveryStepFromMemory) {
  LateRun run = ConsumerZeroFirst(/*retention_bytes=*/1 << 20);
  ASSERT_NE(run.runner, nullptr);
  EXPECT_EQ(run.runner->buffer()->stats().retained_steps, run.want1.size());
  auto late = run.runner->OpenReader(1, 0);
  ASSERT_TRUE(late.ok()) << late.status();
  EXPECT_FALSE((*late)->replaying());
  ExpectEveryStepOnceInOrder(ReadToEnd(late->get(), 1), run.want1);
  // No replay for it (with this window, for nobody: the pipeline ran once); its attach was
  // served from the window.
  EXPECT_EQ(run.runner->replays(), 0);
  EXPECT_EQ(run.runner->buffer()->stats().retention_hits, run.hits_before + 1);
  EXPECT_TRUE(run.runner->finished());
  EXPECT_EQ(run.runner->buffer()->stats().retained_bytes, 0u);
}

TEST(LateConsumerTest, BeyondTheRetentionWindowItReadsEveryStepThroughAReplay) {
  LateRun run = ConsumerZeroFirst(/*retention_bytes=*/200);  // three steps of 64 bytes
  ASSERT_NE(run.runner, nullptr);
  EXPECT_LT(run.runner->buffer()->stats().retained_steps, run.want1.size());
  auto late = run.runner->OpenReader(1, 0);
  ASSERT_TRUE(late.ok()) << late.status();
  EXPECT_TRUE((*late)->replaying());
  ExpectEveryStepOnceInOrder(ReadToEnd(late->get(), 1), run.want1);
  EXPECT_EQ(run.runner->replays(), run.replays_before + 1);
  EXPECT_EQ(run.runner->buffer()->stats().retention_hits, run.hits_before);
  EXPECT_TRUE(run.runner->finished());  // its replay's end counts
}

// Without a window (--retention_bytes=0) a late consumer replays, as before the window.
TEST(LateConsumerTest, WithoutAWindowItReplays) {
  LateRun run = ConsumerZeroFirst(/*retention_bytes=*/0);
  ASSERT_NE(run.runner, nullptr);
  auto late = run.runner->OpenReader(1, 0);
  ASSERT_TRUE(late.ok()) << late.status();
  EXPECT_TRUE((*late)->replaying());
  ExpectEveryStepOnceInOrder(ReadToEnd(late->get(), 1), run.want1);
  EXPECT_EQ(run.runner->replays(), run.replays_before + 1);
  EXPECT_EQ(run.runner->buffer()->stats().retention_hits, 0);
  EXPECT_TRUE(run.runner->finished());
}

// Both consumers read concurrently; consumer 1's stream breaks mid-task with steps in flight
// (it reconnects at the first step it did not receive, after consumer 0 read past it): it
// resumes from memory, no replay, and both read every step once.
TEST(LateConsumerTest, AStreamThatBrokeResumesFromMemory) {
  const proto::TaskDef task = TwoConsumerTask(Dataset::Range(400).Batch(8));
  const auto want0 = WantedPieces(task, 0);
  const auto want1 = WantedPieces(task, 1);
  TaskRunnerOptions options;
  options.buffer_bytes = 1 << 20;  // the whole task fits: consumer 0 never waits
  options.retention_bytes = 1 << 20;
  auto runner = TaskRunner::Start(task, options);
  ASSERT_TRUE(runner.ok()) << runner.status();
  auto r0 = (*runner)->OpenReader(0, 0);
  auto r1 = (*runner)->OpenReader(1, 0);
  ASSERT_TRUE(r0.ok() && r1.ok());
  // Consumer 1 is handed 20 steps but receives 12.
  for (int taken = 0; taken < 20;) {
    std::vector<std::shared_ptr<const TaskStep>> steps;
    bool end = false;
    ASSERT_TRUE((*r1)->Next(20 - taken, 1 << 20, absl::Now() + absl::Seconds(1), &steps, &end)
                    .ok());
    ASSERT_FALSE(end);
    taken += static_cast<int>(steps.size());
  }
  // Consumer 0 reads the whole task: steps 0..19 are released (both are past them).
  ExpectEveryStepOnceInOrder(ReadToEnd(r0->get(), 0), want0);
  auto back = (*runner)->OpenReader(1, 12);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_FALSE((*back)->replaying());
  Read rest = ReadToEnd(back->get(), 1);
  EXPECT_TRUE(rest.ended);
  ASSERT_EQ(rest.pieces.size(), want1.size() - 12);
  for (size_t s = 0; s < rest.pieces.size(); ++s) {
    EXPECT_EQ(rest.task_steps[s], static_cast<int64_t>(s + 12));
    EXPECT_EQ(rest.pieces[s], want1[s + 12]);
  }
  EXPECT_EQ((*runner)->replays(), 0);
  EXPECT_EQ((*runner)->buffer()->stats().retention_hits, 1);
  EXPECT_TRUE((*runner)->finished());
}

}  // namespace
}  // namespace sluice
