// Collective: the collective operations trainer processes use to agree on their input, behind
// one interface with a CPU implementation over TCP (cpu_collective.h) and an NCCL one
// (nccl_collective.h, built with CUDA and NCCL).
//
// A Collective spans `size()` processes, numbered 0..size-1; this process is `rank()`. Every
// operation is collective: all ranks call the same operations in the same order (with the same
// root and, for AllReduceSum, spans of the same length), or the operation fails. Operations are
// blocking and bounded by the implementation's timeout.
//
// Errors name the peer: UNAVAILABLE when a peer is gone (its connection closed or reset), with
// its rank; DEADLINE_EXCEEDED when a peer did not answer within the timeout; INVALID_ARGUMENT
// for a bad root; FAILED_PRECONDITION when ranks disagree on the operation. After any error
// the Collective is broken and every later operation returns the same error (a group that lost
// a member cannot continue in step).
//
// Not thread-safe: one operation at a time (as one trainer loop issues them).
#ifndef SLUICE_CLIENT_COLLECTIVE_H_
#define SLUICE_CLIENT_COLLECTIVE_H_

#include <cstdint>
#include <span>
#include <string>

#include "absl/status/status.h"

namespace sluice {

class Collective {
 public:
  virtual ~Collective() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;

  // Replaces values[i], on every rank, with the sum over all ranks of their values[i].
  // Every rank passes a span of the same length (FAILED_PRECONDITION otherwise).
  virtual absl::Status AllReduceSum(std::span<int64_t> values) = 0;

  // Makes *bytes on every rank equal to *bytes on `root` (0 <= root < size(), else
  // INVALID_ARGUMENT). Non-root ranks' input is ignored and may be of any length.
  virtual absl::Status Broadcast(int root, std::string* bytes) = 0;

  // Returns when every rank has called Barrier().
  virtual absl::Status Barrier() = 0;
};

}  // namespace sluice

#endif  // SLUICE_CLIENT_COLLECTIVE_H_
