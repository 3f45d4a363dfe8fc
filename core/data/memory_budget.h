// The memory a process lets its pipelines hold, as a budget rather than a hope. The budget
// itself (MemoryLimits, MemoryBudget, ProcessMemoryBudget) lives with the allocator in
// core/tensor/host_memory.h: every tensor buffer and string tensor is charged there when it is
// allocated. This file adds what ops need on top: every op that buffers elements (batch,
// padded_batch, shuffle, cache, prefetch) holds a MemoryReservation for the structure around
// the payloads it keeps (the payloads are already the allocator's), and checks each element it
// builds against the element limit with the element's whole footprint. Going over a limit is
// RESOURCE_EXHAUSTED naming the op and the size: the pipeline (on a worker: its task, hence its
// job) fails, and the process keeps serving everything else.
//
// Two limits (host_memory.h):
//  - element_bytes: one element, and a batch is one element (so one step of a job): what a
//    client asks for with `batch(1000000000)`. Checked as the element is built, so the op fails
//    once it has gathered that much, not after running the machine out of memory.
//  - process_bytes: every live tensor and every op buffer of the process together.
//
// Footprints count what the bytes really cost on the heap: a scalar element is its payload plus
// the structure that holds it (~350 bytes, measured with `from_tensors([1]).repeat().batch(n)`),
// so a batch of ten million scalars is ~3.5 GB whatever its payload. ElementOverhead is that
// footprint less the payload: what a reservation charges, so no payload byte is counted twice.
//
// The budget is per process, like the allocator: ProcessMemoryBudget() is what the ops use, and
// a binary's main() sets its limits from flags (sluice-worker --memory_limit /
// --max_element_bytes); by default they come from the machine (the smallest of the cgroup's
// memory.max, RLIMIT_AS and physical memory). The worker's step buffers (--buffer_bytes) hold
// tensors, which the allocator counts; they reserve nothing more.
//
//   MemoryReservation held(label);                   // e.g. "op 2 (batch)"
//   RETURN_IF_ERROR(held.GrowElement(ElementFootprint(e), ElementOverhead(e),
//                                    "a batch of 1000000000 elements"));
//
// Thread safety: MemoryBudget is thread-safe (atomics); a MemoryReservation is owned by one
// iterator and is not.
#ifndef SLUICE_CORE_MEMORY_BUDGET_H_
#define SLUICE_CORE_MEMORY_BUDGET_H_

#include <atomic>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/tensor/host_memory.h"
#include "sluice/element.h"

namespace sluice {

// For a binary's main(): the process's limits from its --memory_limit and --max_element_bytes
// flags (ParseByteSize; empty: DefaultMemoryLimits(), the element limit then a quarter of the
// process's). INVALID_ARGUMENT naming the flag when one does not parse or the element limit is
// above the process's.
absl::Status ConfigureProcessMemoryBudget(absl::string_view memory_limit,
                                          absl::string_view max_element_bytes);

// Parses "4GiB", "512MiB", "1e9", "1000000" (bytes; K/M/G/T with or without "iB" are powers
// of 1024, "B" alone allowed). INVALID_ARGUMENT naming `flag` and the text otherwise.
absl::StatusOr<int64_t> ParseByteSize(absl::string_view text, absl::string_view flag);

// The bytes one element holds on the heap: payloads (string lengths for strings) plus the
// structure around them.
int64_t ElementFootprint(const Element& e);
// ElementFootprint less the payload bytes (which the allocator charges): the Nest nodes, the
// Tensor objects and control blocks, the std::string objects of string tensors.
int64_t ElementOverhead(const Element& e);
int64_t TensorFootprint(const Tensor& t);
// As TensorFootprint for a tensor not yet allocated: `num_elements` of `dtype` (strings: empty).
int64_t AllocationFootprint(DType dtype, int64_t num_elements);

// The bytes one op's buffer holds, reserved from a budget and given back when it shrinks or is
// destroyed. Not thread-safe.
class MemoryReservation {
 public:
  // `what` names the op in errors ("op 2 (batch)"). `budget` must outlive this.
  explicit MemoryReservation(std::string what, MemoryBudget* budget = &ProcessMemoryBudget());
  ~MemoryReservation() { Clear(); }

  MemoryReservation(const MemoryReservation&) = delete;
  MemoryReservation& operator=(const MemoryReservation&) = delete;

  // Adds `bytes` to the buffer: RESOURCE_EXHAUSTED from the process limit (nothing added).
  absl::Status Grow(int64_t bytes);
  // As Grow, and the buffer is one element being built (`describe` says which, e.g. "a batch
  // of 4096 elements"): RESOURCE_EXHAUSTED also when it would pass the element limit.
  absl::Status GrowElement(int64_t bytes, absl::string_view describe);
  // For an element whose payload the allocator already charges: the element limit is checked
  // against the footprints added so far (`footprint`: ElementFootprint), the budget is charged
  // only `charge` (ElementOverhead). RESOURCE_EXHAUSTED as GrowElement, nothing added then.
  absl::Status GrowElement(int64_t footprint, int64_t charge, absl::string_view describe);
  void Shrink(int64_t bytes);
  // Gives everything back; the element being built starts again at 0.
  void Clear();
  int64_t bytes() const { return bytes_; }

 private:
  const std::string what_;
  MemoryBudget* const budget_;
  int64_t bytes_ = 0;     // what the buffer holds
  int64_t reserved_ = 0;  // taken from the budget: bytes_ rounded up to a chunk
  int64_t element_ = 0;   // footprints given to the 3-argument GrowElement since Clear()
};

}  // namespace sluice

#endif  // SLUICE_CORE_MEMORY_BUDGET_H_
