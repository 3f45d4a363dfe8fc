#include "core/data/distribute/replica_cut.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "core/data/distribute/distribute_spec.h"
#include "core/data/distribute/rebatch.h"
#include "core/data/ops/rebatch_iterator.h"
#include "core/util/status_macros.h"
#include "proto/dataset.pb.h"

namespace sluice {
namespace {

absl::Status CheckLayout(int64_t num_workers, int64_t replicas_per_worker) {
  if (num_workers <= 0 || replicas_per_worker <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("replica cut: ", num_workers, " workers (consumers) x ", replicas_per_worker,
                     " replicas: both must be positive"));
  }
  return absl::OkStatus();
}

ReplicaCut Legacy(int64_t num_pieces) {
  ReplicaCut cut;
  cut.kind = ReplicaCut::Kind::kLegacy;
  cut.num_pieces = num_pieces;
  return cut;
}

ReplicaCut Sizes(std::vector<int64_t> sizes) {
  ReplicaCut cut;
  cut.kind = ReplicaCut::Kind::kSizes;
  cut.sizes = std::move(sizes);
  return cut;
}

}  // namespace

absl::StatusOr<ReplicaCut> ReplicaCutForWorker(const Dataset& dataset, int64_t num_workers,
                                               int64_t replicas_per_worker, int64_t worker_index) {
  RETURN_IF_ERROR(CheckLayout(num_workers, replicas_per_worker));
  const int64_t n = num_workers * replicas_per_worker;
  if (n == 1) return ReplicaCut{};  // TF does not rebatch for one replica in sync
  ASSIGN_OR_RETURN(int64_t global_batch, GlobalBatchSize(dataset, n));
  if (global_batch < 0) return Legacy(n);
  ASSIGN_OR_RETURN(std::vector<int64_t> sizes, BatchSizesForWorker(global_batch, num_workers,
                                                                   replicas_per_worker,
                                                                   worker_index));
  return Sizes(std::move(sizes));
}

absl::StatusOr<ReplicaCut> ReplicaCutForJob(const Dataset& dataset, bool data_sharded,
                                            int64_t num_consumers, int64_t replicas_per_consumer) {
  RETURN_IF_ERROR(CheckLayout(num_consumers, replicas_per_consumer));
  const int64_t n = num_consumers * replicas_per_consumer;
  if (n == 1) return ReplicaCut{};
  // The in-process cut of one worker with all N replicas: it finds B (or fails for an unbatched
  // dataset) exactly as in-process mode does.
  ASSIGN_OR_RETURN(ReplicaCut cut, ReplicaCutForWorker(dataset, 1, n, 0));
  if (data_sharded || cut.kind == ReplicaCut::Kind::kLegacy) return Legacy(n);
  if (num_consumers == 1) return cut;
  ASSIGN_OR_RETURN(int64_t global_batch, GlobalBatchSize(dataset, n));
  ASSIGN_OR_RETURN(std::vector<int64_t> sizes,
                   CoordinatedPieceSizes(global_batch, num_consumers, replicas_per_consumer));
  return Sizes(std::move(sizes));
}

bool CutsLikeDataSharding(AutoShardPolicy policy, const Dataset& dataset) {
  if (policy == AutoShardPolicy::kData) return true;
  if (policy != AutoShardPolicy::kAuto) return false;
  const proto::DatasetDef& def = dataset.def();
  if (def.source().has_permuted()) {
    proto::DatasetDef inner = def;  // the ops too, so that the graph still validates
    proto::SourceDef source = def.source().permuted().source();
    *inner.mutable_source() = std::move(source);
    absl::StatusOr<Dataset> unwrapped = Dataset::FromDef(std::move(inner));
    return unwrapped.ok() && !ReadsFiles(*unwrapped);
  }
  return !ReadsFiles(dataset);
}

Dataset ApplyReplicaCut(const Dataset& dataset, const ReplicaCut& cut) {
  switch (cut.kind) {
    case ReplicaCut::Kind::kNone:
      return dataset;
    case ReplicaCut::Kind::kSizes:
      return dataset.Rebatch(cut.sizes);
    case ReplicaCut::Kind::kLegacy:
      return dataset.LegacyRebatch(cut.num_pieces);
  }
  return dataset;
}

absl::StatusOr<std::unique_ptr<Iterator>> NewReplicaCutIterator(std::string label,
                                                                std::unique_ptr<Iterator> batches,
                                                                const ReplicaCut& cut,
                                                                const ElementSpec& piece_spec) {
  switch (cut.kind) {
    case ReplicaCut::Kind::kNone:
      return batches;
    case ReplicaCut::Kind::kSizes:
      return NewRebatchIterator(std::move(label), std::move(batches), cut.sizes,
                                /*drop_remainder=*/false, piece_spec);
    case ReplicaCut::Kind::kLegacy:
      return NewLegacyRebatchIterator(std::move(label), std::move(batches), cut.num_pieces);
  }
  return batches;
}

}  // namespace sluice
