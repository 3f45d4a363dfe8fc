#include "worker/task_runner.h"

#include <memory>
#include <vector>

#include "core/data/distribute/rebatch.h"
#include "gtest/gtest.h"

namespace sluice {
namespace {

proto::TaskDef MakeTask(const Dataset& ds, int64_t consumers, int64_t replicas,
                        bool independent = false, int64_t num_tasks = 1, int64_t index = 0,
                        bool step_sharded = false) {
  proto::TaskDef t;
  t.set_task_id(100 + index);
  t.set_job_id(7);
  t.set_task_index(index);
  t.set_num_tasks(num_tasks);
  *t.mutable_dataset() = ds.def();
  t.mutable_job()->set_num_consumers(consumers);
  t.mutable_job()->set_replicas_per_consumer(replicas);
  t.mutable_job()->set_read_mode(independent ? proto::READ_MODE_INDEPENDENT
                                             : proto::READ_MODE_COORDINATED);
  t.mutable_job()->set_sharding_policy(step_sharded ? proto::SHARDING_DATA : proto::SHARDING_OFF);
  t.set_step_sharded(step_sharded);
  return t;
}

std::vector<TaskStep> AllSteps(const proto::TaskDef& task) {
  auto it = TaskStepIterator::Create(task);
  EXPECT_TRUE(it.ok()) << it.status();
  std::vector<TaskStep> out;
  if (!it.ok()) return out;
  for (int i = 0; i < 1000; ++i) {
    TaskStep s;
    bool end = false;
    absl::Status st = (*it)->GetNext(&s, &end);
    EXPECT_TRUE(st.ok()) << st;
    if (!st.ok() || end) break;
    out.push_back(std::move(s));
  }
  return out;
}

std::vector<int64_t> Values(const Tensor& t) {
  std::vector<int64_t> v;
  for (int64_t i = 0; i < t.num_elements(); ++i) v.push_back(t.data<int64_t>()[i]);
  return v;
}

// The steps of the local pipeline: ds.rebatch(sizes) grouped n at a time, dummies at the end.
std::vector<std::vector<std::vector<int64_t>>> LocalSteps(const Dataset& ds,
                                                          std::vector<int64_t> sizes, int64_t n) {
  auto pieces_ds = ds.Rebatch(sizes);
  auto spec = pieces_ds.element_spec();
  EXPECT_TRUE(spec.ok());
  auto it = MakeIterator(pieces_ds);
  EXPECT_TRUE(it.ok());
  StepIterator steps(*std::move(it), n, *spec);
  std::vector<std::vector<std::vector<int64_t>>> out;
  for (int i = 0; i < 1000; ++i) {
    std::vector<Element> step;
    int64_t real = 0;
    bool end = false;
    EXPECT_TRUE(steps.GetNextStep(&step, &real, &end).ok());
    if (end) break;
    std::vector<std::vector<int64_t>> vals;
    for (const Element& e : step) vals.push_back(Values(e.leaf()));
    out.push_back(vals);
  }
  return out;
}

std::vector<std::vector<int64_t>> StepValues(const TaskStep& s) {
  std::vector<std::vector<int64_t>> vals;
  for (const auto& piece : s.pieces) vals.push_back(Values(piece[0]));
  return vals;
}

TEST(TaskStepIteratorTest, CoordinatedStepsMatchTheLocalPipelineAndTfSizes) {
  const Dataset ds = Dataset::Range(23).Batch(5);
  const auto steps = AllSteps(MakeTask(ds, /*consumers=*/2, /*replicas=*/2));
  auto sizes = CoordinatedPieceSizes(5, 2, 2);
  ASSERT_TRUE(sizes.ok());
  const auto local = LocalSteps(ds, *sizes, 4);
  ASSERT_EQ(steps.size(), local.size());
  std::vector<int64_t> all;
  for (size_t s = 0; s < steps.size(); ++s) {
    EXPECT_EQ(steps[s].task_step, static_cast<int64_t>(s));
    EXPECT_EQ(steps[s].global_step, -1);
    EXPECT_EQ(StepValues(steps[s]), local[s]) << "step " << s;
    for (const auto& piece : StepValues(steps[s])) all.insert(all.end(), piece.begin(), piece.end());
  }
  // Every element once, in order.
  ASSERT_EQ(all.size(), 23u);
  for (int64_t i = 0; i < 23; ++i) EXPECT_EQ(all[i], i);
  // Consumer c sees, in each full step, the sizes TF's multi-worker rebatching gives worker c.
  for (size_t s = 0; s + 1 < steps.size(); ++s) {
    for (int64_t c = 0; c < 2; ++c) {
      auto want = BatchSizesForWorker(5, 2, 2, c);
      ASSERT_TRUE(want.ok());
      // Worker c's sizes cycle with period R per step over its own stream of pieces.
      for (int64_t r = 0; r < 2; ++r) {
        EXPECT_EQ(steps[s].pieces[c * 2 + r][0].shape().dim(0),
                  (*want)[(s * 2 + r) % want->size()])
            << "step " << s << " consumer " << c << " replica " << r;
      }
    }
  }
  // The last step is partial: real pieces first, then size-0 dummies.
  const TaskStep& last = steps.back();
  EXPECT_LT(last.num_real_pieces, 4);
  for (int64_t p = last.num_real_pieces; p < 4; ++p) {
    EXPECT_EQ(last.pieces[p][0].shape().dim(0), 0);
  }
}

// A step's piece holds its element's leaves in tf.nest.flatten order (dict keys sorted, nested
// structures depth first), whatever the order the element was built in.
TEST(TaskStepIteratorTest, AStepsLeavesAreInFlattenOrder) {
  auto scalar = [](int64_t v) { return Element(Tensor::Scalar<int64_t>(v)); };
  const Element e = Element::Dict(
      {{"c", scalar(3)},
       {"a", Element::Tuple({scalar(1), Element::Dict({{"y", scalar(12)}, {"x", scalar(11)}})})},
       {"b", scalar(2)}});
  const auto steps = AllSteps(MakeTask(Dataset::FromTensors(e).Repeat(3).Batch(2), 1, 1));
  ASSERT_EQ(steps.size(), 2u);
  for (const TaskStep& step : steps) {
    ASSERT_EQ(step.pieces.size(), 1u);
    std::vector<int64_t> firsts;
    for (const Tensor& t : step.pieces[0]) firsts.push_back(Values(t).front());
    EXPECT_EQ(firsts, (std::vector<int64_t>{1, 11, 12, 2, 3})) << "step " << step.task_step;
  }
  EXPECT_EQ(Values(steps[1].pieces[0][0]), (std::vector<int64_t>{1}));  // the third element
}

TEST(TaskStepIteratorTest, StepShardedTasksInterleaveToTheSingleSequence) {
  const Dataset ds = Dataset::Range(41).Batch(4);
  const auto whole = AllSteps(MakeTask(ds, 1, 2));
  constexpr int kTasks = 3;
  std::vector<std::vector<TaskStep>> tasks;
  for (int k = 0; k < kTasks; ++k) {
    tasks.push_back(AllSteps(MakeTask(ds, 1, 2, false, kTasks, k, /*step_sharded=*/true)));
  }
  // Round-robin over the tasks, as coordinated consumers read them.
  std::vector<TaskStep*> order;
  for (size_t round = 0; round < whole.size(); ++round) {
    for (int k = 0; k < kTasks; ++k) {
      if (round < tasks[k].size()) order.push_back(&tasks[k][round]);
    }
  }
  ASSERT_EQ(order.size(), whole.size());
  for (size_t s = 0; s < whole.size(); ++s) {
    EXPECT_EQ(order[s]->global_step, static_cast<int64_t>(s));
    EXPECT_EQ(StepValues(*order[s]), StepValues(whole[s])) << s;
  }
}

TEST(TaskStepIteratorTest, IndependentStepsSplitTheBatchOverLocalReplicas) {
  const Dataset ds = Dataset::Range(10).Batch(3);
  const auto steps = AllSteps(MakeTask(ds, 2, 2, /*independent=*/true));
  ASSERT_EQ(steps.size(), 4u);
  EXPECT_EQ(StepValues(steps[0]), (std::vector<std::vector<int64_t>>{{0, 1}, {2}}));
  EXPECT_EQ(StepValues(steps[3]), (std::vector<std::vector<int64_t>>{{9}, {}}));
  EXPECT_EQ(steps[3].num_real_pieces, 1);
}

// In-process mode does not rebatch for one replica in sync, so an unbatched pipeline runs.
TEST(TaskStepIteratorTest, OneReplicaRunsAnUnbatchedPipelineAsInProcessMode) {
  const auto steps = AllSteps(MakeTask(Dataset::Range(3), 1, 1));
  ASSERT_EQ(steps.size(), 3u);
  EXPECT_EQ(steps[2].pieces[0][0].data<int64_t>()[0], 2);
}

// Issue 12: a map after the batch hides B (TF's ComputeBatchSize stops at a map); the task
// failed with "global batch size must be non-negative, got -1" where in-process mode uses TF's
// legacy rebatch.
TEST(TaskStepIteratorTest, MapAfterBatchUsesTheLegacyRebatch) {
  auto ds = Dataset::Parse("range(10).batch(4).map(cast(tf.int64))");
  ASSERT_TRUE(ds.ok());
  const auto steps = AllSteps(MakeTask(*ds, 1, 2));
  ASSERT_EQ(steps.size(), 3u);
  EXPECT_EQ(StepValues(steps[0]), (std::vector<std::vector<int64_t>>{{0, 1}, {2, 3}}));
  EXPECT_EQ(StepValues(steps[2]), (std::vector<std::vector<int64_t>>{{8}, {9}}));
}

// Issue 12: DATA cuts like in-process DATA (the legacy rebatch); with C coordinated consumers
// one batch is cut into C x R pieces, piece c * R + r to consumer c's replica r.
TEST(TaskStepIteratorTest, DataShardedTaskCutsLikeInProcessDataWorkers) {
  const Dataset ds = Dataset::Range(12).Batch(9);
  proto::TaskDef one = MakeTask(ds, 1, 4, false, 1, 0, /*step_sharded=*/true);
  const auto steps = AllSteps(one);
  ASSERT_EQ(steps.size(), 2u);
  EXPECT_EQ(StepValues(steps[0]), (std::vector<std::vector<int64_t>>{{0, 1, 2}, {3, 4, 5},
                                                                     {6, 7, 8}, {}}));
  EXPECT_EQ(StepValues(steps[1]), (std::vector<std::vector<int64_t>>{{9}, {10}, {11}, {}}));
  // Two consumers x two replicas: the same four pieces, consumer 0 the first two.
  const auto two = AllSteps(MakeTask(ds, 2, 2, false, 1, 0, /*step_sharded=*/true));
  ASSERT_EQ(two.size(), 2u);
  EXPECT_EQ(StepValues(two[0]), StepValues(steps[0]));
  EXPECT_EQ(StepValues(two[1]), StepValues(steps[1]));
}

TEST(TaskStepIteratorTest, RejectsAnUnbatchedPipeline) {
  auto it = TaskStepIterator::Create(MakeTask(Dataset::Range(4), 1, 2));
  ASSERT_FALSE(it.ok());
  EXPECT_EQ(it.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(it.status().message().find("task 100"), absl::string_view::npos) << it.status();
}

std::vector<std::vector<std::vector<int64_t>>> ReadAll(StepReader* reader, int64_t consumer,
                                                       int64_t replicas) {
  std::vector<std::vector<std::vector<int64_t>>> out;
  for (int i = 0; i < 10000; ++i) {
    std::vector<std::shared_ptr<const TaskStep>> steps;
    bool end = false;
    absl::Status s = reader->Next(3, 1 << 20, absl::Now() + absl::Seconds(1), &steps, &end);
    EXPECT_TRUE(s.ok()) << s;
    if (end) reader->ConfirmEnd();  // as the stream does once the consumer half-closes
    if (!s.ok() || end) break;
    for (const auto& step : steps) {
      std::vector<std::vector<int64_t>> mine;
      for (int64_t r = 0; r < replicas; ++r) mine.push_back(Values(step->pieces[consumer * replicas + r][0]));
      out.push_back(mine);
    }
  }
  return out;
}

TEST(TaskRunnerTest, ConsumersReadTheIteratorsStepsThroughTheBuffer) {
  const Dataset ds = Dataset::Range(50).Batch(6);
  const proto::TaskDef task = MakeTask(ds, 2, 2);
  const auto want = AllSteps(task);
  TaskRunnerOptions options;
  options.buffer_bytes = 64;  // about one step: the producer waits for both consumers
  auto runner = TaskRunner::Start(task, options);
  ASSERT_TRUE(runner.ok()) << runner.status();
  auto r0 = (*runner)->OpenReader(0, 0);
  auto r1 = (*runner)->OpenReader(1, 0);
  ASSERT_TRUE(r0.ok() && r1.ok());
  std::vector<std::vector<std::vector<int64_t>>> got0, got1;
  std::thread t0([&] { got0 = ReadAll(r0->get(), 0, 2); });
  std::thread t1([&] { got1 = ReadAll(r1->get(), 1, 2); });
  t0.join();
  t1.join();
  ASSERT_EQ(got0.size(), want.size());
  ASSERT_EQ(got1.size(), want.size());
  for (size_t s = 0; s < want.size(); ++s) {
    auto v = StepValues(want[s]);
    EXPECT_EQ(got0[s], (std::vector<std::vector<int64_t>>{v[0], v[1]}));
    EXPECT_EQ(got1[s], (std::vector<std::vector<int64_t>>{v[2], v[3]}));
  }
  EXPECT_TRUE((*runner)->finished());
  // A stream that starts at a step the buffer released gets a private replay.
  auto late = (*runner)->OpenReader(0, 2);
  ASSERT_TRUE(late.ok()) << late.status();
  EXPECT_TRUE((*late)->replaying());
  auto replayed = ReadAll(late->get(), 0, 2);
  ASSERT_EQ(replayed.size(), want.size() - 2);
  EXPECT_EQ(replayed[0], got0[2]);
}

TEST(TaskRunnerTest, PipelineErrorReachesTheReader) {
  const Dataset ds = Dataset::TextLine({"/nonexistent/sluice/input.txt"}).Batch(2);
  absl::Status error;
  auto runner = TaskRunner::Start(MakeTask(ds, 1, 1), {});
  if (!runner.ok()) {
    error = runner.status();  // the pipeline failed while being built
  } else {
    auto r = (*runner)->OpenReader(0, 0);
    ASSERT_TRUE(r.ok());
    std::vector<std::shared_ptr<const TaskStep>> steps;
    bool end = false;
    for (int i = 0; i < 1000 && error.ok() && !end; ++i) {
      error = (*r)->Next(1, 1, absl::Now() + absl::Seconds(1), &steps, &end);
    }
  }
  EXPECT_FALSE(error.ok());
  EXPECT_NE(error.message().find("/nonexistent/sluice/input.txt"), absl::string_view::npos)
      << error;
}

TEST(TaskStepIteratorTest, DataResumeSkipsStepsBeforeSkipStepsAndShardsTheRest) {
  // range(20).batch(2): global steps 0..9; resumed at 5 over 2 tasks.
  const Dataset ds = Dataset::Range(20).Batch(2);
  for (int64_t k = 0; k < 2; ++k) {
    proto::TaskDef t = MakeTask(ds, 1, 1, false, 2, k, /*step_sharded=*/true);
    t.set_skip_steps(5);
    std::vector<TaskStep> steps = AllSteps(t);
    std::vector<int64_t> globals, firsts, task_steps;
    for (const TaskStep& s : steps) {
      globals.push_back(s.global_step);
      task_steps.push_back(s.task_step);
      firsts.push_back(Values(s.pieces[0][0])[0]);
    }
    if (k == 0) {
      EXPECT_EQ(globals, (std::vector<int64_t>{5, 7, 9}));
      EXPECT_EQ(firsts, (std::vector<int64_t>{10, 14, 18}));
    } else {
      EXPECT_EQ(globals, (std::vector<int64_t>{6, 8}));
    }
    for (size_t i = 0; i < task_steps.size(); ++i) EXPECT_EQ(task_steps[i], static_cast<int64_t>(i));
  }
}

TEST(TaskStepIteratorTest, ARangeTaskNumbersItsStepsFromFirstStepAndStopsAtNumSteps) {
  // The range's pipeline (here a plain one) yields more than num_steps: only num_steps count.
  proto::TaskDef t = MakeTask(Dataset::Range(20).Batch(2), 1, 1);
  t.mutable_job()->set_sharding_policy(proto::SHARDING_RANGES);
  t.set_first_step(30);
  t.set_num_steps(3);
  std::vector<TaskStep> steps = AllSteps(t);
  ASSERT_EQ(steps.size(), 3u);
  for (int64_t i = 0; i < 3; ++i) {
    EXPECT_EQ(steps[i].task_step, i);
    EXPECT_EQ(steps[i].global_step, 30 + i);
  }
  t.set_skip_steps(-1);
  EXPECT_EQ(TaskStepIterator::Create(t).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace sluice
