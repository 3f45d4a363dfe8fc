// The process's host memory account: its two limits and the bytes in use against them. Every
// tensor buffer and string tensor is charged here by the allocator (Tensor::TryAllocate,
// TensorBuffer::TryAllocateHost, Tensor::TryFromStrings in sluice/tensor.h) when it is created
// and given back when the last tensor sharing it goes; ops that hold elements add the structure
// around those payloads through MemoryReservation (core/data/memory_budget.h). Going over a
// limit is RESOURCE_EXHAUSTED naming the op, the size and the limit, before any byte is
// allocated: the pipeline (on a worker: its task, hence its job) fails and the process keeps
// serving.
//
// Two limits:
//  - element_bytes: one allocation, and one element (a batch is one element, so one step of a
//    job): what a client asks for with `range(N).batch(10000000000)`.
//  - process_bytes: everything charged in the process together: live tensors and the ops'
//    reservations (a worker's tasks, its step buffers' tensors included).
//
// Counted once (the decision that keeps the usable memory from being halved): a payload byte is
// charged by the allocator only, for as long as its storage lives, however many tensors, views
// or buffered elements share it. A MemoryReservation charges only what the allocator cannot see
// (ElementOverhead: the Nest nodes, Tensor objects and control blocks around payloads), while
// the element limit is checked against an element's whole footprint, payload included. So a
// shuffle buffer of N elements costs N x (payload + overhead) once, and a batch being stacked
// costs its gathered elements plus the stacked copy, both real, neither twice.
//
// What is not counted: bytes that tensors borrow (Tensor::Wrap of a received gRPC slice, a
// device buffer, a Python array), and characters written through Tensor::mutable_string() after
// the tensor was allocated (code that fills strings builds them and uses TryFromStrings).
//
// Cost: one relaxed atomic add when a buffer is allocated and one subtract when it is freed; no
// lock.
//
// Thread safety: MemoryBudget is thread-safe (atomics).
#ifndef SLUICE_CORE_TENSOR_HOST_MEMORY_H_
#define SLUICE_CORE_TENSOR_HOST_MEMORY_H_

#include <atomic>
#include <cstdint>
#include <optional>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace sluice {

struct MemoryLimits {
  // All charges of the process together.
  int64_t process_bytes = int64_t{1} << 40;
  // One allocation, one element (one batch, one step).
  int64_t element_bytes = int64_t{1} << 38;
};

// From the machine: process_bytes is 3/4 of the smallest of the cgroup's memory limit (cgroup
// v2 memory.max, v1 memory.limit_in_bytes), the address-space limit (RLIMIT_AS) and physical
// memory; element_bytes a quarter of that.
MemoryLimits DefaultMemoryLimits();

class MemoryBudget {
 public:
  explicit MemoryBudget(MemoryLimits limits) { SetLimits(limits); }

  MemoryBudget(const MemoryBudget&) = delete;
  MemoryBudget& operator=(const MemoryBudget&) = delete;

  // For main() before any pipeline runs (and for tests); charges keep counting.
  void SetLimits(MemoryLimits limits);
  MemoryLimits limits() const;

  // Takes `bytes` (>= 0) from the process limit, or RESOURCE_EXHAUSTED "<what>: needs N more
  // bytes, but M of the process's memory limit of L are in use (--memory_limit)".
  absl::Status Reserve(int64_t bytes, absl::string_view what);
  void Release(int64_t bytes) { in_use_.fetch_sub(bytes, std::memory_order_relaxed); }
  int64_t in_use() const { return in_use_.load(std::memory_order_relaxed); }

  // RESOURCE_EXHAUSTED "<what>: <describe> needs more than the memory limit of one element,
  // L bytes (--max_element_bytes)" when bytes > element_bytes.
  absl::Status CheckElement(int64_t bytes, absl::string_view what,
                            absl::string_view describe) const;

  // The allocator's charge for one allocation of `bytes` (>= 0) that `describe`s itself ("an
  // int64 tensor of shape [10]") for `what` (the op): RESOURCE_EXHAUSTED naming both, the size
  // and the limit, when it is over the element limit or would take the process over its
  // limit; nothing is charged then. Release(bytes) gives it back.
  absl::Status Charge(int64_t bytes, absl::string_view what, absl::string_view describe);
  // Charge in two halves, so a hot path builds no message unless it is refused: TryCharge
  // charges `bytes` and returns true when they fit both limits (else charges nothing);
  // Refusal is then the RESOURCE_EXHAUSTED Charge would have returned.
  bool TryCharge(int64_t bytes);
  absl::Status Refusal(int64_t bytes, absl::string_view what, absl::string_view describe) const;
  // Counts `bytes` without checking a limit: an allocation that cannot refuse (Tensor::Allocate).
  void ForceCharge(int64_t bytes) { in_use_.fetch_add(bytes, std::memory_order_relaxed); }

 private:
  std::atomic<int64_t> process_bytes_{0};
  std::atomic<int64_t> element_bytes_{0};
  std::atomic<int64_t> in_use_{0};
};

// A refusal at the memory limit of one element, `limit` bytes: RESOURCE_EXHAUSTED with `message`
// (which names what, where and the limit) and the limit attached as a payload, so whoever
// handles the error can tell it from a process-limit refusal. It does not depend on what else
// the process holds: the same element is refused by every process with this limit, so the
// coordinator tries the task again only on a worker with a larger one. A context added with
// WithContext (core/util/status_context.h) keeps it.
absl::Status ElementLimitError(absl::string_view message, int64_t limit);
// The element limit `status` was refused at, or nullopt when it is no ElementLimitError.
std::optional<int64_t> RefusedElementLimit(const absl::Status& status);

// The process's budget, the one the allocator charges; its limits start as
// DefaultMemoryLimits() (a binary's main() sets them from flags: ConfigureProcessMemoryBudget
// in core/data/memory_budget.h).
MemoryBudget& ProcessMemoryBudget();

}  // namespace sluice

#endif  // SLUICE_CORE_TENSOR_HOST_MEMORY_H_
