// Global order: the global batches of a job as a pure function of (dataset, options, seed),
// whatever the number of workers (issue 6). The records of an indexed source are visited in the
// order of a seeded permutation of their positions per epoch (core/util/index_permutation.h), cut
// into global steps of B records; a range of steps is a pipeline of its own (the source
// replaced by a PermutedSource over the range's positions, every op kept), so any worker can
// produce any range and concatenating the ranges gives the epoch.
//
// Pipelines that qualify (PlanGlobalOrder):
//   source  an indexed source (core/data/ops/random_access_source.h): range, from_tensors,
//           from_tensor_slices, uncompressed tf_record_dataset / fixed_length_record_dataset,
//           npy_dataset
//   then    any number of element-wise ops that map one element to one element in order:
//             map(fn) with deterministic order (deterministic unset or True; any
//               num_parallel_calls): parse_example, decode_raw, cast, reshape, normalize,
//               one_hot, and plugin fns (a plugin fn must be a pure function of its element)
//             prefetch
//   then    exactly one batch or padded_batch (B = its batch_size, the global batch size)
//   then    element-wise ops again (map, prefetch)
// Everything else prevents it, with the first such op named:
//   filter, ignore_errors        drop elements depending on their values
//   shuffle                      a buffer shuffle: use the job's GlobalOrder.shuffle instead
//   repeat                       epochs are GlobalOrder.num_epochs
//   take, skip                   change the number of records (restrict the source instead,
//                                e.g. a record_range)
//   shard                        splits the data between workers; ranges do that
//   cache                        keeps a whole pass; a range reads part of an epoch
//   unbatch, rebatch, interleave change how many elements there are
//   map(deterministic=False)     its output order is not fixed
//   a second batch/padded_batch  only one op may cut the global steps
//   no batch at all              there are no global steps to cut
//
// Thread safety: plain functions on values.
#ifndef SLUICE_CORE_GLOBAL_ORDER_H_
#define SLUICE_CORE_GLOBAL_ORDER_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "sluice/dataset.h"
#include "proto/dataset.pb.h"

namespace sluice {

struct GlobalOrderPlan {
  int64_t num_records = 0;      // elements of the source per epoch
  int64_t batch_size = 0;       // B, the dataset's (global) batch size
  bool drop_remainder = false;
  int64_t steps_per_epoch = 0;  // floor or ceil(num_records / B) by drop_remainder
};

// OK when the dataset allows a global order by random access (the shapes above). Otherwise
// FAILED_PRECONDITION whose message names the first op that prevents it and its position, and
// why: "filter (op 2) drops elements depending on their values", "text_line_dataset source has
// no random access: ...". INVALID_ARGUMENT when the dataset does not Validate(). num_records
// requires opening the source (record indexes, file headers): errors from that are returned as
// they are (NOT_FOUND for a missing file, DATA_LOSS for a corrupt one).
absl::StatusOr<GlobalOrderPlan> PlanGlobalOrder(const Dataset& dataset);

// The FAILED_PRECONDITION PlanGlobalOrder would return for the shape of the pipeline, or OK;
// opens no file (for planning without I/O).
absl::Status CheckGlobalOrderShape(const Dataset& dataset);

struct GlobalOrderOptions {
  proto::ShuffleMode shuffle = proto::SHUFFLE_NONE;
  uint64_t seed = 0;
  int64_t block_size = 1024;  // SHUFFLE_BLOCK: records per block; must be >= 1
};

// The pipeline yielding global steps [begin_step, end_step) of epoch `epoch`
// (0 <= begin_step < end_step <= plan.steps_per_epoch): the source replaced by a
// PermutedSource over positions [begin_step*B, min(end_step*B, num_records)) of the epoch's
// permutation, every op kept (so the batch op cuts exactly the global steps). INVALID_ARGUMENT
// for bad bounds (also epoch < 0, a plan without steps, SHUFFLE_BLOCK with block_size < 1, an
// unknown shuffle mode) or a dataset that does not Validate().
absl::StatusOr<Dataset> GlobalOrderRange(const Dataset& dataset, const GlobalOrderPlan& plan,
                                         const GlobalOrderOptions& options, int64_t epoch,
                                         int64_t begin_step, int64_t end_step);

}  // namespace sluice

#endif  // SLUICE_CORE_GLOBAL_ORDER_H_
