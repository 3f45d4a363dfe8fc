#include "core/data/ops/shuffle_iterator.h"

#include <algorithm>
#include <cstdint>
#include <random>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/data/budgeted_vector.h"
#include "core/data/memory_budget.h"
#include "core/data/op_iterator.h"
#include "core/util/status_macros.h"

namespace sluice {
namespace {

uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

class ShuffleIterator : public OpIterator {
 public:
  ShuffleIterator(std::string label, std::unique_ptr<Iterator> input, int64_t buffer_size,
                  uint64_t generator_seed)
      : OpIterator(std::move(label)),
        input_(std::move(input)),
        buffer_size_(buffer_size),
        rng_(generator_seed),
        held_(OpIterator::label()),
        buffer_(&held_, std::min<int64_t>(buffer_size, kChunkSlots)) {}

 protected:
  absl::Status GetNextInternal(Element* out, bool* end_of_sequence) override {
    while (!input_ended_ && buffer_.size() < buffer_size_) {
      Element e;
      bool end = false;
      absl::Status s = input_->GetNext(&e, &end);
      if (!s.ok()) return s;
      if (end) {
        input_ended_ = true;
        break;
      }
      const int64_t footprint = ElementOverhead(e);  // the payload is the allocator's
      RETURN_IF_ERROR(held_.Grow(footprint));
      absl::Status pushed = buffer_.PushBack(Slot{std::move(e), footprint});
      if (!pushed.ok()) {
        held_.Shrink(footprint);
        return pushed;
      }
    }
    if (buffer_.empty()) {
      *end_of_sequence = true;
      return absl::OkStatus();
    }
    const int64_t slot = static_cast<int64_t>(UniformBelow(rng_, buffer_.size()));
    *out = std::move(buffer_[slot].element);
    // The slot is refilled on the next call; moving the last element into it keeps the buffer
    // dense, which only relabels slots and does not change the distribution.
    held_.Shrink(buffer_[slot].footprint);
    if (slot + 1 != buffer_.size()) buffer_[slot] = std::move(buffer_.back());
    buffer_.PopBack();
    return absl::OkStatus();
  }

 private:
  std::unique_ptr<Iterator> input_;
  const int64_t buffer_size_;
  // A buffered element and its ElementOverhead (what held_ was charged for it).
  struct Slot {
    Element element;
    int64_t footprint = 0;
  };
  // Slots per chunk of the buffer's storage (core/data/budgeted_vector.h): ~0.7 MB of slots, so
  // a huge buffer_size grows in steps the budget sees, and a small one allocates what it holds.
  static constexpr int64_t kChunkSlots = 4096;

  std::mt19937_64 rng_;
  // From the process's memory budget: the elements' ElementOverhead and buffer_'s storage.
  MemoryReservation held_;
  BudgetedVector<Slot> buffer_;  // declared after held_, which it charges
  bool input_ended_ = false;
};

}  // namespace

uint64_t UniformBelow(std::mt19937_64& gen, uint64_t n) {
  const uint64_t limit = UINT64_MAX - UINT64_MAX % n;
  uint64_t x;
  do {
    x = gen();
  } while (x >= limit);
  return x % n;
}

uint64_t ShuffleIterationSeed(uint64_t seed, int64_t iteration) {
  return SplitMix64(SplitMix64(seed) ^ SplitMix64(static_cast<uint64_t>(iteration) + 0x5eed));
}

absl::StatusOr<std::unique_ptr<Iterator>> NewShuffleIterator(std::string label,
                                                             std::unique_ptr<Iterator> input,
                                                             int64_t buffer_size,
                                                             uint64_t generator_seed) {
  if (buffer_size <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(label, ": buffer_size must be positive, got ", buffer_size));
  }
  return std::unique_ptr<Iterator>(
      new ShuffleIterator(std::move(label), std::move(input), buffer_size, generator_seed));
}

}  // namespace sluice
