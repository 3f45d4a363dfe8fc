// Map-and-batch fusion for the bulk path (core/data/iterator.h blocks): batch() tells the
// parallel map right below it where each row of the map's output will be stacked, and the
// map's block fn (parse_example: tf.io.parse_example over a block of records) writes its rows
// there, on the pool thread that maps the block. A full batch whose rows were all written in
// place is handed out as it is: the consumer's thread copies and moves no row, and the strings
// it drops go back to a pool (string_batch_pool.h) whose next batch the parsing threads assign
// into without allocating. TF fuses map(num_parallel_calls) + batch the same way
// (map_and_batch_fusion).
//
// The protocol:
//  1. batch(B) owns a BatchDestinations and offers it to its input around every GetNextBlock
//     (output_slot.h's offer, OutputSlot::destinations; the profiling wrapper forwards it).
//  2. A parallel map in input order takes it and, for each block it reads (rows [p, p + n) of
//     its output, counted in rows handed out), asks RowsFor(p, n): the views of those rows of
//     the stacked tensors of the batch they will be part of, when they lie in one full batch.
//     The block's fn call runs inside ScopedFnBlockSlot(views), on whichever thread maps it.
//  3. A block fn about to allocate its outputs takes them (TakeFnBlockSlot) when they are
//     exactly the leaves it would allocate (dtypes and shapes, in flattened order), writes every
//     value of them, and returns them.
//  4. The map reports the position of each block it hands out (Handed). batch gathers the
//     blocks as always, its batch starting at the position of its first block
//     (StartBatch), and asks Assemble(start, blocks): when every leaf of
//     every block is the rows of that batch's stacked tensors at the block's place in the batch
//     (Tensor::IsRowsOf: the same memory, not equal values), the stacked tensors are the batch;
//     otherwise batch concatenates the blocks as without fusion. So a misplaced, missing or
//     foreign row can never change what the batch holds: the worst it costs is the copy.
// Positions are the map's: rows counted in the order it read them. Batches are predicted to
// start every B rows from the start of the first batch; a batch that starts elsewhere (after an
// element error, which batch returns dropping the rows it gathered, or a row the map's fn
// failed on) moves the prediction to its own start, and the rows read ahead under the old one
// are copied.
// The stacked tensors of a batch are written only by the blocks whose rows they are, and a
// batch is handed out only after all of them are done, so nothing a consumer holds is ever
// written again (a partial last batch, which blocks dropped by an error might still write, is
// always concatenated). At most kMaxAhead batches are prepared ahead of the one being built.
//
// Thread safety: every method may be called from any thread; the
// fn-slot functions act on the calling thread's state.
#ifndef SLUICE_CORE_BATCH_DESTINATIONS_H_
#define SLUICE_CORE_BATCH_DESTINATIONS_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "core/data/ops/batch_buffer_pool.h"
#include "core/data/ops/string_batch_pool.h"
#include "sluice/element.h"
#include "sluice/tensor.h"

namespace sluice {

// Process-wide counts of fused batches: handed out as written in place, and concatenated
// although the map had destinations for them (a block not written in place).
struct FusedBatchCounts {
  int64_t in_place = 0;
  int64_t concatenated = 0;
};
FusedBatchCounts FusedBatchCountsSoFar();

// On by default; off, no map is given destinations (every batch is concatenated as without
// the fusion): for benchmarks comparing both in one process. Thread-safe.
void SetMapBatchFusionEnabled(bool enabled);
bool MapBatchFusionEnabled();

class BatchDestinations {
 public:
  // Batches prepared beyond the one being built (a parallel map reads ahead 2 * parallelism
  // blocks, each at most a batch; the memory is what those blocks would allocate anyway).
  static constexpr int64_t kMaxAhead = 8;
  // No fusion for batches whose stacked tensors (numbers and string objects, not characters)
  // would take more: they are prepared before their rows are read.
  static constexpr int64_t kMaxBatchBytes = int64_t{32} << 20;

