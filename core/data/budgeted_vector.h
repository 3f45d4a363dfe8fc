// BudgetedVector<T>: an op's buffer of T (shuffle's slots) whose own storage is charged to the
// op's MemoryReservation (core/data/memory_budget.h) before it is allocated, so that a buffer
// sized by a client's value (`shuffle(1000000000)`) is refused by the budget, naming the op,
// instead of growing outside it until the heap throws std::bad_alloc.
//
// Why not a std::vector: a vector grows by doubling, and while it moves its slots it holds the
// old and the new storage at once, three times what it holds; none of it passes through the
// budget, which charges the elements' payloads and structure (ElementOverhead), not the slots
// that hold them. Here the storage is a list of fixed-size chunks of `chunk_slots` slots, each
// charged (chunk_slots x sizeof(T)) before it is allocated and released when it is freed: the
// storage is never more than one chunk ahead of what the buffer holds, nothing is ever moved to
// grow, and nothing is reserved up front, however large the bound the op was given.
//
//   MemoryReservation held("op 2 (shuffle)");
//   BudgetedVector<Slot> slots(&held, /*chunk_slots=*/std::min<int64_t>(buffer_size, 4096));
//   RETURN_IF_ERROR(slots.PushBack(std::move(slot)));  // RESOURCE_EXHAUSTED naming the op
//
// Thread safety: none; owned by one iterator, like its reservation.
#ifndef SLUICE_CORE_DATA_BUDGETED_VECTOR_H_
#define SLUICE_CORE_DATA_BUDGETED_VECTOR_H_

#include <algorithm>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "core/data/memory_budget.h"

namespace sluice {

template <typename T>
class BudgetedVector {
 public:
  // `held` (borrowed; must outlive this) is charged for the storage. `chunk_slots` < 1 counts
  // as 1; an op passes min(its bound, a few thousand), so a small buffer allocates no more
  // than it can hold.
  BudgetedVector(MemoryReservation* held, int64_t chunk_slots)
      : held_(held), chunk_slots_(std::max<int64_t>(chunk_slots, 1)) {}
  ~BudgetedVector() { Clear(); }

  BudgetedVector(const BudgetedVector&) = delete;
  BudgetedVector& operator=(const BudgetedVector&) = delete;

  // Appends `value`. When it needs a new chunk, the chunk is charged first:
  // RESOURCE_EXHAUSTED from the reservation (naming its op and the limit) and nothing added
  // when the budget refuses.
  absl::Status PushBack(T value) {
    if (size_ == capacity()) {
      absl::Status s = held_->Grow(ChunkBytes());
      if (!s.ok()) return s;
      auto chunk = std::make_unique<std::vector<T>>();
      chunk->reserve(static_cast<size_t>(chunk_slots_));  // exactly once: never reallocated
      chunks_.push_back(std::move(chunk));
    }
    chunks_[static_cast<size_t>(size_ / chunk_slots_)]->push_back(std::move(value));
    ++size_;
    return absl::OkStatus();
  }

  // Removes the last slot; frees (and gives back) a chunk once the one before it has room
  // again, so a buffer that shrinks and grows around a chunk boundary does not thrash.
  // Requires !empty().
  void PopBack() {
    chunks_[static_cast<size_t>((size_ - 1) / chunk_slots_)]->pop_back();
    --size_;
    while (capacity() - size_ > chunk_slots_) {
      chunks_.pop_back();
      held_->Shrink(ChunkBytes());
    }
  }

  // Requires 0 <= i < size().
  T& operator[](int64_t i) {
    return (*chunks_[static_cast<size_t>(i / chunk_slots_)])[static_cast<size_t>(i % chunk_slots_)];
  }
  T& back() { return (*this)[size_ - 1]; }

  int64_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  // Slots allocated (and charged): a multiple of chunk_slots, less than size() + 2 chunks.
  int64_t capacity() const { return static_cast<int64_t>(chunks_.size()) * chunk_slots_; }

  // Frees every slot and gives the storage back.
  void Clear() {
    held_->Shrink(static_cast<int64_t>(chunks_.size()) * ChunkBytes());
    chunks_.clear();
    size_ = 0;
  }

 private:
  int64_t ChunkBytes() const { return chunk_slots_ * static_cast<int64_t>(sizeof(T)); }

  MemoryReservation* const held_;
  const int64_t chunk_slots_;
  std::vector<std::unique_ptr<std::vector<T>>> chunks_;  // each reserved to chunk_slots_
  int64_t size_ = 0;
};

}  // namespace sluice

#endif  // SLUICE_CORE_DATA_BUDGETED_VECTOR_H_
