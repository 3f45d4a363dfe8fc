// StepPlacement: the worker batching straight into a co-located consumer's shared-memory ring
// (docs/SERVICE.md "Shared memory", core/rpc/shm_ring.h). While a stream with a ring is
// attached to its task's runner (TaskRunner::AttachPlacement), each step the runner produces
// has its numeric tensors in the ring, laid out as the stream's frame layout wants them (each
// at a 64-byte aligned offset, in piece and leaf order), so that sending the step is only its
// header (ShmRingWriter::InPlace). A placement is a StepOutputAllocator
// (core/tensor/step_output_allocator.h), which the runner makes the producing thread's current
// one around each step: a producer that builds its tensors through AllocateStepOutput (a
// pipeline's last op, fixed_length_record_dataset reading records for map(decode_raw) say)
// builds them there directly; Place copies the rest (a pipeline's output built elsewhere) once,
// on the producer's thread, not under the stream's lock. Strings stay where they are (they travel
// inline). When the ring has no room, a step is left as it was (the stream copies it or
// sends it over TCP): nothing waits for room.
//
//   auto placement = std::make_shared<StepPlacement>(ring);  // the stream's ShmRingWriter
//   runner->AttachPlacement(placement);
//   ... the runner: StepOutputAllocator::Scope scope(placement.get()); produce(&step);
//       placement->Place(&step);
//   ... the stream, when it ends (off its lock: this waits for a step being produced):
//   runner->DetachPlacement(placement.get());
//
// A placed step's ring region is reused only once the worker dropped the step (acknowledged)
// and the consumer released it. When the stream ends, DetachPlacement moves the steps still
// held by the task (queued, or kept for the consumer's reconnect) to ordinary memory, so that
// the segment goes with the stream and its consumer's views, as without placement; a frame a
// stream is writing at that moment keeps its steps (and the segment) until it is written.
// Thread-safe.
#ifndef SLUICE_WORKER_STEP_PLACEMENT_H_
#define SLUICE_WORKER_STEP_PLACEMENT_H_

#include <cstddef>
#include <cstdint>
#include <memory>

#include "core/rpc/shm_ring.h"
#include "core/tensor/step_output_allocator.h"
#include "sluice/tensor.h"
#include "worker/step_buffer.h"

namespace sluice {

// What this process's placements did with the steps they placed (process-wide, for metrics
// and tests): steps found in the ring already (built there: no copy), steps copied there, and
// steps copied back out of it when their stream ended while the task still held them (Unplaced).
struct StepPlacementCounts {
  int64_t steps_built_in_ring = 0;
  int64_t steps_copied_to_ring = 0;
  int64_t steps_copied_out = 0;
};
StepPlacementCounts ProcessStepPlacementCounts();

// Where a step's numeric bytes (its tensors other than strings, of a size > 0) are with
// respect to a ring: none (a step of strings or empty tensors), some or all in the ring's
// Allocate buffers (a step placed there is placed whole; one built there in part stays so when
// the ring had no room for the rest), or none of them there.
enum class RingResidence { kNoNumericBytes, kInRing, kOutsideRing };
// The walk that StepPlacement::Unplaced (which copies a step out of the ring unless it has no
// numeric bytes there) and the stream's frame split (which sends the steps built in the ring
// apart from the others, a step without numeric bytes with the former) both ask; it stops at
// the first numeric tensor in the ring. Thread-safe.
RingResidence StepRingResidence(const ShmRingWriter& ring, const TaskStep& step);

class StepPlacement : public StepOutputAllocator {
 public:
  explicit StepPlacement(std::shared_ptr<ShmRingWriter> ring) : ring_(std::move(ring)) {}

  // Puts `step`'s numeric tensors into the ring (one region for the step) unless they lie
  // there already in the frame layout; leaves the step as it was when the ring has no room.
  void Place(TaskStep* step) const;
  // A copy of `step` with its numeric tensors in the ring (a step made before the placement
  // attached: TaskRunner::AttachPlacement), `step` itself when it has none outside the ring,
  // or null when the ring has no room for it.
  std::shared_ptr<const TaskStep> Placed(const std::shared_ptr<const TaskStep>& step) const;
  // `step` itself when none of its tensors is in the ring, else a copy of it whose tensors
  // that were are in ordinary memory (charged to the memory budget; a tensor the budget
  // refuses stays in the ring, keeping the segment mapped while it lives).
  std::shared_ptr<const TaskStep> Unplaced(const std::shared_ptr<const TaskStep>& step) const;
  // A buffer of `bytes` (> 0) in the ring, or nullptr when it has no room.
  std::shared_ptr<TensorBuffer> Allocate(size_t bytes) const { return ring_->Allocate(bytes); }
  // The caps of the task's step buffer while placing here (StepBuffer::Cap, set by
  // TaskRunner::AttachPlacement). The producer runs ahead of the stream by at most half the
  // ring; the other half holds the steps sent and not yet both acknowledged and released (the
  // consumer's window, the ring being sized at twice that), among them the steps retained for
  // a reconnect, at most a quarter of the ring. A producer running further ahead, or a
  // retention window larger than the ring, would fill the ring with steps that wait, leave the
  // next steps in ordinary memory, and those would go by TCP. Small steps are capped in steps
  // too (kAheadSteps queued, kRetainedSteps retained): queued and retained at half and a
  // quarter of a 170 MiB ring, 1 KiB steps were costed, trimmed and freed ~100k steps after
  // they were made, each a cache miss (bench/RESULTS.md, kibring), and what the task held in
  // the ring kept ShmRingWriter's early wrap from ever shortening its laps; now the task holds
  // a few MiB of them. Large steps are bound by the bytes, as before.
  StepBufferCaps buffer_caps() const {
    const size_t ring = ring_->segment()->size();
    return StepBufferCaps{.buffered_bytes = ring / 2,
                          .buffered_steps = kAheadSteps,
                          .retained_bytes = ring / 4,
                          .retained_steps = kRetainedSteps};
  }
  // 64 frames of 64 steps, 4 MiB of 1 KiB steps: enough to keep the stream busy while the
  // producer waits for its turn on a core (with 1024 the producer and the stream woke each
  // other ~30% more often per step on the 1 KiB bench, and the consumer paid for it).
  static constexpr size_t kAheadSteps = 4096;
  // A reconnect from further back replays its steps, as one from beyond the window always did.
  static constexpr size_t kRetainedSteps = 1024;
  // StepOutputAllocator: the same as Allocate.
  std::shared_ptr<TensorBuffer> AllocateStepOutput(size_t bytes) const override {
    return Allocate(bytes);
  }

 private:
  const std::shared_ptr<ShmRingWriter> ring_;
};

}  // namespace sluice

#endif  // SLUICE_WORKER_STEP_PLACEMENT_H_