  // `batch_size` rows per batch; `what` names the batch in the allocator's errors.
  BatchDestinations(int64_t batch_size, std::string what);

  // The first block a batch received: learns its leaves' dtypes and row shapes (once; a block
  // holding SparseTensor / RaggedTensor components, or batches over kMaxBatchBytes, disable
  // the fusion).
  void Learn(const Element& block);
  // Whether rows may be written in place (the leaves are learnt and fusable).
  bool fusing();
  // The map hands out a block whose first row is at `position` (the batch's thread).
  void Handed(int64_t position);
  // A batch's first block was just received: its start, the position Handed last reported (-1
  // when none was: the input is no fusing map), and the prediction moves there when batches
  // were predicted elsewhere.
  int64_t StartBatch();

  // `rows`, or fewer so that rows [position, position + rows) end where a batch ends: a map
  // reads blocks of that size, so that no block spans two batches.
  int64_t ClampToBatch(int64_t position, int64_t rows);
  // The views of rows [position, position + rows) of the stacked tensors (one per leaf, in
  // flattened order) of the batch those rows belong to, allocating its tensors (from the pools)
  // the first time; nullopt when the leaves are not learnt yet, the rows span two batches,
  // lie before the batch being built or more than kMaxAhead batches after it, or the allocator
  // refuses.
  std::optional<std::vector<Tensor>> RowsFor(int64_t position, int64_t rows);

  // The batch starting at `start` made of `blocks` (received in order, `start` from
  // StartBatch, the batch full): its stacked tensors, packed as blocks[0], when every block's
  // leaves are their rows at the block's place; nullopt otherwise (then concatenate). Either
  // way the batch's tensors are forgotten here.
  std::optional<Element> Assemble(int64_t start, const std::vector<Element>& blocks);

 private:
  struct Planned {
    DType dtype;
    Shape row;  // a row's shape
  };
  absl::StatusOr<std::vector<Tensor>> Allocate() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const int64_t batch_size_;
  const std::string what_;
  absl::Mutex mu_;
  bool learnt_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<Planned> leaves_ ABSL_GUARDED_BY(mu_);  // empty: no fusion
  // Each numeric leaf's pool (null for a string leaf) and the strings' pool.
  std::vector<std::shared_ptr<BatchBufferPool>> buffer_pools_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<StringBatchPool> string_pool_ ABSL_GUARDED_BY(mu_);
  int64_t base_ ABSL_GUARDED_BY(mu_) = 0;     // where batch 0 of this prediction starts
  int64_t handed_ ABSL_GUARDED_BY(mu_) = -1;  // the position Handed last reported
  int64_t current_ ABSL_GUARDED_BY(mu_) = 0;  // the batch being built, from base_
  std::map<int64_t, std::vector<Tensor>> batches_ ABSL_GUARDED_BY(mu_);  // by batch number
};

// Makes `leaves` (may be empty) what TakeFnBlockSlot gives for this object's lifetime.
class ScopedFnBlockSlot {
 public:
  explicit ScopedFnBlockSlot(std::optional<std::vector<Tensor>> leaves);
  ~ScopedFnBlockSlot();
  // The leaves when no fn took them (then no longer offered); nullopt when one did.
  std::optional<std::vector<Tensor>> Release();
  ScopedFnBlockSlot(const ScopedFnBlockSlot&) = delete;
  ScopedFnBlockSlot& operator=(const ScopedFnBlockSlot&) = delete;

 private:
  std::optional<std::vector<Tensor>> saved_;
};

// The fn block slot's tensors when they are exactly `leaves` (dtype and shape each, in order):
// taken (once). nullopt otherwise. The caller must write every value of them.
struct LeafPlan {
  DType dtype;
  Shape shape;
};
std::optional<std::vector<Tensor>> TakeFnBlockSlot(const std::vector<LeafPlan>& leaves);

}  // namespace sluice

#endif  // SLUICE_CORE_BATCH_DESTINATIONS_H_
