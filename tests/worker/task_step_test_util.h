// Steps for the StepBuffer tests: task step i holding the int64 scalar i.
#ifndef SLUICE_TESTS_WORKER_TASK_STEP_TEST_UTIL_H_
#define SLUICE_TESTS_WORKER_TASK_STEP_TEST_UTIL_H_

#include <cstddef>
#include <cstdint>
#include <memory>

#include "sluice/tensor.h"
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

}  // namespace sluice

#endif  // SLUICE_TESTS_WORKER_TASK_STEP_TEST_UTIL_H_
