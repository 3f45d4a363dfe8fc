// The shared-memory ring of one StreamSteps call (docs/SERVICE.md "Shared memory"): the worker
// writes each frame's numeric tensor bytes into a region of a ShmSegment (ShmRingWriter, the
// encoder's SharedPayloadSink) and the frame header says where (proto ShmPayload); the consumer
// wraps that region as the frame's buffer, so the decoded tensors are views of the segment
// (ShmRingReader, the decoder's SharedPayloadSource), and reports back, on its credit grants,
// the ring position up to which every region has been released (the last tensor viewing it
// dropped). The worker reuses a region only once released, so a trainer's tensors are never
// overwritten (DESIGN.md invariant 9); a frame finding no room goes inline over the stream.
//
// Positions count bytes written since the ring began, padding included (a region never wraps:
// when it would, the rest of the segment is skipped); a region starts at a multiple of 64.
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

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "core/device/device_memory.h"
#include "core/rpc/shm_segment.h"
#include "core/rpc/step_frame.h"

namespace sluice {

// What this process's rings did (process-wide, for metrics and tests): frames whose payload
// went through a segment, written (worker) and resolved (consumer), and the rings alive now.
struct ShmRingCounts {
  int64_t frames_written = 0;
  int64_t frames_read = 0;
  int64_t writers_alive = 0;
  int64_t readers_alive = 0;
};
ShmRingCounts ProcessShmRingCounts();

// The worker's side. Not thread-safe (the stream calls it under its own lock).
class ShmRingWriter : public SharedPayloadSink {
 public:
  explicit ShmRingWriter(std::shared_ptr<ShmSegment> segment);
  ~ShmRingWriter() override;

  // Room for `bytes` (> 0) at a 64-byte aligned offset, or nullptr when the unreleased
  // regions leave none (or bytes exceeds the segment); fills *out.
  uint8_t* Reserve(size_t bytes, proto::ShmPayload* out) override;
  // The consumer released every region up to `position` (CreditGrant.shm_released).
  // INVALID_ARGUMENT when it goes backwards or beyond what was written: the consumer cannot
  // make the worker write over a region it still holds, nor outside the segment.
  absl::Status Release(uint64_t position);

  const std::shared_ptr<ShmSegment>& segment() const { return segment_; }
  uint64_t written() const { return written_; }
  uint64_t released() const { return released_; }

 private:
  const std::shared_ptr<ShmSegment> segment_;
  uint64_t written_ = 0;
  uint64_t released_ = 0;
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
