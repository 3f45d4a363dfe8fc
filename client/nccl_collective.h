// NCCL Collective: the Collective between trainer processes on GPUs, over NCCL (NVLink, IB,
// sockets: whatever NCCL picks). Built when CMake finds the CUDA toolkit and nccl.h/libnccl
// (SLUICE_HAVE_NCCL); elsewhere CreateNcclCollective returns UNIMPLEMENTED.
//
// Bootstrap: rank 0 makes an ncclUniqueId and broadcasts it over `bootstrap` (any Collective
// spanning the same ranks, normally a CpuCollective); every rank then joins the NCCL
// communicator on its device. The communicator is non-blocking: each operation is enqueued on a
// private non-blocking CUDA stream and polled until done, so it is bounded by op_timeout (then
// the communicator is aborted and the error is DEADLINE_EXCEEDED), and an asynchronous NCCL
// error (a peer gone) becomes UNAVAILABLE with NCCL's text. NCCL does not say which peer
// failed; the message names this rank and the operation.
//
// The interface passes host memory; values are staged through a device scratch buffer that
// grows as needed and is reused. This is for control values (has-data votes, step broadcasts),
// not for bulk tensor traffic.
//
// Not thread-safe (collective.h).
#ifndef SLUICE_CLIENT_NCCL_COLLECTIVE_H_
#define SLUICE_CLIENT_NCCL_COLLECTIVE_H_

#include <memory>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/collective.h"

namespace sluice {

struct NcclCollectiveOptions {
  // The CUDA device this rank uses.
  int device = 0;
  // Bound on joining the communicator and on each operation.
  absl::Duration init_timeout = absl::Seconds(120);
  absl::Duration op_timeout = absl::Minutes(10);
};

// True when this build has the NCCL implementation (it may still fail without a device).
bool NcclCollectiveAvailable();

// Joins the NCCL communicator of bootstrap->size() ranks (this one bootstrap->rank()).
// `bootstrap` is borrowed only during the call. UNIMPLEMENTED without NCCL in the build;
// FAILED_PRECONDITION without a usable CUDA device; the bootstrap's errors; UNAVAILABLE or
// DEADLINE_EXCEEDED when the communicator cannot be formed.
absl::StatusOr<std::unique_ptr<Collective>> CreateNcclCollective(Collective* bootstrap,
                                                                 NcclCollectiveOptions options);

}  // namespace sluice

#endif  // SLUICE_CLIENT_NCCL_COLLECTIVE_H_
