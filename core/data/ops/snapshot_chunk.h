// One chunk file of a distributed snapshot (layout: snapshot_manifest.h): TFRecord framing
// (masked CRC32C of length and data; optional GZIP / ZLIB) around one record per element, in
// the order they were produced. The record format is the manifest's format_version: 2 (what
// saves write) a raw element record (core/tensor/raw_element.h: a small header, then each
// tensor's bytes; read back with one copy per tensor), 1 a serialized proto::ElementProto.
//
// Writing commits a chunk or leaves nothing: the records go to DIR/chunks/.tmp-<name>-<pid>-<n>
// (created with O_EXCL), which Commit() fsyncs and renames to DIR/chunks/<name>, then fsyncs
// the folder. On an object store (s3://, gs://) there is no rename: the records are uploaded
// to DIR/chunks/<name> itself (core/io/object_store_upload.h), which appears whole when
// Commit() completes the upload; a writer destroyed before aborts it. A chunk file name is a function of the input it holds (the fingerprint of the
// split's graph), so a writer that runs again after a crash, or beside a writer taken for dead,
// writes the same name: the rename replaces one whole chunk with another, and every element is
// in the snapshot exactly once.
//
//   ASSIGN_OR_RETURN(auto w, SnapshotChunkWriter::Create(dir, name, Compression::kNone,
//                                                        kSnapshotFormatVersion));
//   RETURN_IF_ERROR(w->Append(element));
//   RETURN_IF_ERROR(w->Commit());
//
// Reading: SnapshotChunkReader yields the elements and checks each against the snapshot's
// element spec. Errors name the chunk file: DATA_LOSS for a record that fails its checksum, is
// truncated, does not parse as a record of its format or holds an invalid tensor;
// FAILED_PRECONDITION for an element of another spec; RESOURCE_EXHAUSTED when the memory
// budget refuses a buffer (the record reader's limits: core/io/tfrecord_reader.h).
//
// Thread safety: none; one writer or reader per thread.
#ifndef SLUICE_CORE_DATA_OPS_SNAPSHOT_CHUNK_H_
#define SLUICE_CORE_DATA_OPS_SNAPSHOT_CHUNK_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/io/tfrecord_reader.h"
#include "core/io/tfrecord_writer.h"
#include "core/io/zlib_stream.h"
#include "sluice/element.h"

namespace sluice {

class SnapshotChunkWriter {
 public:
  // Creates the temporary file of chunk `name` in DIR/chunks/ (which must exist), for records
  // of `format_version` (1 or 2; INVALID_ARGUMENT otherwise). Local directories, or an object
  // store's (UNIMPLEMENTED for other schemes: CheckSnapshotWritable); errors name the file.
  static absl::StatusOr<std::unique_ptr<SnapshotChunkWriter>> Create(
      const std::string& directory, const std::string& name, Compression compression,
      int64_t format_version);
  // Removes the temporary file (aborts the upload) unless Commit() succeeded.
  ~SnapshotChunkWriter();
  SnapshotChunkWriter(const SnapshotChunkWriter&) = delete;
  SnapshotChunkWriter& operator=(const SnapshotChunkWriter&) = delete;

  absl::Status Append(const Element& element);
  // Closes, fsyncs and renames the file to its name; then the folder is fsynced.
  absl::Status Commit();
  int64_t num_elements() const { return num_elements_; }

 private:
  SnapshotChunkWriter(std::string temp, std::string final_name,
                      std::unique_ptr<TFRecordWriter> writer, int sync_fd, bool raw)
      : temp_(std::move(temp)),
        final_(std::move(final_name)),
        writer_(std::move(writer)),
        sync_fd_(sync_fd),
        raw_(raw) {}

  // Append() starts the write-back of the temporary file after this many bytes (sync_file_range
  // without waiting): Commit()'s fsync then waits for the last few MiB, not the whole chunk.
  static constexpr int64_t kWritebackEveryBytes = 8 << 20;

