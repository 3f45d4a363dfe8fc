// ReadOrder: how ServiceStepSource hands out the steps its task streams (client/task_streams.h)
// receive. One per read mode, each in its own file:
//   - client/coordinated_read.h: round-robin in task order, one step per task (DATA and the
//     other policies' coordinated reads; the order is deterministic),
//   - client/independent_read.h: the next step of whichever task has one,
//   - client/ranges_read.h: a SHARDING_RANGES job, task 0 to its end, then task 1, ...
// (the first two take turns over all of the job's tasks: client/task_rotation.h).
// An order decides which tasks are open and which queued step goes next; the streams receive,
// reconnect and grant credit. MakeReadOrder (service_step_source.cc) picks the order from the
// options.
#ifndef SLUICE_CLIENT_READ_ORDER_H_
#define SLUICE_CLIENT_READ_ORDER_H_

#include <vector>

#include "absl/status/status.h"
#include "proto/coordinator.pb.h"
#include "sluice/element.h"

namespace sluice {

class ReadOrder {
 public:
  virtual ~ReadOrder() = default;

  // The next step into *replicas (*end_of_data false), or *end_of_data true once every task of
  // the order has ended. Waits (on the streams' cv) for a step. An error is final: the source
  // returns it from then on, and after the end it answers end_of_data without asking again.
  // Called by the caller's thread only, without the streams' lock.
  virtual absl::Status Next(std::vector<Element>* replicas, bool* end_of_data) = 0;

  // Every ClientHeartbeat answer the streams' monitor receives, with the streams' lock held
  // (before the streams look for moved tasks). Default: nothing.
  virtual void OnHeartbeatLocked(const proto::ClientHeartbeatResponse& response) {
    (void)response;
  }
};

}  // namespace sluice

#endif  // SLUICE_CLIENT_READ_ORDER_H_
