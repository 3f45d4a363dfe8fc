// Writing a distributed snapshot: the service's workers write a pipeline's elements to a
// directory as sharded chunk files, which later jobs read with LoadSnapshot / load('DIR')
// (include/sluice/snapshot.h) instead of recomputing them. tf.data's distributed_save.
//
//   SnapshotSaveOptions options;
//   options.service.coordinator_address = "coordinator:5000";
//   ASSIGN_OR_RETURN(SnapshotSaveResult r, SaveSnapshot(dataset, "/data/snap", options));
//
// How (docs/SNAPSHOTS.md): this process writes DIR/manifest (the element spec, done=false) and
// takes DIR/save.lock, then runs a DYNAMIC job named "snapshot:" + DIR whose workers write one
// chunk per split (the save_chunks op, committed by fsync + rename) and stream back one small
// (chunk, count) element per chunk. When the job ends, the manifest is rewritten listing every
// chunk with its count and done=true, stale temporary files are removed and the lock released.
//
// Resumable: a worker that dies mid-split leaves only a temporary file; the split goes to
// another worker, which writes the same chunk name (one chunk per split, whatever the number
// of tries). The coordinator journals the job and its splits, so a restarted coordinator hands
// out the rest. A save interrupted in this process (killed, a deadline) is continued by the
// same call with `resume = true`: it joins the same job and finishes the manifest.
//
// Errors: INVALID_ARGUMENT bad options or dataset; ALREADY_EXISTS another save holds DIR's lock
// (naming it; resume=true continues only a save of the same pipeline); FAILED_PRECONDITION DIR
// already holds a finished snapshot, or one of another pipeline; UNIMPLEMENTED a directory that
// is not local (the FileSystem layer cannot write to object stores); the job's errors (a worker's
// write error names the chunk file); UNAVAILABLE the coordinator cannot be reached within
// service.retry_deadline.
//
// Thread safety: SaveSnapshot is thread-safe (saves to different directories run side by side).
#ifndef SLUICE_SNAPSHOT_SAVE_H_
#define SLUICE_SNAPSHOT_SAVE_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "sluice/dataset.h"
#include "sluice/service.h"

namespace sluice {

struct SnapshotSaveOptions {
  // The coordinator and the connection (address, security, retry_deadline, rpc_deadline). The
  // job's own fields (job_name, sharding, read mode, consumers) are set by the save.
  ServiceOptions service;
  // The chunks' compression: "" (none), "GZIP" or "ZLIB".
  std::string compression;
  // A source of elements (range, from_tensor_slices, ...): source elements per chunk; 0: 4096.
  // A source of files always writes one chunk per file.
  int64_t split_size = 0;
  // Continue a save of the same pipeline to the same directory that was interrupted (its lock
  // is still there). False: a lock present is ALREADY_EXISTS.
  bool resume = false;
};

struct SnapshotSaveResult {
  int64_t num_chunks = 0;
  int64_t num_elements = 0;
};

absl::StatusOr<SnapshotSaveResult> SaveSnapshot(const Dataset& dataset,
                                                const std::string& directory,
                                                const SnapshotSaveOptions& options);

}  // namespace sluice

#endif  // SLUICE_SNAPSHOT_SAVE_H_
