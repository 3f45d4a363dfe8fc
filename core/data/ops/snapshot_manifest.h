// A distributed snapshot's directory (docs/SNAPSHOTS.md): its layout, its manifest and the lock
// a save holds on it.
//
//   DIR/manifest            proto::SnapshotManifest, one TFRecord-framed record (masked CRC32C)
//   DIR/save.lock           created with O_EXCL by the save that writes DIR (its fingerprint)
//   DIR/chunks/chunk-<fingerprint>.tfrecord   committed chunks (snapshot_chunk.h)
//   DIR/chunks/.tmp-*       chunks being written (never read; removed when the save finishes)
//
//   ASSIGN_OR_RETURN(proto::SnapshotManifest m, ReadSnapshotManifest("/data/snap"));
//   if (!m.done()) ...
//
// Reads go through the FileSystem of the URL's scheme (core/io/file_system.h), so a snapshot on
// s3:// can be loaded. Writes go to local directories, or to an object store (s3://, gs://)
// without rename: each object is written whole under its final name (a PUT or a completed
// multipart upload is atomic), the manifest last, and the lock is created with
// "If-None-Match: *" (docs/SNAPSHOTS.md says what a store without conditional writes allows).
//
// Errors name the file: NOT_FOUND no manifest (not a snapshot directory), DATA_LOSS a manifest
// that fails its checksum, is truncated, larger than kMaxSnapshotManifestBytes, does not parse
// or says what cannot be (a negative count, an unknown format version, chunk names that are not
// chunk file names, counts that do not add up).
//
// Thread safety: the functions are thread-safe; two processes writing one directory are kept
// apart by the lock (AcquireSnapshotLock).
#ifndef SLUICE_CORE_DATA_OPS_SNAPSHOT_MANIFEST_H_
#define SLUICE_CORE_DATA_OPS_SNAPSHOT_MANIFEST_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "proto/dataset.pb.h"

namespace sluice {

// The format saves write: chunks of raw element records (core/tensor/raw_element.h). Loads
// also read the oldest, chunks of serialized proto::ElementProto records.
inline constexpr int64_t kSnapshotFormatVersion = 2;
inline constexpr int64_t kOldestSnapshotFormatVersion = 1;
// A manifest larger than this is corrupt (a million chunks take about 50 MiB).
inline constexpr uint64_t kMaxSnapshotManifestBytes = uint64_t{64} << 20;

std::string SnapshotManifestPath(absl::string_view directory);
std::string SnapshotLockPath(absl::string_view directory);
std::string SnapshotChunksDirectory(absl::string_view directory);
// "chunk-<fingerprint>.tfrecord".
std::string SnapshotChunkName(absl::string_view fingerprint);
// True for a committed chunk's file name (what SnapshotChunkName makes).
bool IsSnapshotChunkName(absl::string_view name);

// Reads and checks DIR/manifest (errors above).
absl::StatusOr<proto::SnapshotManifest> ReadSnapshotManifest(const std::string& directory);
// Parses manifest bytes (the record's data) read from `filename`; DATA_LOSS naming it.
absl::StatusOr<proto::SnapshotManifest> ParseSnapshotManifest(absl::string_view bytes,
                                                              const std::string& filename);
// Writes DIR/manifest atomically (a temporary file, fsync, rename, fsync of DIR): a reader sees
// the old manifest or the new one, never a part; on an object store one PUT, as atomic.
// UNIMPLEMENTED for a scheme without writes; errors name the file.
absl::Status WriteSnapshotManifest(const std::string& directory,
                                   const proto::SnapshotManifest& manifest);

// Creates DIR/save.lock with O_EXCL (on an object store: a PUT with If-None-Match: *) holding
// `owner` (the saved pipeline's fingerprint).
// ALREADY_EXISTS naming the lock and the owner it holds when another save has it; errno's code
// otherwise.
absl::Status AcquireSnapshotLock(const std::string& directory, const std::string& owner);
// The owner written in DIR/save.lock; NOT_FOUND when there is no lock.
absl::StatusOr<std::string> SnapshotLockOwner(const std::string& directory);
// Removes DIR/save.lock (OK when it is already gone).
absl::Status ReleaseSnapshotLock(const std::string& directory);

// OK for a local directory and an object store's (s3://, gs://); UNIMPLEMENTED naming
// `directory` otherwise (http(s):// has no writes).
absl::Status CheckSnapshotWritable(const std::string& directory);

// fsync(2) of a local file or directory; errno's code naming it.
absl::Status SyncLocalPath(const std::string& path);
// mkdir -p of a local directory; errno's code naming it.
absl::Status MakeLocalDirectories(const std::string& path);

}  // namespace sluice

#endif  // SLUICE_CORE_DATA_OPS_SNAPSHOT_MANIFEST_H_
