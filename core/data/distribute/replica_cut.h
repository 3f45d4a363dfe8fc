// ReplicaCut: how a stream of global batches is cut into per-replica pieces, the one rule shared
// by in-process mode (DistributeForWorker, core/data/distribute/auto_shard.h) and the service's tasks
// (worker/task_runner.cc), so that both give the same pieces (issue 12).
//
// TF's rule (TF_SEMANTICS.md, "Rebatching"; python/distribute/input_lib.py and grappler's
// auto_shard.cc), with N replicas in sync:
//  - N == 1: no cut, the batches are the pieces;
//  - B = GlobalBatchSize() (core/data/distribute/distribute_spec.h: the batch op's size, seen through the ops
//    TF's ComputeBatchSize passes through; a map after the batch hides it, as in TF) known:
//    rebatch(BatchSizesForWorker(B, W, R, w)), pieces contiguous in element order;
//  - B unknown (-1), or a DATA-sharded layout (DATA, and AUTO on a source that reads no files:
//    grappler rewrites the rebatch to the legacy one): TF's legacy rebatch, each batch on its
//    own into N pieces of ceil(b / N) rows.
//
// A coordinated service job (C consumers x R replicas, N = C * R) cuts each global step across
// all N replicas with the same rule, as one worker with N replicas would (ReplicaCutForJob), and
// piece c * R + r goes to consumer c's replica r: the consumers' pieces, joined, are the single
// pipeline's elements in order.
//  - C == 1: exactly the in-process cut of one worker, whatever the policy.
//  - legacy cut with C > 1: each batch into N pieces; with R == 1 that is exactly in-process
//    worker c of C under DATA (legacy rebatch, then shard(C, c) of the pieces). With R > 1
//    in-process worker c takes pieces c, c + C, ... instead: there coordinated mode deliberately
//    differs (contiguous pieces per consumer), and docs/SERVICE.md says so.
//  - sizes cut with C > 1: CoordinatedPieceSizes(B, C, R) (core/data/distribute/rebatch.h): consumer c gets,
//    step by step, the sizes TF gives worker c, from one global batch. In-process workers under
//    OFF/FILE each cut their own stream instead: deliberately different too.
//
// Pure functions on values; thread-safe.
#ifndef SLUICE_CORE_REPLICA_CUT_H_
#define SLUICE_CORE_REPLICA_CUT_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/data/distribute/auto_shard.h"
#include "sluice/dataset.h"
#include "core/data/iterator.h"

namespace sluice {

struct ReplicaCut {
  enum class Kind {
    kNone,    // one replica in sync: batches pass unchanged
    kSizes,   // rebatch(sizes), sizes cycled; pieces may cross input batches
    kLegacy,  // every input batch on its own into num_pieces pieces
  };
  Kind kind = Kind::kNone;
  std::vector<int64_t> sizes;  // kSizes
  int64_t num_pieces = 1;      // kLegacy: N
};

// The cut in-process input worker `worker_index` of `num_workers` makes before auto-sharding
// (step 1 of DistributeForWorker): kNone for one replica in sync; else kSizes with
// BatchSizesForWorker(B, W, R, w) when B is known, kLegacy(N) when not.
// INVALID_ARGUMENT: an unbatched dataset (TF's message, GlobalBatchSize), non-positive counts,
// an index out of range.
absl::StatusOr<ReplicaCut> ReplicaCutForWorker(const Dataset& dataset, int64_t num_workers,
                                               int64_t replicas_per_worker, int64_t worker_index);

// The cut of a coordinated service job with `num_consumers` x `replicas_per_consumer` replicas
// (see the file comment). `data_sharded`: the job's policy shards like in-process DATA
// (CutsLikeDataSharding). Errors as ReplicaCutForWorker.
absl::StatusOr<ReplicaCut> ReplicaCutForJob(const Dataset& dataset, bool data_sharded,
                                            int64_t num_consumers, int64_t replicas_per_consumer);

// Whether in-process mode under `policy` ends with the legacy cut (grappler's DATA rewrite):
// DATA, or AUTO when the source reads no files (ReadsFiles; a PermutedSource counts as the
// source it permutes, so a SHARDING_RANGES task cuts like its job's dataset).
bool CutsLikeDataSharding(AutoShardPolicy policy, const Dataset& dataset);

// `dataset` followed by the cut (the Rebatch or LegacyRebatch op in-process mode adds).
Dataset ApplyReplicaCut(const Dataset& dataset, const ReplicaCut& cut);

// The same cut over an iterator of batches (a DYNAMIC task's splits); `piece_spec` shapes the
// empty pieces of the sizes cut. Errors: those of NewRebatchIterator / NewLegacyRebatchIterator.
absl::StatusOr<std::unique_ptr<Iterator>> NewReplicaCutIterator(std::string label,
                                                                std::unique_ptr<Iterator> batches,
                                                                const ReplicaCut& cut,
                                                                const ElementSpec& piece_spec);

}  // namespace sluice

#endif  // SLUICE_CORE_REPLICA_CUT_H_
