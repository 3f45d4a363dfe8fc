// Output slots: batch() offers the map right below it the memory where the element it asks for
// will be stacked, so that a fn that writes a whole leaf (random_resized_crop, fused or not:
// map_fusion.h) writes it there, and batch() copies nothing for that leaf: no per-element tensor,
// no copy of it.
//
// The protocol, on the consumer's thread (no locks, thread-local state):
//  1. batch takes its stacked tensor for one leaf (the largest numeric leaf of its first
//     element) from its buffer pool (batch_buffer_pool.h: the memory of a batch the consumer has
//     released, so no fresh pages to fault in) and, around its input's GetNext for row i,
//     offers that row: ScopedSlotOffer addressed to its input iterator.
//  2. The profiling wrapper (core/data/op_profile.h) passes an offer addressed to it on to the
//     iterator it wraps (ForwardSlotOffer). No other op passes it on, so an element made for
//     row i can never be buffered (shuffle, prefetch) and come out for another row.
//  3. A sequential map takes the offer addressed to it (TakeSlotOffer) before it pulls its own
//     input, so nothing below it sees the offer, and holds it around its fn call only
//     (ScopedFnSlot). A parallel map in input order (deterministic) takes it too and, since
//     its i-th output from here is row `index + i` of the same stacked tensor, gives each input
//     element it pulls for a row of that batch its row, held around that element's fn call on
//     whichever thread maps it (map_iterator.h). Out of order (deterministic=false) it takes
//     no slots: an element could then finish after its batch was handed out.
//  4. A fn about to allocate an output of exactly the slot's dtype and shape takes the slot
//     (TakeFnSlot: once) instead, writes every value of it, and returns it.
//  5. As each element arrives, batch copies its leaf into its row right away when the fn did
//     not write it there (BatchSlots::Place), so that the copy runs while the map below maps
//     the next elements, not all at once at the batch's end with the map stopped at its bound;
//     only while no element's leaf lies in the stacked tensor elsewhere than its own row (a
//     fn that used its slot for another leaf), else at the end:
//  6. batch stacks that leaf last: a row whose tensor is the slot's row is in place; any other
//     row is copied over it (what was written there is then no one's: the other leaves, which
//     might view it, were stacked first; a row that views another row of the same tensor is
//     read before any row is written).
// Everything else is unchanged: values, errors, memory limits (the slot tensor comes from the
// refusable allocator; where it is refused, batch offers nothing and stacks as before).
//
// Thread safety: all state is the calling thread's; BatchSlotCountsSoFar() is thread-safe.
#ifndef SLUICE_CORE_OUTPUT_SLOT_H_
#define SLUICE_CORE_OUTPUT_SLOT_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/data/iterator.h"
#include "core/data/ops/batch_buffer_pool.h"
#include "sluice/element.h"
#include "sluice/tensor.h"

namespace sluice {

// Where one element's leaf goes: a row of batch's stacked tensor (a view: Tensor::Index).
class BatchDestinations;  // batch_destinations.h

struct OutputSlot {
  Tensor row;
  // In an offer: the stacked tensor of which `row` is row `index` (a parallel map gives the
  // rows after it to the elements it maps ahead). Unset in a fn slot.
  Tensor stacked;
  int64_t index = 0;
  // In an offer of batch()'s bulk path (row and stacked unset): where a parallel map's blocks
  // go (map-and-batch fusion, batch_destinations.h).
  std::shared_ptr<BatchDestinations> destinations;
};

// Process-wide counts of batch()'s offered leaf, over every batch stacked through its slots so
// far: rows found in place and rows copied, batches on a reused buffer and on a fresh one.
struct BatchSlotCounts {
  int64_t rows_in_place = 0;
  int64_t rows_copied = 0;
  int64_t buffers_reused = 0;
  int64_t buffers_allocated = 0;
};
BatchSlotCounts BatchSlotCountsSoFar();

// Offers `slot` to `to` (the caller's input iterator) for this object's lifetime; the offer in
// place before is restored after (a batch nested in a pipeline run inside another's GetNext).
class ScopedSlotOffer {
 public:
  ScopedSlotOffer(const Iterator* to, std::optional<OutputSlot> slot);
  ~ScopedSlotOffer();
  ScopedSlotOffer(const ScopedSlotOffer&) = delete;
  ScopedSlotOffer& operator=(const ScopedSlotOffer&) = delete;

