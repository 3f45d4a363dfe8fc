// StreamingCopy: memcpy for a destination that the writing thread will not read again, large
// enough that caching it only evicts what the writer still needs: a step written into a
// co-located consumer's shared-memory segment (core/rpc/shm_ring.h, core/rpc/job_shm_segment.h,
// worker/step_placement.h), which another process reads later, or a device's DMA.
//
// From kStreamingCopyMinBytes on, it writes with non-temporal stores: each destination line
// goes to memory without first being read into the cache (a read for ownership) and without
// evicting the writer's source and pipeline state. A segment is laps of up to 256 MiB, so its
// lines are never in the cache when written again; an ordinary copy reads every one of them
// from memory first and writes it back later. Below the threshold it is memcpy: measured on
// the development VM, streaming stores gain nothing at 256 KiB (a consumer reading the step at
// once finds it in the cache either way) and 25-50% of the copy's CPU from 1 MiB on, with the
// consumer's read of the step no dearer.
//
// Why not memcpy's own switch: glibc switches to non-temporal stores only above
// x86_non_temporal_threshold, derived from the shared cache size the CPU reports; virtual
// machines report the host's (this project's development VM: 384 MiB of L3 for its 32 MiB,
// a threshold of 288 MiB), so memcpy never streams a step there. Measured in bench/RESULTS.md
// ("Non-temporal copies into the segment", branch shmbig).
//
// Ordering: the non-temporal stores are fenced (sfence) before StreamingCopy returns, so a
// release (a mutex, an atomic store, a message to the consumer) after it publishes the bytes
// as after memcpy. Thread-safe (no state); dst and src must not overlap.
#ifndef SLUICE_CORE_UTIL_STREAMING_COPY_H_
#define SLUICE_CORE_UTIL_STREAMING_COPY_H_

#include <cstddef>

namespace sluice {

// Copies below this size are plain memcpy (see above).
inline constexpr size_t kStreamingCopyMinBytes = size_t{1} << 20;

// Copies `bytes` bytes from `src` to `dst` (non-overlapping), with non-temporal stores from
// kStreamingCopyMinBytes on where the CPU has them (x86-64), else as memcpy.
void StreamingCopy(void* dst, const void* src, size_t bytes);

// Whether StreamingCopy of `bytes` bytes uses non-temporal stores on this machine (tests,
// benchmarks).
bool StreamingCopyBypassesCache(size_t bytes);

}  // namespace sluice

#endif  // SLUICE_CORE_UTIL_STREAMING_COPY_H_
