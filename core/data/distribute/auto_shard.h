// Auto-sharding: rewriting a dataset so that input worker `index` of `num_shards` reads its
// share (tf.data's AutoShardPolicy; see TF_SEMANTICS.md). Pure functions; thread-safe.
#ifndef SLUICE_CORE_AUTO_SHARD_H_
#define SLUICE_CORE_AUTO_SHARD_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "sluice/auto_shard_policy.h"  // AutoShardPolicy, ParseAutoShardPolicy
#include "sluice/dataset.h"

namespace sluice {

// True if the dataset's source reads files: any source with a `filenames` list (text lines,
// TFRecord, fixed-length records, CSV, .npy, ...) or list_files (found by the proto fields, so
// a new reader needs no change here).
bool ReadsFiles(const Dataset& dataset);

// TF's error for FILE sharding with fewer files than shards (INVALID_ARGUMENT): "Could not apply
// FILE based sharding: the dataset only has N file(s), which is not enough for the required M
// shards/workers. ...". Also for list_files, which can only count its files when it expands
// its patterns.
absl::Status TooFewFilesError(int64_t num_files, int64_t num_shards);

// FILE sharding: keeps files index, index + num_shards, ... of the source (list_files: sets its
// num_shards/shard_index). INVALID_ARGUMENT when the source is not file based or is restricted
// to a record range, or with TF's message when there are fewer files than
// shards: "Could not apply FILE based sharding: the dataset only has N file(s), which is not
// enough for the required M shards/workers. ...".
absl::StatusOr<Dataset> ShardByFile(const Dataset& dataset, int64_t num_shards, int64_t index);

// HINT sharding: every shard(SHARD_HINT, SHARD_HINT) becomes shard(num_shards, index).
// A graph that does not Validate() is returned unchanged.
Dataset ReplaceShardHints(const Dataset& dataset, int64_t num_shards, int64_t index);

// The whole per-worker rewrite that experimental_distribute_dataset applies for input worker
// `worker_index` of `num_workers` with `num_replicas_in_sync` replicas in all: auto-sharding by
// `policy` and rebatching to per-replica batches (new-style rebatch with
// BatchSizesForWorker, or the legacy rebatch followed by shard() for DATA, as TF does).
// The result yields per-replica pieces; consecutive pieces go to the worker's local replicas
// in turn. INVALID_ARGUMENT for an unbatched dataset and the FILE error above.
//
// In TF's order (input_lib.py, then grappler's auto_shard.cc), with N = num_replicas_in_sync,
// R = N / num_workers, W = num_workers, w = worker_index:
//  1. N > 1 only: rebatch(BatchSizesForWorker(B, W, R, w)), or the legacy rebatch into N pieces
//     when B is unknown (GlobalBatchSize() == -1); then prefetch(R).
//  2. auto-shard, also for W == 1 (TF skips only FILE with one worker):
//     OFF: nothing. FILE: ShardByFile(W, w). DATA: the rebatch of step 1 becomes the legacy
//     rebatch into N pieces and shard(W, w) follows it (before the prefetch). AUTO: FILE when
//     ReadsFiles() (with FILE's errors), else DATA. HINT: ReplaceShardHints(W, w).
// So with W == 1, AUTO and DATA give the legacy split: range(8).batch(4) on 3 replicas yields
// [0,1],[2,3],[] per step, as TF 2.15 does. INVALID_ARGUMENT also when N % W != 0 (TF's
// "tf.distribute expects every worker to have the same number of replicas ...") and for a
// graph that does not Validate().
absl::StatusOr<Dataset> DistributeForWorker(const Dataset& dataset, AutoShardPolicy policy,
                                            int64_t num_workers, int64_t worker_index,
                                            int64_t num_replicas_in_sync);

}  // namespace sluice

#endif  // SLUICE_CORE_AUTO_SHARD_H_