 private:
  const Iterator* saved_to_;
  std::optional<OutputSlot> saved_slot_;
};

// Readdresses an offer made to `wrapper` to `inner` (an iterator that only observes its inner
// one's elements).
void ForwardSlotOffer(const Iterator* wrapper, const Iterator* inner);

// The offer addressed to `self`, taken (no one else sees it); nullopt when none is.
std::optional<OutputSlot> TakeSlotOffer(const Iterator* self);

// Makes `slot` (may be empty) the one TakeFnSlot gives for this object's lifetime.
class ScopedFnSlot {
 public:
  explicit ScopedFnSlot(std::optional<OutputSlot> slot);
  ~ScopedFnSlot();
  ScopedFnSlot(const ScopedFnSlot&) = delete;
  ScopedFnSlot& operator=(const ScopedFnSlot&) = delete;

 private:
  std::optional<OutputSlot> saved_;
};

// The fn slot's tensor when it is `dtype` of `shape` (then taken: once); nullopt otherwise. The
// caller must write every value of it.
std::optional<Tensor> TakeFnSlot(DType dtype, const Shape& shape);

// batch()'s side: which leaf it offers (the largest numeric leaf of its first element, when at
// least kMinBytes: smaller ones cost less to copy than to plan), the stacked tensor of the
// current batch, and the rows already in place. One per batch iterator; not thread-safe.
class BatchSlots {
 public:
  static constexpr int64_t kMinBytes = 64 << 10;

  // `input`: the batch's input iterator, to which offers are addressed; `what` names the batch
  // in the allocator's errors.
  // A released batch kept for reuse: one is enough when the consumer drops each batch before it
  // asks for the one after the next (holding more only costs a fresh buffer, not a copy).
  static constexpr int64_t kIdleBuffers = 1;

  BatchSlots(const Iterator* input, int64_t batch_size, std::string what)
      : input_(input),
        batch_size_(batch_size),
        what_(std::move(what)),
        pool_(BatchBufferPool::Create(kIdleBuffers)) {}

  // Starts a batch: takes its stacked tensor from the pool once the leaf is known, so from the
  // second batch on (the first was full: a short batch is the last), and not when the
  // allocator refuses (the batch then stacks as without slots, and meets the refusal there).
  void BeginBatch();
  // The first element of a batch: picks the leaf, the first time, and then takes the first
  // batch's stacked tensor (as BeginBatch does for the later ones), so that the first batch's
  // rows after this one are offered and placed too.
  void Learn(const Element& first);
  // Element `row` of the batch, just pulled (after Learn): when a stacked tensor is held, its
  // offered leaf has the planned dtype and shape, it is not in its row already and none of the
  // element's leaves lies in the stacked tensor, copies the leaf into its row now and makes the
  // element's leaf that row (the values are the same; the element's own tensor is released).
  // Otherwise leaves the element as it is, for Stacked; after an element with a leaf in the
  // stacked tensor elsewhere than its row, the rest of the batch too.
  void Place(int64_t row, Element* element);
  // The offer for row `row` (to wrap the input's GetNext in): none before the leaf is known.
  ScopedSlotOffer Offer(int64_t row) const;
  // The leaf offered, -1 when none.
  int leaf() const { return leaf_; }
  // The stacked tensor of leaf `leaf` whose rows are `column` (their dtypes and shapes already
  // checked equal) when it is the offered leaf of a full batch: rows in place are kept, the
  // others copied in (into the pool's memory also when no slot was offered: the first batch).
  // nullopt otherwise: stack as usual. Must come after every other leaf of
  // the batch is stacked (they may view rows it overwrites).
  std::optional<Tensor> Stacked(int leaf, const std::vector<Tensor>& column);

 private:
  // stacked_ from the pool (not when the allocator refuses: false).
  bool TakeStacked();

  const Iterator* const input_;
  const int64_t batch_size_;
  const std::string what_;
  const std::shared_ptr<BatchBufferPool> pool_;  // the stacked tensors' memory
  int leaf_ = -1;
  bool planned_ = false;
  DType dtype_ = DType::kInvalid;
  Shape shape_;
  std::optional<Tensor> stacked_;  // [batch_size] + shape_, of the current batch
  bool stacked_reused_ = false;     // stacked_ is a released batch's memory
  int64_t placed_ = 0;              // rows of the current batch Place copied in
  bool placing_ = true;             // Place may still copy rows of the current batch
};

}  // namespace sluice

#endif  // SLUICE_CORE_OUTPUT_SLOT_H_
