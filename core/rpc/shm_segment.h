// ShmSegment: a shared-memory segment for steps that travel to a consumer on the same host
// (docs/SERVICE.md "Shared memory"). The worker creates it (Create: a memfd, sized and sealed
// against shrinking and growing, mapped read-write, its bytes charged to the process's memory
// budget); the consumer maps the file descriptor it received (Map: every property checked, as
// the fd came from another process). The mapping and the fd go when the object does; the
// memory itself goes when the last process holding either lets go (a killed worker's segment
// lives only while its consumer's tensors view it).
//
//   ASSIGN_OR_RETURN(std::shared_ptr<ShmSegment> seg, ShmSegment::Create(64 << 20));
//   ... hand seg->fd() to the consumer (shm_fd_passing.h) ...
//   // consumer:
//   ASSIGN_OR_RETURN(std::shared_ptr<ShmSegment> view, ShmSegment::Map(std::move(fd), size));
//
// Thread-safe (immutable after creation; writing the bytes is the owner's protocol).
#ifndef SLUICE_CORE_RPC_SHM_SEGMENT_H_
#define SLUICE_CORE_RPC_SHM_SEGMENT_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace sluice {

// An owned file descriptor, closed on destruction.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& o) noexcept : fd_(o.release()) {}
  UniqueFd& operator=(UniqueFd&& o) noexcept;
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd();
  int get() const { return fd_; }
  int release() {
    int fd = fd_;
    fd_ = -1;
    return fd;
  }

 private:
  int fd_ = -1;
};

// The segments' memfd name, as /proc/<pid>/fd and /proc/<pid>/maps show it ("memfd:" + this).
inline constexpr char kShmSegmentName[] = "sluice-shm";

class ShmSegment {
 public:
  // A new segment of `bytes` (rounded up to the page size; > 0 and at most 1 TiB), charged to
  // ProcessMemoryBudget() while it lives. Not populated: a page is allocated when the ring
  // first reaches it, so creating a 256 MiB segment costs microseconds, not the ~100 ms of
  // zeroing it that used to delay every stream's first step (bench/RESULTS.md, issue 28), and
  // a short job touches only the pages its steps fill.
  // RESOURCE_EXHAUSTED when the budget or the system refuses; INVALID_ARGUMENT for a bad size;
  // INTERNAL naming the call that failed.
  static absl::StatusOr<std::shared_ptr<ShmSegment>> Create(size_t bytes);
  // Maps a segment received from a peer: `fd` must be a regular file (a memfd) of exactly
  // `expected_bytes` bytes, sealed against shrinking and growing and its seals sealed (else a
  // peer could truncate it under the mapping and fault this process); FAILED_PRECONDITION
  // naming what is wrong otherwise. Mapped without populating (pages map in as the ring
  // reaches them: the stream's first frame waits for no whole-segment work), read-write
  // shared: the peer never reads it back, so what the consumer writes into its own tensors
  // concerns only them. `populate`: map every page now (MAP_POPULATE), for a warm segment
  // (ShmAccept.warm) whose pages exist: one call fills the page tables instead of a fault
  // per page-around on the consumer's thread.
  static absl::StatusOr<std::shared_ptr<ShmSegment>> Map(UniqueFd fd, size_t expected_bytes,
                                                         bool populate = false);

  ~ShmSegment();
  ShmSegment(const ShmSegment&) = delete;
  ShmSegment& operator=(const ShmSegment&) = delete;

  uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  int fd() const { return fd_.get(); }

 private:
  ShmSegment(UniqueFd fd, uint8_t* data, size_t size, int64_t charged)
      : fd_(std::move(fd)), data_(data), size_(size), charged_(charged) {}

  UniqueFd fd_;
  uint8_t* const data_;
  const size_t size_;
  const int64_t charged_;  // to ProcessMemoryBudget() (the creator's only)
};

// The default of the binaries' --shared_memory flags: false when the environment sets
// SLUICE_SHARED_MEMORY=0 (to run a whole test suite or deployment over TCP), else true. For
// main() only; libraries take an option.
bool SharedMemoryDefaultFromEnvironment();

// This host's boot id (/proc/sys/kernel/random/boot_id, trimmed); empty when unreadable (then
// no peer is taken for co-located).
std::string HostBootId();

}  // namespace sluice

#endif  // SLUICE_CORE_RPC_SHM_SEGMENT_H_
