// Steps for the StepBuffer tests: task step i holding the int64 scalar i; the TaskDef of a
// data-plane test's one task; the views a consumer encodes whole steps from.
#ifndef SLUICE_TESTS_WORKER_TASK_STEP_TEST_UTIL_H_
#define SLUICE_TESTS_WORKER_TASK_STEP_TEST_UTIL_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "proto/coordinator.pb.h"
#include "sluice/tensor.h"
#include "worker/consumer_frame.h"
#include "worker/step_buffer.h"

namespace sluice {

// One real piece, the scalar i; `bytes` is what the step counts against a buffer's budget.
inline std::shared_ptr<const TaskStep> MakeStep(int64_t i, size_t bytes = 100) {
  auto s = std::make_shared<TaskStep>();
  s->task_step = i;
  s->num_real_pieces = 1;
  s->pieces = {{Tensor::Scalar<int64_t>(i)}};
  s->bytes = bytes;
  return s;
}

// The views a consumer of an independent read encodes `steps` from (whole steps, each with
// its shared payload when it has one).
inline std::vector<WireStepView> WholeStepViews(
    const std::vector<std::shared_ptr<const TaskStep>>& steps) {
  std::vector<WireStepView> views;
  ConsumerFrameViews(steps, /*coordinated=*/false, 0, 1, &views);
  return views;
}

// Task 1 of job 1, its only task, read by one consumer with `replicas` replicas (coordinated).
inline proto::TaskDef OneConsumerTask(int64_t replicas = 1) {
  proto::TaskDef task;
  task.set_task_id(1);
  task.set_job_id(1);
  task.set_num_tasks(1);
  task.mutable_job()->set_num_consumers(1);
  task.mutable_job()->set_replicas_per_consumer(replicas);
  return task;
}

}  // namespace sluice

#endif  // SLUICE_TESTS_WORKER_TASK_STEP_TEST_UTIL_H_
