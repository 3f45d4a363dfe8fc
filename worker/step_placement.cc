#include "worker/step_placement.h"

#include <atomic>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "core/tensor/aligned_size.h"
#include "core/tensor/uninitialized_tensor.h"
#include "core/util/streaming_copy.h"

namespace sluice {
namespace {

std::atomic<int64_t> g_steps_built_in_ring{0};
std::atomic<int64_t> g_steps_copied_to_ring{0};
std::atomic<int64_t> g_steps_copied_out{0};

// The step's numeric tensors of size > 0 in frame order, and their offsets in the frame
// layout (core/rpc/step_frame.h: each at a 64-byte aligned offset); the layout's size. Inline
// storage for a few tensors: Place runs once per step, and at 1 KiB steps two heap vectors a
// step were a measurable share of the worker's CPU.
using PlacedTensors = absl::InlinedVector<const Tensor*, 8>;
using PlacedOffsets = absl::InlinedVector<size_t, 8>;
size_t Layout(const TaskStep& step, PlacedTensors* tensors, PlacedOffsets* at) {
  size_t extent = 0;
  for (const std::vector<Tensor>& piece : step.pieces) {
    for (const Tensor& t : piece) {
      if (t.dtype() == DType::kString || t.byte_size() == 0) continue;
      const size_t offset = AlignedSize(extent);
      tensors->push_back(&t);
      at->push_back(offset);
      extent = offset + t.byte_size();
    }
  }
  return extent;
}

}  // namespace

RingResidence StepRingResidence(const ShmRingWriter& ring, const TaskStep& step) {
  RingResidence residence = RingResidence::kNoNumericBytes;
  for (const std::vector<Tensor>& piece : step.pieces) {
    for (const Tensor& t : piece) {
      if (t.dtype() == DType::kString || t.byte_size() == 0) continue;
      if (ring.Holds(t)) return RingResidence::kInRing;
      residence = RingResidence::kOutsideRing;
    }
  }
  return residence;
}

void StepPlacement::Place(TaskStep* step) const {
  PlacedTensors tensors;
  PlacedOffsets at;
  const size_t extent = Layout(*step, &tensors, &at);
  if (extent == 0) return;
  if (ring_->Locate(tensors, at, extent).has_value()) {
    g_steps_built_in_ring.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  std::shared_ptr<TensorBuffer> region = ring_->Allocate(extent);
  if (region == nullptr) return;  // no room: the stream copies or sends it inline
  g_steps_copied_to_ring.fetch_add(1, std::memory_order_relaxed);
  auto* base = static_cast<uint8_t*>(region->data());
  size_t i = 0;
  for (std::vector<Tensor>& piece : step->pieces) {
    for (Tensor& t : piece) {
      if (t.dtype() == DType::kString || t.byte_size() == 0) continue;
      StreamingCopy(base + at[i], t.raw_data(), t.byte_size());
      absl::StatusOr<Tensor> view = Tensor::Wrap(t.dtype(), t.shape(), region, at[i]);
      if (view.ok()) t = *std::move(view);  // Wrap cannot fail: the region holds the layout
      ++i;
    }
  }
}

std::shared_ptr<const TaskStep> StepPlacement::Placed(
    const std::shared_ptr<const TaskStep>& step) const {
  if (StepRingResidence(*ring_, *step) != RingResidence::kOutsideRing) return step;
  auto copy = std::make_shared<TaskStep>(*step);
  Place(copy.get());
  if (StepRingResidence(*ring_, *copy) != RingResidence::kInRing) return nullptr;  // no room
  return copy;
}

std::shared_ptr<const TaskStep> StepPlacement::Unplaced(
    const std::shared_ptr<const TaskStep>& step) const {
  if (StepRingResidence(*ring_, *step) != RingResidence::kInRing) return step;
  g_steps_copied_out.fetch_add(1, std::memory_order_relaxed);
  auto copy = std::make_shared<TaskStep>(*step);
  for (std::vector<Tensor>& piece : copy->pieces) {
    for (Tensor& t : piece) {
      if (t.dtype() == DType::kString || t.byte_size() == 0 || !ring_->Holds(t)) continue;
      // Not zero-filled: the copy below writes every byte.
      absl::StatusOr<Tensor> moved =
          TryAllocateUninitialized(t.dtype(), t.shape(), "shared memory");
      if (!moved.ok()) continue;  // refused by the budget: stays in the ring
      std::memcpy(moved->mutable_raw_data(), t.raw_data(), t.byte_size());
      t = *std::move(moved);
    }
  }
  return copy;
}

StepPlacementCounts ProcessStepPlacementCounts() {
  StepPlacementCounts c;
  c.steps_built_in_ring = g_steps_built_in_ring.load(std::memory_order_relaxed);
  c.steps_copied_to_ring = g_steps_copied_to_ring.load(std::memory_order_relaxed);
  c.steps_copied_out = g_steps_copied_out.load(std::memory_order_relaxed);
  return c;
}

}  // namespace sluice
