// TaskRotation: the base of the read orders that take turns over every task of the job
// (CoordinatedRead, IndependentRead): all of the job's tasks are made when it is created (any
// sharding policy but RANGES), so the first heartbeat lists them and they are opened at once,
// in task_index order. A task leaves the rotation at its end; the read ends when none is left.
//
// Next() holds the streams' lock and asks the mode for a turn (TakeTurnLocked) until it names a
// task with a step (handed out), fails, or has nothing ready (then it waits for the streams'
// next event and asks again, raising the awaited task's credit once it has waited
// raise_credit_after: TaskStreams::WaitForStepLocked).
#ifndef SLUICE_CLIENT_TASK_ROTATION_H_
#define SLUICE_CLIENT_TASK_ROTATION_H_

#include <cstddef>
#include <vector>

#include "client/read_order.h"
#include "client/task_streams.h"

namespace sluice {

class TaskRotation : public ReadOrder {
 public:
  // Opens the streams of `tasks`' tasks. `streams` must outlive this.
  TaskRotation(TaskStreams* streams, const proto::ClientHeartbeatResponse& tasks);

  absl::Status Next(std::vector<Element>* replicas, bool* end_of_data) final;

 protected:
  // What one look at the rotation decided.
  struct Turn {
    TaskStream* task = nullptr;  // its first queued step goes next
    absl::Status error;          // the read fails
    bool look_again = false;     // an ended task left the rotation
    // Nothing ready: the task whose step the caller waits for (its credit may be raised,
    // TaskStreams::WaitForStepLocked); null: any task of the rotation.
    TaskStream* waiting_for = nullptr;
  };
  // One look, with the streams' lock held and rotation_ not empty. Neither `task` nor `error`
  // nor `look_again`: nothing is ready, wait. Moves next_ when it picks a task.
  virtual Turn TakeTurnLocked() = 0;

  TaskStreams* const streams_;
  // The tasks not yet ended, in task_index order (the caller's thread only), and where the
  // next turn starts.
  std::vector<TaskStream*> rotation_;
  size_t next_ = 0;
};

}  // namespace sluice

#endif  // SLUICE_CLIENT_TASK_ROTATION_H_
