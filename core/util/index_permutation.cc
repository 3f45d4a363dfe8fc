#include "core/util/index_permutation.h"

#include <bit>

#include "absl/strings/str_cat.h"

namespace sluice {
namespace index_permutation_internal {
namespace {

constexpr uint64_t kGolden = 0x9e3779b97f4a7c15ULL;

}  // namespace

uint64_t Mix(uint64_t z) {
  z ^= z >> 30;
  z *= 0xbf58476d1ce4e5b9ULL;
  z ^= z >> 27;
  z *= 0x94d049bb133111ebULL;
  z ^= z >> 31;
  return z;
}

FeistelPermutation::FeistelPermutation(uint64_t size, uint64_t key) : size_(size) {
  if (size_ <= 1) return;  // nothing to permute
  const int bits = std::bit_width(size_ - 1);  // values 0 .. size-1 fit in `bits` bits
  half_bits_ = (bits + 1) / 2;
  half_mask_ = (uint64_t{1} << half_bits_) - 1;
  for (int r = 0; r < kRounds; ++r) {
    round_keys_[static_cast<size_t>(r)] = Mix(key + static_cast<uint64_t>(r + 1) * kGolden);
  }
}

uint64_t FeistelPermutation::EncryptOnce(uint64_t x) const {
  uint64_t left = x >> half_bits_;
  uint64_t right = x & half_mask_;
  for (int r = 0; r < kRounds; ++r) {
    const uint64_t f = Mix(right ^ round_keys_[static_cast<size_t>(r)]) & half_mask_;
    const uint64_t new_right = left ^ f;
    left = right;
    right = new_right;
  }
  return (left << half_bits_) | right;
}

uint64_t FeistelPermutation::DecryptOnce(uint64_t y) const {
  uint64_t left = y >> half_bits_;
  uint64_t right = y & half_mask_;
  for (int r = kRounds - 1; r >= 0; --r) {
    const uint64_t f = Mix(left ^ round_keys_[static_cast<size_t>(r)]) & half_mask_;
    const uint64_t old_left = right ^ f;
    right = left;
    left = old_left;
  }
  return (left << half_bits_) | right;
}

uint64_t FeistelPermutation::Forward(uint64_t x) const {
  if (size_ <= 1) return x;
  // Cycle walking: the network permutes [0, 2^(2h)); the cycle through x returns below size_
  // (at x itself at the latest), and the domain is at most 4 * size_, so 4 passes expected.
  uint64_t y = EncryptOnce(x);
  while (y >= size_) y = EncryptOnce(y);
  return y;
}

uint64_t FeistelPermutation::Inverse(uint64_t y) const {
  if (size_ <= 1) return y;
  uint64_t x = DecryptOnce(y);
  while (x >= size_) x = DecryptOnce(x);
  return x;
}

}  // namespace index_permutation_internal

using index_permutation_internal::FeistelPermutation;
using index_permutation_internal::Mix;

absl::StatusOr<IndexPermutation> IndexPermutation::Create(int64_t n, proto::ShuffleMode mode,
                                                          uint64_t seed, int64_t epoch,
                                                          int64_t block_size) {
  if (n < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("index permutation: n must be >= 0, got ", n));
  }
  if (epoch < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("index permutation: epoch must be >= 0, got ", epoch));
  }
  IndexPermutation p;
  p.n_ = n;
  p.mode_ = mode;
  const uint64_t epoch_key =
      Mix(seed ^ Mix(static_cast<uint64_t>(epoch) ^ 0x9e3779b97f4a7c15ULL));
  switch (mode) {
    case proto::SHUFFLE_NONE:
      return p;
    case proto::SHUFFLE_FULL:
      p.outer_ = FeistelPermutation(static_cast<uint64_t>(n), epoch_key);
      return p;
    case proto::SHUFFLE_BLOCK: {
      if (block_size < 1) {
        return absl::InvalidArgumentError(absl::StrCat(
            "index permutation: block_size must be >= 1 with SHUFFLE_BLOCK, got ", block_size));
      }
      p.block_size_ = block_size;
      p.num_blocks_ = n / block_size + (n % block_size == 0 ? 0 : 1);
      p.last_block_size_ = n == 0 ? 0 : n - (p.num_blocks_ - 1) * block_size;
      p.outer_ = FeistelPermutation(static_cast<uint64_t>(p.num_blocks_), Mix(epoch_key ^ 1));
      p.inner_key_ = Mix(epoch_key ^ 2);
      p.last_block_slot_ =
          p.num_blocks_ == 0
              ? 0
              : static_cast<int64_t>(p.outer_.Inverse(static_cast<uint64_t>(p.num_blocks_ - 1)));
      return p;
    }
    default:
      break;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("index permutation: unknown shuffle mode ", static_cast<int>(mode)));
}

int64_t IndexPermutation::operator()(int64_t position) const {
  switch (mode_) {
    case proto::SHUFFLE_FULL:
      return static_cast<int64_t>(outer_.Forward(static_cast<uint64_t>(position)));
    case proto::SHUFFLE_BLOCK: {
      // Output slots hold blocks in their visiting order; every block but the last is full, so
      // the slots after the last block's are shifted by its (smaller) size.
      const int64_t b = block_size_;
      const int64_t last_start = last_block_slot_ * b;
      int64_t slot, offset;
      if (position < last_start) {
        slot = position / b;
        offset = position % b;
      } else if (position < last_start + last_block_size_) {
        slot = last_block_slot_;
        offset = position - last_start;
      } else {
        const int64_t q = position - last_start - last_block_size_;
        slot = last_block_slot_ + 1 + q / b;
        offset = q % b;
      }
      const int64_t block = static_cast<int64_t>(outer_.Forward(static_cast<uint64_t>(slot)));
      const int64_t size = block == num_blocks_ - 1 ? last_block_size_ : b;
      const FeistelPermutation inner(static_cast<uint64_t>(size),
                                     Mix(inner_key_ ^ static_cast<uint64_t>(block)));
      return block * b + static_cast<int64_t>(inner.Forward(static_cast<uint64_t>(offset)));
    }
    default:
      return position;
  }
}

}  // namespace sluice
