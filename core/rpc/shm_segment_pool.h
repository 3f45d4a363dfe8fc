// ShmSegmentPool: the worker's warm shared-memory segments (docs/SERVICE.md "Shared memory",
// "Warm segments"). A fresh segment costs its first lap: the kernel allocates and zeroes every
// page as the ring first reaches it (73 ms of CPU for 128 MiB against 12 ms warm,
// bench/RESULTS.md "shmfast"). The pool keeps a segment whose stream ended, its pages still
// allocated, and hands it to a later stream of the same consumer process.
//
// Isolation rule: a pooled segment goes back only to the consumer process that held it (the
// key that process sends on every offer, 16 random bytes that only its authenticated streams
// carried), and only when that process says it no longer views it (ShmOffer.idle_segment_ids).
// Its stale bytes are that process's own earlier steps, and no other process maps it, so
// neither a later job's data reaches another tenant nor another tenant's data reaches the
// consumer; a trainer's tensors are never overwritten because the consumer names only
// segments none of its tensors view.
//
// A segment returns to the pool when the worker's last reference to it drops (the stream's
// ring, steps placed in it, its pending hand-over). Pooled segments stay charged to
// ProcessMemoryBudget(); the pool holds at most `max_bytes` (the oldest go first) and drops
// a segment idle for `idle_ttl` (Trim, also run by the pool's own thread every `trim_interval`).
//
//   ShmSegmentPool pool({.max_bytes = 512 << 20});
//   ASSIGN_OR_RETURN(ShmSegmentPool::Lease lease, pool.Acquire(key, idle_ids, bytes));
//   // lease.segment: give it to the stream; lease.id, lease.warm ride on ShmAccept.
//
// Thread-safe.
#ifndef SLUICE_CORE_RPC_SHM_SEGMENT_POOL_H_
#define SLUICE_CORE_RPC_SHM_SEGMENT_POOL_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "core/rpc/shm_segment.h"

namespace sluice {

struct ShmSegmentPoolOptions {
  // The most bytes of segments kept between streams (0: keep none, every stream gets a fresh
  // segment).
  size_t max_bytes = size_t{512} << 20;
  // A segment no stream took for this long is freed.
  absl::Duration idle_ttl = absl::Seconds(30);
  // How often the pool's thread runs Trim (absl::ZeroDuration(): no thread; Trim only when
  // the pool is used, or by hand).
  absl::Duration trim_interval = absl::Seconds(5);
  // The clock (tests fake it).
  std::function<absl::Time()> now = [] { return absl::Now(); };
};

// Process-wide counts (the bench and tests read them).
struct ShmPoolCounts {
  int64_t segments_created = 0;  // fresh segments handed out
  int64_t segments_reused = 0;   // warm segments handed out
  int64_t segments_trimmed = 0;  // freed idle or over max_bytes
};
ShmPoolCounts ProcessShmPoolCounts();

class ShmSegmentPool {
 public:
  static constexpr int kMaxIdleIds = 64;
  static constexpr size_t kConsumerKeyBytes = 16;

  explicit ShmSegmentPool(ShmSegmentPoolOptions options = {});
  ~ShmSegmentPool();  // frees pooled segments; those in use are freed when their users let go
  ShmSegmentPool(const ShmSegmentPool&) = delete;
  ShmSegmentPool& operator=(const ShmSegmentPool&) = delete;

  struct Lease {
    // The segment; it returns to the pool, tagged with the consumer's key, when the last copy
    // of this pointer is dropped.
    std::shared_ptr<ShmSegment> segment;
    uint64_t id = 0;    // unique in this pool (ShmAccept.segment_id)
    bool warm = false;  // a pooled segment of this consumer, pages allocated
    // Of `idle_ids`, those this pool does not keep for `consumer_key` (ShmAccept.dropped_...).
    std::vector<uint64_t> dropped;
  };

  // A segment of `bytes` (page-rounded) for a stream of the consumer `consumer_key`: a pooled
  // one of that key whose id is among the first kMaxIdleIds of `idle_ids` (a peer's list) and
  // whose size is `bytes`, else a fresh one
  // (ShmSegment::Create; when the memory budget refuses it, pooled segments are freed, oldest
  // first, until it fits or none is left). A key of any length but kConsumerKeyBytes (none,
  // or one a peer made guessable) never gets a pooled segment and its segments are not kept. Errors as ShmSegment::Create.
  absl::StatusOr<Lease> Acquire(const std::string& consumer_key,
                                const std::vector<uint64_t>& idle_ids, size_t bytes);

  // Marks a leased segment not to be kept: it is freed when its last reference drops (a
  // stream that did not end cleanly: its consumer may be dead, or will not name it again).
  // No-op for a segment this pool did not lease.
  static void DoNotKeep(const std::shared_ptr<ShmSegment>& segment);

  // Frees segments idle for idle_ttl or longer.
  void Trim();

  // Bytes of the segments kept now (not in use).
  size_t pooled_bytes() const;

 private:
  struct State;
  struct Returner;
  void TrimLoop();

  const std::shared_ptr<State> state_;
  std::thread trimmer_;  // when trim_interval > 0
};

}  // namespace sluice

#endif  // SLUICE_CORE_RPC_SHM_SEGMENT_POOL_H_
