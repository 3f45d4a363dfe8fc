// ReadAheadSource: a StepSource that holds its next steps ahead of its caller by itself,
// received or produced on threads of its own, so that asking for a step that is already there
// returns it at once, without waking another thread. The service's ServiceStepSource is one: its
// streams receive the steps into the consumer's credit window (client/service_step_source.h),
// and its GetNextStep takes the next of them.
//
// What it changes: a DevicePrefetcher with nothing to copy (every replica stays on the host,
// client/device_prefetcher.h) does not read such a source ahead on a thread of its own; the
// trainer's call takes the next step straight from it. A thread in between would only hand each
// step over, a sleep and a wake-up on one side or the other per step.
//
// A source declares it by deriving from this class instead of StepSource; there is nothing to
// implement. Its GetNextStep must not do on the caller's thread the work a read-ahead exists to
// hide (decoding records, running a pipeline's ops, copying bytes): only take a step that has
// arrived (packing its tensors into elements at most), or wait for one.
#ifndef SLUICE_CLIENT_READ_AHEAD_SOURCE_H_
#define SLUICE_CLIENT_READ_AHEAD_SOURCE_H_

#include "sluice/distributed_dataset.h"

namespace sluice {

class ReadAheadSource : public StepSource {};

}  // namespace sluice

#endif  // SLUICE_CLIENT_READ_AHEAD_SOURCE_H_
