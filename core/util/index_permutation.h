// IndexPermutation: a seeded bijection of the record positions [0, n) of one epoch, the order a
// global order (core/data/distribute/global_order.h) reads an indexed source in.
//
// O(1) memory and O(1) expected time per position, and the same values on every platform and
// build: no std:: distributions or engines, only 64-bit integer arithmetic.
//
// Algorithm (changing it changes every seeded job's order; tests pin golden values):
//   - Mix(z) is splitmix64's finalizer:
//       z ^= z >> 30; z *= 0xbf58476d1ce4e5b9; z ^= z >> 27; z *= 0x94d049bb133111eb;
//       z ^= z >> 31.
//   - The epoch key is K = Mix(seed ^ Mix(epoch ^ 0x9e3779b97f4a7c15)).
//   - A keyed permutation of [0, m) with key k is a balanced Feistel network of 8 rounds over
//     the smallest domain of 2^(2h) >= m values (h bits per half), with cycle walking (a value
//     >= m is encrypted again until it falls below m; at most 4 passes expected). Round r uses
//     the round key Mix(k + (r + 1) * 0x9e3779b97f4a7c15) and the round function
//     Mix(right ^ round_key) masked to h bits; the new right half is left ^ F(right).
//   - SHUFFLE_FULL: the keyed permutation of [0, n) with key K.
//   - SHUFFLE_BLOCK with block size b: blocks [k*b, (k+1)*b) (the last one partial) are visited
//     in the order of the keyed permutation of [0, ceil(n/b)) with key Mix(K ^ 1), and within
//     block k the positions follow the keyed permutation of [0, size of block k) with key
//     Mix(Mix(K ^ 2) ^ k). Output positions are laid out block after block, so a reader of
//     consecutive positions stays within one block for up to b records.
//   - SHUFFLE_NONE: the identity; seed and epoch are ignored.
//
// Thread safety: immutable after Create; a const IndexPermutation may be shared.
#ifndef SLUICE_CORE_INDEX_PERMUTATION_H_
#define SLUICE_CORE_INDEX_PERMUTATION_H_

#include <array>
#include <cstdint>

#include "absl/status/statusor.h"
#include "proto/dataset.pb.h"

namespace sluice {

namespace index_permutation_internal {

// The keyed Feistel permutation of [0, size) described above.
class FeistelPermutation {
 public:
  static constexpr int kRounds = 8;

  FeistelPermutation() = default;
  FeistelPermutation(uint64_t size, uint64_t key);

  uint64_t size() const { return size_; }
  uint64_t Forward(uint64_t x) const;  // requires x < size()
  uint64_t Inverse(uint64_t y) const;  // requires y < size(); Inverse(Forward(x)) == x

 private:
  uint64_t EncryptOnce(uint64_t x) const;
  uint64_t DecryptOnce(uint64_t y) const;

  uint64_t size_ = 0;
  int half_bits_ = 0;
  uint64_t half_mask_ = 0;
  std::array<uint64_t, kRounds> round_keys_{};
};

// splitmix64's finalizer.
uint64_t Mix(uint64_t z);

}  // namespace index_permutation_internal

class IndexPermutation {
 public:
  // INVALID_ARGUMENT for n < 0, block_size < 1 with SHUFFLE_BLOCK, an unknown mode.
  // SHUFFLE_NONE: identity. SHUFFLE_FULL: a permutation of every position.
  // SHUFFLE_BLOCK: blocks [k*b, (k+1)*b) (last one partial) visited in a seeded order, each
  // block's positions permuted within the block (reading stays sequential per block).
  // block_size is ignored by the other modes; epoch must be >= 0.
  static absl::StatusOr<IndexPermutation> Create(int64_t n, proto::ShuffleMode mode,
                                                 uint64_t seed, int64_t epoch,
                                                 int64_t block_size);

  int64_t size() const { return n_; }
  // The record position visited at output position `position`; requires
  // 0 <= position < size().
  int64_t operator()(int64_t position) const;

 private:
  IndexPermutation() = default;

  int64_t n_ = 0;
  proto::ShuffleMode mode_ = proto::SHUFFLE_NONE;
  // SHUFFLE_FULL: over positions. SHUFFLE_BLOCK: over blocks.
  index_permutation_internal::FeistelPermutation outer_;
  int64_t block_size_ = 1;
  int64_t num_blocks_ = 0;
  int64_t last_block_size_ = 0;  // the size of block num_blocks_ - 1
  int64_t last_block_slot_ = 0;  // the output slot where the last block is visited
  uint64_t inner_key_ = 0;
};

}  // namespace sluice

#endif  // SLUICE_CORE_INDEX_PERMUTATION_H_
