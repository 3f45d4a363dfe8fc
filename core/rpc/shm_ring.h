// The shared-memory ring of one StreamSteps call (docs/SERVICE.md "Shared memory"): the worker
// writes each frame's numeric tensor bytes into a region of a ShmSegment (ShmRingWriter, the
// encoder's SharedPayloadSink) and the frame header says where (proto ShmPayload); the consumer
// wraps that region as the frame's buffer, so the decoded tensors are views of the segment
// (ShmRingReader, the decoder's SharedPayloadSource), and reports back, on its credit grants,
// the ring position up to which every region has been released (the last tensor viewing it
// dropped). The worker reuses a region only once released, so a trainer's tensors are never
// overwritten (DESIGN.md invariant 9); a frame finding no room goes inline over the stream.
//
// Direct path (the worker batches straight into the segment): Allocate hands a buffer in the
// ring to whoever builds a step (worker/step_placement.h), and a frame whose numeric tensors
// already lie in the ring laid out as the decoder lays out its frame buffer is sent as its
// header alone (InPlace: no copy). Such a region is reused only once both the consumer
// released it and the worker dropped every tensor viewing it (the worker keeps a step until it
// is acknowledged, to send it again after a reconnect); a region allocated and never sent is
// covered by the consumer's release of a later one. A frame may go in place only after every
// region sent before it (ring order is what the consumer checks); otherwise it is copied, or
// sent inline when a step built in the ring waits to be sent (a copy would go past it).
//
// Positions count bytes written since the ring began, padding included (a region never wraps:
// when it would, the rest of the segment is skipped); a region starts at a multiple of 64.
// The writer also goes back to the segment's start early, skipping the rest, once the lap is
// long enough and the start is free (ShmRingWriter's constructor): while the consumer and the
// worker hold a few MiB, the writes stay in a stretch of the segment a few times that instead
// of going round all of it. The consumer sees only positions that skip more (what it checks is
// unchanged).
// Worked example, a 4096-byte segment: regions of 1000 and 2000 bytes are at offsets 0 and
// 1024 (ring_end 1024 and 3072); one of 1500 bytes does not fit before the end, so it skips
// 1024 bytes and needs [4096, 5632): it waits until the consumer released up to 1536 or more
// (the first region and then the second, at 3072).
#ifndef SLUICE_CORE_RPC_SHM_RING_H_
#define SLUICE_CORE_RPC_SHM_RING_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "core/device/device_memory.h"
#include "core/rpc/shm_segment.h"
#include "core/rpc/step_frame.h"

namespace sluice {

// What this process's rings did (process-wide, for metrics and tests): frames whose payload
// went through a segment, written (worker; those already in the ring counted apart) and
// resolved (consumer), and the rings alive now.
struct ShmRingCounts {
  int64_t frames_written = 0;
  int64_t frames_in_place = 0;  // of frames_written: sent as a header alone (no copy)
  int64_t frames_read = 0;
  int64_t writers_alive = 0;
  int64_t readers_alive = 0;
};
ShmRingCounts ProcessShmRingCounts();

// The worker's side. Thread-safe: the stream reserves and sends under its lock, the task's
// producer allocates from its own thread, and buffers are freed from wherever a step's last
// tensor goes.
class ShmRingWriter : public SharedPayloadSink {
 public:
  // The early wrap: the write position goes back to the segment's start as soon as the start
  // is free (released by the consumer, no buffer of Allocate's alive there) and the lap is at
  // least max(`wrap_span`, kLapRegions x the region's bytes, kLapHeld x the most bytes held at
  // once in this lap: the consumer's regions not released and the worker's buffers alive). A
  // ring whose held bytes stay few (1 KiB steps, a consumer keeping up) so writes the same
  // stretch again while the cache may still have it; going round a 170 MiB segment, every line
  // written missed the cache (bench/RESULTS.md, kibring). The lap's length follows what is
  // held because after a wrap the writer cannot pass the last lap's regions still held (ring
  // positions only grow): with held bytes near the lap's length it would find no room while
  // the rest of the segment is free, and steps would go inline. A segment of at most wrap_span
  // never wraps early. Positions grow by the segment's size per lap of at least wrap_span
  // bytes: at most size / wrap_span (64 for a 256 MiB segment) times the bytes written, 2^64
  // lasting years of any stream.
  static constexpr size_t kWrapSpan = size_t{4} << 20;
  static constexpr uint64_t kLapRegions = 64;
  static constexpr uint64_t kLapHeld = 4;
  explicit ShmRingWriter(std::shared_ptr<ShmSegment> segment, size_t wrap_span = kWrapSpan);
  ~ShmRingWriter() override;

