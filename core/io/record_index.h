// RecordIndex: the byte offset of every record of an uncompressed TFRecord file, for random
// access (a shard that is a record range of a file, a global shuffle that reads any record).
//
// Built by scanning the file's record headers (each length checksum is checked; the data is
// skipped with seeks, not read) and cached in an index file so the next user just loads it:
// `<file>.sluice-idx` next to the data file, or, with `cache_dir` set (or when the data's
// folder is not writable), `<cache_dir>/<hash of the absolute path>-<basename>.sluice-idx`.
// The cached index records the data file's size and modification time; a file changed since is
// re-indexed. Index files are written to a temporary name and renamed, so concurrent builders
// never see a partial index.
//
// Index file layout (little-endian):
//   "SLUICEIX" | uint32 version (1) | uint32 kind (1: TFRecord) | uint64 file_size |
//   int64 mtime_ns | uint64 num_records | uint64 offsets[num_records] |
//   uint32 masked crc32c of everything before it
//
// Fixed-length record files need no index: record i starts at header_bytes + i * record_bytes
// (FixedLengthRecordOffset()).
//
// Thread safety: a const RecordIndex may be shared; the functions are safe to call
// concurrently (also from several processes on one file).
#ifndef SLUICE_CORE_RECORD_INDEX_H_
#define SLUICE_CORE_RECORD_INDEX_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/io/input_stream.h"

namespace sluice {

inline constexpr uint32_t kRecordIndexVersion = 1;

struct RecordIndexOptions {
  // Where index files go; empty: next to the data file (falling back to
  // $TMPDIR/sluice-index when that folder is not writable).
  std::string cache_dir;
  // Write the index file after building. False: build in memory only.
  bool persist = true;
};

class RecordIndex {
 public:
  // Scans `filename` (uncompressed TFRecord). NOT_FOUND when missing; DATA_LOSS naming the file
  // and offset for a corrupt length or a truncated record.
  static absl::StatusOr<RecordIndex> Build(const std::string& filename);
  // A fresh cached index of `filename`, or Build() and (options.persist) cache it. A cache file
  // that is stale, corrupt or of another version is rebuilt. *built (when non-null) says
  // whether the file was scanned.
  static absl::StatusOr<RecordIndex> LoadOrBuild(const std::string& filename,
                                                 const RecordIndexOptions& options = {},
                                                 bool* built = nullptr);
  // Reads an index file; NOT_FOUND when missing, DATA_LOSS when corrupt (naming it).
  static absl::StatusOr<RecordIndex> Load(const std::string& index_path);
  // Writes this index to `index_path` atomically (temporary file + rename).
  absl::Status Save(const std::string& index_path) const;

  int64_t num_records() const { return static_cast<int64_t>(offsets_.size()); }
  // Byte offset of record i (0 <= i < num_records()); record i ends where i + 1 starts.
  uint64_t offset(int64_t i) const { return offsets_[static_cast<size_t>(i)]; }
  const std::vector<uint64_t>& offsets() const { return offsets_; }
  // The data file's size and mtime when it was indexed.
  const FileStat& file_stat() const { return stat_; }

 private:
  FileStat stat_;
  std::vector<uint64_t> offsets_;
};

// Where LoadOrBuild keeps the index of `filename` under `options` (a remote file's index goes to
// options.cache_dir, else $TMPDIR/sluice-index).
std::string RecordIndexPath(const std::string& filename, const RecordIndexOptions& options);

// Byte offset of record `i` of a fixed-length record file.
inline uint64_t FixedLengthRecordOffset(int64_t header_bytes, int64_t record_bytes, int64_t i) {
  return static_cast<uint64_t>(header_bytes) +
         static_cast<uint64_t>(i) * static_cast<uint64_t>(record_bytes);
}

}  // namespace sluice

#endif  // SLUICE_CORE_RECORD_INDEX_H_
