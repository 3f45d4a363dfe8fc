// list_files(file_pattern, shuffle=False, seed=None): the names of the files matching one or
// more glob patterns, as string scalars.
//
// Each pattern is expanded by the file system of its scheme (core/io/file_system.h: glob(3) for
// local paths, a prefix listing for s3:// and gs://; `*`, `?`, `[...]` within one path segment,
// no `**`), its matches sorted bytewise, and the patterns' lists concatenated in order. Unlike TF, whose default is
// shuffle=True, Sluice's default is the sorted order (deterministic input pipelines);
// shuffle=True shuffles the whole list, reshuffling for each new iterator of the op (each epoch)
// from `seed` as shuffle() does (core/data/ops/shuffle_iterator.h); without a seed the order differs
// from run to run.
//
// FILE auto-sharding (core/data/distribute/auto_shard.h) sets num_shards/shard_index: the sorted list keeps
// names shard_index, shard_index + num_shards, ... before any shuffle, so shards are disjoint
// whatever the seed. Fewer files than shards is TF's FILE-sharding error.
//
// Patterns are expanded when the iterator is built (every epoch under repeat() sees new files).
// No match for any pattern is NOT_FOUND "No files matched pattern: <patterns>".
#ifndef SLUICE_CORE_LIST_FILES_H_
#define SLUICE_CORE_LIST_FILES_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/data/iterator.h"
#include "proto/dataset.pb.h"

namespace sluice {

// The matching names in list_files order, after sharding and before shuffling.
absl::StatusOr<std::vector<std::string>> ExpandFilePatterns(const proto::ListFilesSource& source);

// `iteration` picks the shuffle order (ignored without shuffle). Errors are prefixed with
// `label`.
absl::StatusOr<std::unique_ptr<Iterator>> NewListFilesIterator(
    std::string label, const proto::ListFilesSource& source, int64_t iteration);

}  // namespace sluice

#endif  // SLUICE_CORE_LIST_FILES_H_
