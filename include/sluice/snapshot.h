// Reading a distributed snapshot: the elements a save (include/sluice/snapshot_save.h,
// `sluicectl save`, Python `sluice.save`) wrote to a directory, as a Dataset source. The same
// source in a pipeline expression is `load('DIR')` / `load('DIR', wait=True)`. Format, order
// and guarantees: docs/SNAPSHOTS.md.
//
//   ASSIGN_OR_RETURN(Dataset ds, LoadSnapshot("/data/snap"));
//   ds = ds.Batch(32);  // any ops, as after any source; element_spec() from the manifest
//
// Order: wait=false reads the chunks in the order of their file names, each chunk's elements
// in the order they were written: the same order for every load of a snapshot. wait=true
// reads chunks as they are committed (the order they are found in), and gives up when the
// snapshot stops growing (SnapshotLoadOptions::timeout_seconds) or its save failed.
//
// Thread safety: LoadSnapshot is thread-safe.
#ifndef SLUICE_SNAPSHOT_H_
#define SLUICE_SNAPSHOT_H_

#include <string>

#include "absl/status/statusor.h"
#include "sluice/dataset.h"

namespace sluice {

// The snapshot in `directory` (a local path or a URL the FileSystem layer reads: s3://, ...)
// as a source. Reads its manifest now, for the element spec and (wait=false) the chunk list.
// NOT_FOUND naming the manifest when `directory` holds none; DATA_LOSS naming it when it is
// corrupt; FAILED_PRECONDITION when wait=false and the snapshot is not finished. Errors while
// reading come from the iterators: DATA_LOSS naming a corrupt or truncated chunk,
// FAILED_PRECONDITION for a chunk or manifest of another element spec.
absl::StatusOr<Dataset> LoadSnapshot(const std::string& directory, bool wait = false);

// wait=true gives up after this many seconds in which the snapshot did not grow.
inline constexpr double kDefaultSnapshotWaitTimeoutSeconds = 600;

struct SnapshotLoadOptions {
  // Read a snapshot still being written, as its chunks are committed, until its manifest says
  // done (false: the snapshot must be finished).
  bool wait = false;
  // wait=true: the iterator fails with DEADLINE_EXCEEDED, naming the directory, the chunks read
  // and whether a save still holds the lock, after this many seconds in which the snapshot did
  // not grow (no chunk committed, no temporary chunk written to, the manifest unchanged);
  // <= 0: it waits as long as it takes. A snapshot whose save failed (the manifest records the
  // error) fails at once with FAILED_PRECONDITION quoting it.
  double timeout_seconds = kDefaultSnapshotWaitTimeoutSeconds;
  // wait=false: records whose checksums are verified at once on the process's thread pool,
  // ahead of the consumer (docs/SNAPSHOTS.md, "Read-ahead on the pool"): more CPU per element
  // (10-20%) for a consumer that waits less when cores are idle; 1 reads sequentially, the
  // least CPU per element; -1 (AUTOTUNE): the number of cores. Must be -1 or >= 1; 1 for
  // wait=true (it reads sequentially).
  int64_t num_parallel_calls = 1;
};

// As above, with options (errors as above).
absl::StatusOr<Dataset> LoadSnapshot(const std::string& directory,
                                     const SnapshotLoadOptions& options);

}  // namespace sluice

#endif  // SLUICE_SNAPSHOT_H_
