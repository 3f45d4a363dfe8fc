// CursorCounts: the multiset of a coordinated StepBuffer's cursors (the task step each consumer
// reads next), kept as counts per task step so that the lowest cursor, which decides what the
// buffer may release, is known at once instead of by scanning every consumer.
//
// Layout: counts_[i] is the number of cursors at task step base_ + i, from the lowest cursor
// (base_, whose count is never 0) up to the highest one within reach. Costs:
//   - min(): O(1).
//   - Move(c, c + k), a consumer reading k steps: O(k) amortized, whatever the number of
//     cursors. The cursor's count moves from one slot to another; the minimum rises past empty
//     slots, and every slot is created once (by a cursor reaching it) and passed once, so the
//     scans of empty slots add O(1) per step read.
//   - Insert below the minimum (StepBuffer: a consumer re-attaching into the retention window):
//     O(min - cursor), as many slots as there are retained steps the buffer re-buffers for it
//     anyway. Inserting more than kMaxGap below it, or more than kMaxGap above the highest
//     counted slot (a consumer attaching far ahead of where the producer is, as after a
//     reassignment), keeps the far cursors in an ordered map instead (O(log) per far cursor),
//     from which they rejoin the counts when those reach them; so the memory held is O(the
//     span between cursors within reach + the far cursors), never how far apart they are.
//
// Example, cursors {3, 3, 5}: base_ 3, counts_ [2, 0, 1]. Move(3, 4): [1, 1, 1]. Move(3, 4):
// [0, 2, 1], the empty front slot leaves: base_ 4, counts_ [2, 1].
//
// Not thread-safe: the owner's lock guards it (StepBuffer::mu_).
#ifndef SLUICE_WORKER_CURSOR_COUNTS_H_
#define SLUICE_WORKER_CURSOR_COUNTS_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <limits>
#include <map>

namespace sluice {

class CursorCounts {
 public:
  // min() of an empty multiset; equal to StepBuffer's kDetached, so "no cursor" holds nothing.
  static constexpr int64_t kNone = std::numeric_limits<int64_t>::max();
  // A cursor this many slots beyond the counted range or more is kept apart (see above).
  static constexpr int64_t kMaxGap = 4096;

  // Adds a cursor at `cursor` (< kNone).
  void Insert(int64_t cursor);
  // Removes one cursor at `cursor`; requires one there.
  void Erase(int64_t cursor);
  // Moves one cursor from `from` (requires one there) to `to`.
  void Move(int64_t from, int64_t to);

  // The lowest cursor, or kNone when there is none.
  int64_t min() const { return counts_.empty() ? kNone : base_; }
  // How many cursors there are.
  int64_t size() const { return size_; }

  // Slots and map entries touched so far (each counted once per change or scan step): the
  // work the structure has done, which tests compare across numbers of cursors (the work per
  // step must not grow with them) without timing anything.
  int64_t TEST_ops() const { return ops_; }

 private:
  // Extends counts_ up to `cursor` (within kMaxGap of its end), taking in far cursors reached.
  void GrowBackTo(int64_t cursor);
  // Restores the invariants after a count dropped: no empty slot at either end of counts_, and
  // counts_ empty only if far_ is.
  void Normalize();
  // Moves every counted cursor into far_ (counts_ becomes empty).
  void SpillToFar();

  int64_t base_ = 0;
  std::deque<uint32_t> counts_;
  // The far cursors, by task step: every key is at or beyond base_ + counts_.size(). Empty
  // whenever counts_ is.
  std::map<int64_t, uint32_t> far_;
  int64_t size_ = 0;
  int64_t ops_ = 0;
};

}  // namespace sluice

#endif  // SLUICE_WORKER_CURSOR_COUNTS_H_
