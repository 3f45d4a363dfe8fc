// The memory a process lets its pipelines hold, as a budget rather than a hope: every op that
// buffers elements (batch, padded_batch, shuffle, cache, prefetch) or allocates a tensor whose
// size comes from the user (one_hot, padded shapes, parse_example defaults) reserves the bytes
// first. Going over a limit is RESOURCE_EXHAUSTED naming the op and the size: the pipeline (on a
// worker: its task, hence its job) fails, and the process keeps serving everything else.
//
// Two limits:
//  - element_bytes: one element, and a batch is one element (so one step of a job): what a
//    client asks for with `batch(1000000000)`. Checked as the element is built, so the op fails
//    once it has gathered that much, not after running the machine out of memory.
//  - process_bytes: all op buffers of all pipelines in the process together (a worker's tasks).
//
// Footprints count what the bytes really cost on the heap: a scalar element is its payload plus
// the structure that holds it (~350 bytes, measured with `from_tensors([1]).repeat().batch(n)`),
// so a batch of ten million scalars is ~3.5 GB whatever its payload.
//
// The budget is per process, like the allocator it stands in front of: ProcessMemoryBudget() is
// what the ops use, and a binary's main() sets its limits from flags (sluice-worker
// --memory_limit / --max_element_bytes); by default they come from the machine (the cgroup's
// memory.max, else physical memory). Buffers the worker already bounds otherwise (its step
// buffers: --buffer_bytes) are not counted twice.
//
//   MemoryReservation held(label);                   // e.g. "op 2 (batch)"
//   RETURN_IF_ERROR(held.GrowElement(ElementFootprint(e), "a batch of 1000000000 elements"));
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
#include "sluice/element.h"

namespace sluice {

struct MemoryLimits {
  // All reservations of the process together.
  int64_t process_bytes = int64_t{1} << 40;
  // One element (one batch, one step).
  int64_t element_bytes = int64_t{1} << 38;
};

// From the machine: process_bytes is 3/4 of the cgroup's memory limit (cgroup v2 memory.max,
// v1 memory.limit_in_bytes) or, without one, of physical memory; element_bytes a quarter of
// that.
MemoryLimits DefaultMemoryLimits();

// For a binary's main(): the process's limits from its --memory_limit and --max_element_bytes
// flags (ParseByteSize; empty: DefaultMemoryLimits(), the element limit then a quarter of the
// process's). INVALID_ARGUMENT naming the flag when one does not parse or the element limit is
// above the process's.
absl::Status ConfigureProcessMemoryBudget(absl::string_view memory_limit,
                                          absl::string_view max_element_bytes);

// Parses "4GiB", "512MiB", "1e9", "1000000" (bytes; K/M/G/T with or without "iB" are powers
// of 1024, "B" alone allowed). INVALID_ARGUMENT naming `flag` and the text otherwise.
absl::StatusOr<int64_t> ParseByteSize(absl::string_view text, absl::string_view flag);

class MemoryBudget {
 public:
  explicit MemoryBudget(MemoryLimits limits) { SetLimits(limits); }

  MemoryBudget(const MemoryBudget&) = delete;
  MemoryBudget& operator=(const MemoryBudget&) = delete;

  // For main() before any pipeline runs (and for tests); reservations keep counting.
  void SetLimits(MemoryLimits limits);
  MemoryLimits limits() const;

  // Takes `bytes` (>= 0) from the process limit, or RESOURCE_EXHAUSTED "<what>: needs N more
  // bytes, but M of the process's memory limit of L are in use (--memory_limit)".
  absl::Status Reserve(int64_t bytes, absl::string_view what);
  void Release(int64_t bytes);
  int64_t in_use() const { return in_use_.load(std::memory_order_relaxed); }

  // RESOURCE_EXHAUSTED "<what>: <describe> needs more than the memory limit of one element,
  // L bytes (--max_element_bytes)" when bytes > element_bytes.
  absl::Status CheckElement(int64_t bytes, absl::string_view what,
                            absl::string_view describe) const;

 private:
  std::atomic<int64_t> process_bytes_{0};
  std::atomic<int64_t> element_bytes_{0};
  std::atomic<int64_t> in_use_{0};
};

// The process's budget; its limits start as DefaultMemoryLimits().
MemoryBudget& ProcessMemoryBudget();

// The bytes one element holds on the heap: payloads (string lengths for strings) plus the
// structure around them.
int64_t ElementFootprint(const Element& e);
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
  void Shrink(int64_t bytes);
  void Clear();
  int64_t bytes() const { return bytes_; }

 private:
  const std::string what_;
  MemoryBudget* const budget_;
  int64_t bytes_ = 0;     // what the buffer holds
  int64_t reserved_ = 0;  // taken from the budget: bytes_ rounded up to a chunk
};

}  // namespace sluice

#endif  // SLUICE_CORE_MEMORY_BUDGET_H_
