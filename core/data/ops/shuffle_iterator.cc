#include "core/data/ops/shuffle_iterator.h"

#include <algorithm>
#include <cstdint>
#include <random>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
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
        held_(OpIterator::label()) {}

 protected:
  absl::Status GetNextInternal(Element* out, bool* end_of_sequence) override {
    while (!input_ended_ && static_cast<int64_t>(buffer_.size()) < buffer_size_) {
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
      buffer_.push_back(std::move(e));
      footprints_.push_back(footprint);
    }
    if (buffer_.empty()) {
      *end_of_sequence = true;
      return absl::OkStatus();
    }
    size_t slot = static_cast<size_t>(UniformBelow(rng_, buffer_.size()));
    *out = std::move(buffer_[slot]);
    // The slot is refilled on the next call; moving the last element into it keeps the buffer
    // dense, which only relabels slots and does not change the distribution.
    held_.Shrink(footprints_[slot]);
    if (slot + 1 != buffer_.size()) {
      buffer_[slot] = std::move(buffer_.back());
      footprints_[slot] = footprints_.back();
    }
    buffer_.pop_back();
    footprints_.pop_back();
    return absl::OkStatus();
  }

 private:
  std::unique_ptr<Iterator> input_;
  const int64_t buffer_size_;
  std::mt19937_64 rng_;
  std::vector<Element> buffer_;
  std::vector<int64_t> footprints_;  // ElementOverhead of each buffer_ slot
  MemoryReservation held_;           // their sum, from the process's memory budget
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
