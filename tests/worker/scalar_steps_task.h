// A task of int64 scalar steps for raw consumers of the StreamSteps call
// (tests/worker/gated_stream_task.h: RawStreamStepsCall, TestStreamServer) that break their
// calls and call again: the task, its requests and grants, and waits on its state, bounded by
// kRawCallStuck (a liveness bound only).
#ifndef SLUICE_TESTS_WORKER_SCALAR_STEPS_TASK_H_
#define SLUICE_TESTS_WORKER_SCALAR_STEPS_TASK_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "core/rpc/step_frame.h"
#include "worker/cross_trainer_window.h"
#include "worker/grpc_worker_service.h"
#include "worker/task_runner.h"

namespace sluice {

inline constexpr absl::Duration kRawCallStuck = absl::Seconds(60);
// The credit a scalar step costs.
inline constexpr int64_t kScalarStepCost = 8 + static_cast<int64_t>(kStepCreditOverheadBytes);

// A producer (TaskRunner::StartWith) of `steps` int64 scalar steps 0, 1, ... (8 bytes each),
// step i holding i.
inline TaskRunner::StepProducer ScalarStepProducer(int64_t steps) {
  auto produced = std::make_shared<int64_t>(0);
  return [produced, steps](TaskStep* step, bool* end) {
    *end = *produced == steps;
    if (*end) return absl::OkStatus();
    step->task_step = *produced;
    step->num_real_pieces = 1;
    step->pieces = {{Tensor::Scalar<int64_t>(*produced)}};
    step->bytes = 8;
    ++*produced;
    return absl::OkStatus();
  };
}

// Task 1 of job 1, independent reads by one consumer: `steps` int64 scalar steps, step i
// holding i; `cross_trainer`: a job shared across trainers (its buffer is a window).
class ScalarStepsTask : public TaskLookup {
 public:
  ScalarStepsTask(int64_t steps, bool cross_trainer) : steps_(steps) {
    proto::TaskDef task;
    task.mutable_job()->mutable_cross_trainer()->set_enabled(cross_trainer);
    task.set_task_id(1);
    task.set_job_id(1);
    task.set_num_tasks(1);
    task.mutable_job()->set_num_consumers(1);
    task.mutable_job()->set_replicas_per_consumer(1);
    task.mutable_job()->set_read_mode(proto::READ_MODE_INDEPENDENT);
    runner_ = TaskRunner::StartWith(task, TaskRunnerOptions{}, ScalarStepProducer(steps));
  }
  absl::StatusOr<std::shared_ptr<TaskRunner>> FindTask(int64_t, int64_t) override {
    return runner_;
  }
  const std::shared_ptr<TaskRunner>& runner() const { return runner_; }
  // Until every step is produced and `queued` are still queued (not handed out).
  bool WaitQueued(size_t queued) {
    return WaitFor([&] {
      StepBuffer::Stats s = runner_->buffer()->stats();
      return s.steps_produced == steps_ && s.steps == queued;
    });
  }
  size_t buffered_bytes() { return runner_->buffer()->buffered_bytes(); }
  // A shared job: until every step is produced and trainer `id` was handed `read`.
  bool WaitTrainerRead(const std::string& id, int64_t read) {
    return WaitFor([&] {
      CrossTrainerWindow::Stats s = window_stats();
      for (const auto& t : s.trainers) {
        if (s.steps_produced == steps_ && t.trainer_id == id && t.steps_read == read) return true;
      }
      return false;
    });
  }
  // A shared job: until trainer `id`'s consumers hold `n` steps unacknowledged.
  bool WaitTrainerUnacked(const std::string& id, int64_t n) {
    return WaitFor([&] {
      for (const auto& t : window_stats().trainers) {
        if (t.trainer_id == id && t.unacked_steps == n) return true;
      }
      return false;
    });
  }
  CrossTrainerWindow::Stats window_stats() {
    return runner_->buffer()->cross_trainer_window()->stats();
  }
  // Bounded wait (kRawCallStuck) until `done()`.
  template <typename Done>
  static bool WaitFor(Done done) {
    const absl::Time give_up = absl::Now() + kRawCallStuck;
    while (absl::Now() < give_up) {
      if (done()) return true;
      absl::SleepFor(absl::Microseconds(200));
    }
    return false;
  }

 private:
  const int64_t steps_;
  std::shared_ptr<TaskRunner> runner_;
};

// The request of a call of task 1 of job 1 by consumer `id` (of trainer `trainer_id` in a
// shared job; "": none) that has received `received` steps, with `credit` bytes of credit in a
// window of `window` bytes.
inline proto::StreamRequest ScalarStepsRequest(uint64_t id, int64_t received, int64_t credit,
                                               int64_t window,
                                               const std::string& trainer_id = "") {
  proto::StreamRequest r;
  r.set_wire_version(proto::WIRE_VERSION_2);
  r.set_job_id(1);
  r.set_task_id(1);
  r.set_start_step(received);
  r.set_consumer_id(id);
  r.set_initial_credit_bytes(credit);
  r.set_window_bytes(window);
  r.set_trainer_id(trainer_id);
  return r;
}

// A grant of `bytes` more credit acknowledging `received` steps.
inline proto::ConsumerMessage CreditMessage(int64_t bytes, int64_t received) {
  proto::ConsumerMessage m;
  m.mutable_credit()->set_bytes(bytes);
  m.mutable_credit()->set_received_steps(received);
  return m;
}

// Service options sending frames at once (no coalescing wait), at most `max_frame_steps`
// steps each.
inline WorkerServiceOptions ImmediateFrames(size_t max_frame_steps) {
  WorkerServiceOptions options;
  options.max_frame_steps = max_frame_steps;
  options.coalesce_wait = absl::ZeroDuration();
  return options;
}

// The int64 value of each step of `frame`, appended to *values.
inline void AppendScalars(const StepFrame& frame, std::vector<int64_t>* values) {
  for (const WireStep& w : frame.steps) values->push_back(w.pieces[0][0].data<int64_t>()[0]);
}

}  // namespace sluice

#endif  // SLUICE_TESTS_WORKER_SCALAR_STEPS_TASK_H_