  // Room for `bytes` (> 0) at a 64-byte aligned offset, or nullptr when the unreleased
  // regions leave none (or bytes exceeds the segment) or an Allocate buffer not sent yet lies
  // ahead (it could then no longer go in place); fills *out. The region counts as sent.
  uint8_t* Reserve(size_t bytes, proto::ShmPayload* out) override;
  // A buffer of `bytes` (> 0) in the ring for a step being built (64-byte aligned, not
  // zero-filled, host memory), or nullptr when there is no room now (the caller then uses
  // ordinary memory; nothing waits). Its region is not reused while the buffer lives. The
  // buffer keeps the segment mapped; it may outlive the writer.
  std::shared_ptr<TensorBuffer> Allocate(size_t bytes);
  // Whether the numeric tensors `tensors` lie in this ring's buffers at the frame offsets `at`
  // (tensors[0] at at[0] == 0) of one region of `extent` bytes; its ring position if so.
  std::optional<uint64_t> Locate(absl::Span<const Tensor* const> tensors,
                                 absl::Span<const size_t> at, size_t extent) const;
  // Locate, and the region may be sent now (after every region sent before): fills *out,
  // counts the region as sent and returns true; false (nothing changes) otherwise.
  bool InPlace(absl::Span<const Tensor* const> tensors, absl::Span<const size_t> at,
               size_t extent, proto::ShmPayload* out) override;
  // Whether `t` (numeric) views one of this ring's Allocate buffers.
  bool Holds(const Tensor& t) const;
  // The consumer released every region up to `position` (CreditGrant.shm_released).
  // INVALID_ARGUMENT when it goes backwards or beyond what was sent: the consumer cannot
  // make the worker write over a region it still holds, nor outside the segment.
  absl::Status Release(uint64_t position);

  const std::shared_ptr<ShmSegment>& segment() const { return segment_; }
  uint64_t written() const;
  uint64_t released() const;
  // Buffers from Allocate alive now (tests).
  size_t live_buffers() const;

 private:
  struct State;
  class RingBuffer;
  const std::shared_ptr<ShmSegment> segment_;
  const std::shared_ptr<State> state_;
};

// The consumer's side. Thread-safe: Resolve runs on the stream's read, the regions are
// released from whatever thread drops a trainer's last tensor.
class ShmRingReader : public SharedPayloadSource {
 public:
  // `pin`, when set, page-locks the segment for its devices (DeviceMemory::RegisterHostMemory)
  // while it is mapped; the regions are then kPinnedHost buffers, which a device prefetcher
  // copies from with no staging. A refusal leaves them ordinary host memory.
  explicit ShmRingReader(std::shared_ptr<ShmSegment> segment,
                         std::shared_ptr<DeviceMemory> pin = nullptr);
  ~ShmRingReader() override;
  bool pinned() const;

  // The frame buffer of `payload`: a view of the segment that keeps the segment mapped while
  // it lives and releases its region when destroyed. DATA_LOSS naming the values when the
  // region is unaligned, lies outside the segment, or its ring_end does not follow the last
  // one (a region the worker could not have written without overwriting a held one).
  absl::StatusOr<std::shared_ptr<TensorBuffer>> Resolve(const proto::ShmPayload& payload) override;
  // The ring position up to which every region is released (for CreditGrant.shm_released).
  uint64_t released() const;
  // Regions resolved and not yet released (tests).
  size_t held() const;

 private:
  class Region;
  struct State;
  const std::shared_ptr<State> state_;
};

}  // namespace sluice

#endif  // SLUICE_CORE_RPC_SHM_RING_H_
