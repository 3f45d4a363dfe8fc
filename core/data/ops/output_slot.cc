#include "core/data/ops/output_slot.h"

#include <atomic>
#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

#include "core/tensor/uninitialized_tensor.h"

namespace sluice {
namespace {

struct SlotState {
  const Iterator* offered_to = nullptr;
  std::optional<OutputSlot> offered;
  std::optional<OutputSlot> fn_slot;
};

SlotState& State() {
  thread_local SlotState state;
  return state;
}

std::atomic<int64_t> rows_in_place{0};
std::atomic<int64_t> rows_copied{0};
std::atomic<int64_t> buffers_reused{0};
std::atomic<int64_t> buffers_allocated{0};

}  // namespace

BatchSlotCounts BatchSlotCountsSoFar() {
  BatchSlotCounts c;
  c.rows_in_place = rows_in_place.load(std::memory_order_relaxed);
  c.rows_copied = rows_copied.load(std::memory_order_relaxed);
  c.buffers_reused = buffers_reused.load(std::memory_order_relaxed);
  c.buffers_allocated = buffers_allocated.load(std::memory_order_relaxed);
  return c;
}

ScopedSlotOffer::ScopedSlotOffer(const Iterator* to, std::optional<OutputSlot> slot)
    : saved_to_(State().offered_to), saved_slot_(std::move(State().offered)) {
  State().offered_to = slot.has_value() ? to : nullptr;
  State().offered = std::move(slot);
}

ScopedSlotOffer::~ScopedSlotOffer() {
  State().offered_to = saved_to_;
  State().offered = std::move(saved_slot_);
}

void ForwardSlotOffer(const Iterator* wrapper, const Iterator* inner) {
  if (State().offered_to == wrapper && wrapper != nullptr) State().offered_to = inner;
}

std::optional<OutputSlot> TakeSlotOffer(const Iterator* self) {
  SlotState& s = State();
  if (s.offered_to != self || self == nullptr) return std::nullopt;
  s.offered_to = nullptr;
  std::optional<OutputSlot> slot = std::move(s.offered);
  s.offered.reset();
  return slot;
}

ScopedFnSlot::ScopedFnSlot(std::optional<OutputSlot> slot) : saved_(std::move(State().fn_slot)) {
  State().fn_slot = std::move(slot);
}

ScopedFnSlot::~ScopedFnSlot() { State().fn_slot = std::move(saved_); }

std::optional<Tensor> TakeFnSlot(DType dtype, const Shape& shape) {
  std::optional<OutputSlot>& slot = State().fn_slot;
  if (!slot.has_value() || slot->row.dtype() != dtype || slot->row.shape() != shape) {
    return std::nullopt;
  }
  Tensor row = std::move(slot->row);
  slot.reset();
  return row;
}

void BatchSlots::BeginBatch() {
  stacked_.reset();
  placed_ = 0;
  placing_ = true;
  if (leaf_ < 0) return;
  TakeStacked();
}

bool BatchSlots::TakeStacked() {
  const int64_t reused = pool_->reused();
  absl::StatusOr<Tensor> t = pool_->Take(dtype_, shape_.Prepend(batch_size_), what_);
  if (!t.ok()) return false;
  stacked_ = *std::move(t);
  stacked_reused_ = pool_->reused() > reused;
  return true;
}

void BatchSlots::Learn(const Element& first) {
  if (!planned_) {
    planned_ = true;
    const std::vector<Tensor> leaves = first.Flatten();
    int64_t largest = kMinBytes - 1;
    for (size_t i = 0; i < leaves.size(); ++i) {
      const Tensor& t = leaves[i];
      if (t.dtype() == DType::kString || static_cast<int64_t>(t.byte_size()) <= largest) continue;
      largest = static_cast<int64_t>(t.byte_size());
      leaf_ = static_cast<int>(i);
      dtype_ = t.dtype();
      shape_ = t.shape();
    }
    if (leaf_ >= 0) TakeStacked();
  }
}

void BatchSlots::Place(int64_t row, Element* element) {
  if (!stacked_.has_value() || !placing_ || row < 0 || row >= batch_size_) return;
  std::vector<Tensor> leaves = element->Flatten();
  if (leaf_ >= static_cast<int>(leaves.size())) return;
  const Tensor& src = leaves[static_cast<size_t>(leaf_)];
  if (src.dtype() != dtype_ || src.shape() != shape_) return;
  Tensor dst = stacked_->Index(row);
  if (src.raw_data() == dst.raw_data()) return;  // the fn wrote it there
  // Addresses as integers: a leaf may lie in any other buffer.
  const uintptr_t begin = reinterpret_cast<uintptr_t>(stacked_->raw_data());
  const uintptr_t end = begin + stacked_->byte_size();
  for (const Tensor& t : leaves) {
    if (t.dtype() == DType::kString || t.byte_size() == 0) continue;  // no bytes of their own
    const uintptr_t p = reinterpret_cast<uintptr_t>(t.raw_data());
    if (p >= begin && p < end) {
      // Written for another row, or under another leaf (step 5 of the protocol): this batch's
      // rows are left to Stacked from here on, which reads such rows before it writes any.
      placing_ = false;
      return;
    }
  }
  std::memcpy(dst.mutable_raw_data(), src.raw_data(), src.byte_size());
  leaves[static_cast<size_t>(leaf_)] = std::move(dst);
  absl::StatusOr<Element> placed = Element::Pack(*element, std::move(leaves));
  if (!placed.ok()) return;  // the same structure: cannot fail; the row is no one's then
  *element = *std::move(placed);
  ++placed_;
}

ScopedSlotOffer BatchSlots::Offer(int64_t row) const {
  if (!stacked_.has_value() || row >= batch_size_) return ScopedSlotOffer(input_, std::nullopt);
  return ScopedSlotOffer(input_, OutputSlot{stacked_->Index(row), *stacked_, row, nullptr});
}

std::optional<Tensor> BatchSlots::Stacked(int leaf, const std::vector<Tensor>& column) {
  if (leaf != leaf_ || static_cast<int64_t>(column.size()) != batch_size_ || column.empty() ||
      column[0].dtype() != dtype_ || column[0].shape() != shape_) {
    return std::nullopt;
  }
  if (!stacked_.has_value()) {
    // The first batch (no slots offered yet) is stacked into the pool's memory too, so the
    // second is written into it once released.
    if (!TakeStacked()) return std::nullopt;
  }
  Tensor out = *std::move(stacked_);
  stacked_.reset();
  const int64_t placed = std::exchange(placed_, 0);  // copied, not written in place by the fn
  const size_t row_bytes = out.Index(0).byte_size();
  // Addresses as integers: a row may lie in any other buffer.
  const uintptr_t begin = reinterpret_cast<uintptr_t>(out.raw_data());
  const uintptr_t end = begin + row_bytes * static_cast<size_t>(batch_size_);
  // A row that views another row of `out` (written there for another position) is read
  // before any row is overwritten.
  std::vector<Tensor> moved(column.size());
  for (int64_t row = 0; row < batch_size_; ++row) {
    const Tensor& src = column[static_cast<size_t>(row)];
    const uintptr_t p = reinterpret_cast<uintptr_t>(src.raw_data());
    if (p >= begin && p < end && p != begin + row_bytes * static_cast<size_t>(row)) {
      absl::StatusOr<Tensor> copy = TryAllocateUninitialized(dtype_, shape_, what_);
      if (!copy.ok()) return std::nullopt;  // `out` untouched: stacked as usual
      std::memcpy(copy->mutable_raw_data(), src.raw_data(), row_bytes);
      moved[static_cast<size_t>(row)] = *std::move(copy);
    }
  }
  int64_t in_place = 0;
  for (int64_t row = 0; row < batch_size_; ++row) {
    Tensor dst = out.Index(row);
    const Tensor& src = moved[static_cast<size_t>(row)].valid()
                            ? moved[static_cast<size_t>(row)]
                            : column[static_cast<size_t>(row)];
    if (src.raw_data() != dst.raw_data()) {
      std::memcpy(dst.mutable_raw_data(), src.raw_data(), src.byte_size());
    } else {
      ++in_place;
    }
  }
  (stacked_reused_ ? buffers_reused : buffers_allocated).fetch_add(1, std::memory_order_relaxed);
  rows_in_place.fetch_add(in_place - placed, std::memory_order_relaxed);
  rows_copied.fetch_add(batch_size_ - in_place + placed, std::memory_order_relaxed);
  return out;
}

}  // namespace sluice
