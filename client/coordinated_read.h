// CoordinatedRead: the read order of a coordinated consumer (docs/SERVICE.md, "Coordinated
// reads"): the job's tasks round-robin in task_index order, one step each, a task leaving the
// rotation at its end; the data ends when every task has ended. The order is deterministic, so
// every consumer of the job sees the same sequence of global steps.
//
// It opens every task the first heartbeat listed (the job's tasks are all made when it is
// created) and waits for the task whose turn it is, even when another task has steps queued.
// A task's failure is the read's failure.
#ifndef SLUICE_CLIENT_COORDINATED_READ_H_
#define SLUICE_CLIENT_COORDINATED_READ_H_

#include "client/task_rotation.h"

namespace sluice {

class CoordinatedRead : public TaskRotation {
 public:
  using TaskRotation::TaskRotation;

 private:
  Turn TakeTurnLocked() override;
};

}  // namespace sluice

#endif  // SLUICE_CLIENT_COORDINATED_READ_H_