  const std::string temp_;  // empty for an upload
  const std::string final_;
  std::unique_ptr<TFRecordWriter> writer_;
  // -1 for an upload; else a second descriptor of temp_, for the fsync after the writer closes
  int sync_fd_;
  const bool raw_;  // format 2: raw element records; else ElementProto records
  bool committed_ = false;
  int64_t num_elements_ = 0;
  int64_t unsynced_bytes_ = 0;  // appended since the last write-back started
  std::string record_;  // reused: one allocation per chunk once it fits the largest element
};

// How a chunk is read. Mapping: an uncompressed local chunk is mapped by its TFRecordReader
// (core/io/tfrecord_reader.h, map_local_file) instead of read: no read(2) copy. Raw element
// records (format 2) are then read as views of the mapping, each record's checksum computed in
// the same pass as its parse (each string summed from its copy: the bytes are read from memory
// once) and compared before the element is handed out, and every numeric component
// that lies aligned for its dtype in the file handed out as a view of the mapping (charged to
// the memory budget as a copy would be, core/tensor/charged_view.h; the view keeps the mapping
// alive after the reader and the dataset are gone); strings are copied once. Format 1 records
// are copied out of the mapping and parsed. Compressed chunks and object stores are read. When
// the process already has kMaxGuardedRanges mappings alive (views hold them), a chunk is read
// instead, the same elements copied (core/io/mapping_truncation_guard.h).
//
// SIGBUS policy: only committed chunks are opened (load() never opens a .tmp- file), and a
// committed chunk is never written in place (it appears by rename, whole; a retried split
// renames a new file over it, which leaves a mapping of the old one intact). What remains is a
// foreign process truncating a chunk in place while it is mapped: `expected_bytes` (the size the
// manifest lists) catches one truncated before it is opened; one truncated while mapped is
// DATA_LOSS ("file F was truncated while it was read"), not SIGBUS, as for any TFRecord file
// the reader maps; a view handed out before the truncation reads zeros where the file lost
// bytes. `map = false` reads instead.
struct SnapshotChunkReadOptions {
  // Map an uncompressed local chunk of format 2 (above); false: always read.
  bool map = true;
  // The chunk's size in bytes as the manifest lists it, checked before any record is read
  // (DATA_LOSS naming the chunk and both sizes); -1: unknown (a manifest written before sizes
  // were listed, or wait=True before the manifest is done), not checked.
  int64_t expected_bytes = -1;
};

class SnapshotChunkReader {
 public:
  // Opens `filename` (any scheme the FileSystem layer reads), a chunk of `format_version` (0 or
  // 1: ElementProto records; 2: raw element records; INVALID_ARGUMENT otherwise). NOT_FOUND
  // naming it; DATA_LOSS when its size is not options.expected_bytes.
  static absl::StatusOr<std::unique_ptr<SnapshotChunkReader>> Open(
      const std::string& filename, Compression compression, int64_t format_version,
      ElementSpec spec, const SnapshotChunkReadOptions& options = {});
  // The next element; *end_of_chunk at the clean end of the file. Errors above.
  absl::Status Next(Element* out, bool* end_of_chunk);

  // A record of a mapped chunk framed by NextRecord, its data not yet touched: neither its
  // checksum verified (VerifyRecord) nor its element decoded (DecodeVerified).
  struct FramedRecord {
    absl::string_view data;                   // a view of the mapping (mapped_file())
    TFRecordReader::UncheckedData unchecked;  // the checksum `data` must have
    int64_t index = 0;                        // the element's position in the chunk
  };
  // Mapped chunks only (requires mapped()): as Next, but reads only the record's framing (its
  // length and the length's checksum), so that the data's first touch, the checksum pass, can
  // run on another thread (load's read-ahead, snapshot_read_ahead.h). Errors of the framing as
  // Next's; the record counts in num_read().
  absl::Status NextRecord(FramedRecord* out, bool* end_of_chunk);
  // OK when `record` (from this reader's NextRecord) has its checksum; else Next's DATA_LOSS
  // naming the chunk and the record's offset, or "file F was truncated while it was read" when
  // the chunk has shrunk since it was mapped. Const and thread-safe: many calls may run at once,
  // on any threads, while NextRecord goes on; the reader must outlive them.
  absl::Status VerifyRecord(const FramedRecord& record) const;
  // The element of a record VerifyRecord passed, as Next decodes it, with Next's errors.
  // Thread-safe as VerifyRecord.
  absl::StatusOr<Element> DecodeVerified(const FramedRecord& record) const {
    return Decode(record.data, record.index);
  }
  int64_t num_read() const { return num_read_; }
  const std::string& filename() const { return filename_; }
  // Whether the chunk's raw records are views of its mapping (SnapshotChunkReadOptions) rather
  // than copies.
  bool mapped() const { return mapped_file_ != nullptr; }

 private:
  SnapshotChunkReader(std::string filename, std::unique_ptr<TFRecordReader> reader, bool raw,
                      ElementSpec spec)
      : filename_(std::move(filename)),
        reader_(std::move(reader)),
        mapped_file_(raw ? reader_->mapped_file() : nullptr),
        raw_(raw),
        spec_(std::move(spec)) {}

  // The element `record` of the chunk's format holds, checked against spec_. Thread-safe.
  absl::StatusOr<Element> Decode(absl::string_view record, int64_t index) const;
  // The error for element `index` of a raw record that failed to parse with `s` (not OK).
  absl::StatusOr<Element> RawError(absl::Status s, int64_t index) const;

  const std::string filename_;
  const std::unique_ptr<TFRecordReader> reader_;
  // The mapping raw records are read from as views; null when they are copied.
  const std::shared_ptr<TensorBuffer> mapped_file_;
  std::shared_ptr<const void> view_owner_;  // ReadRecordView's (the mapping)
  const bool raw_;
  const ElementSpec spec_;
  std::string record_;  // reused: read without a zero-fill once it fits the largest record
  int64_t num_read_ = 0;
};

// Counts the records of a chunk, checking only their framing (length checksums); the elements
// are not parsed. Errors as SnapshotChunkReader's.
absl::StatusOr<int64_t> CountSnapshotChunkRecords(const std::string& filename,
                                                  Compression compression);

}  // namespace sluice

#endif  // SLUICE_CORE_DATA_OPS_SNAPSHOT_CHUNK_H_
