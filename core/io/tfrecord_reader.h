// Reads TFRecord files as tf.data.TFRecordDataset does. Each record is framed as
//
//   uint64 length (little-endian) | uint32 masked_crc32c(length) | data[length] |
//   uint32 masked_crc32c(data)
//
// (core/util/crc32c.h for the mask), optionally inside a GZIP or ZLIB stream. Reads are buffered
// (`buffer_size`, 256 KiB by default) and records are copied once, from the buffer or straight
// from the file, into the caller's string; or, with ReadRecordView, not at all: the caller gets
// a view into the buffer and a reference that keeps that buffer alive (a parallel map copies
// and parses the records on its own threads, outside the lock that orders the reads). Buffers
// are charged to the process's memory budget (core/tensor/host_memory.h) for as long as the
// reader or any view holds them; a buffer a view holds is never written again (the reader
// reads on into a new one, copying the partial record at its end, so records straddling two
// reads come out whole).
//
// A local uncompressed file (not an object store's) is mapped instead (core/io/mapped_file.h,
// `map_local_file`): records are then views of the mapping, which the views keep alive, and a
// parallel map's jobs, not the thread holding its read lock, are the first to touch a record's
// bytes beyond its header (no read(2) copy at all). The file's size is taken when it is opened
// (records appended later are not read). A file truncated while mapped does not kill the
// process (core/io/mapping_truncation_guard.h): the lost bytes read as zeros, and the reader or
// the records' checksums report DATA_LOSS. An empty or special file (size 0), or one that
// cannot be mapped, is read.
//
// Mappings and the memory budget: a mapping is not charged. Its pages are the page cache's
// (clean, file-backed, reclaimed by the kernel under pressure and read again when touched), not
// memory the process allocated, which is what the budget bounds. A view (ReadRecordView) keeps
// the whole mapping, and the file, alive after the reader is gone: callers bound how long (a
// parallel map drops its views once their block is checked; tensors viewing a snapshot chunk
// are charged as copies, core/tensor/charged_view.h). The number of mappings alive is bounded:
// each holds one of the truncation guard's kMaxGuardedRanges slots for as long as any view
// does, and a file opened while every slot is held is read (into charged buffers) instead.
// Unmapping a file whose pages are mapped is not free (about 1 ms per 50 MB here, zapping the
// page tables): with `unmap_pool` set, whichever thread drops the mapping's last reference
// schedules the unmap on that pool instead of running it (a parallel map's job would otherwise
// run it before it hands out its block, and every later block, in order, waits for that one).
//
// Errors (the reader is then stuck on them):
//   NOT_FOUND            the file is missing (naming it)
//   DATA_LOSS            "corrupted record at byte offset N of file F (length checksum
//                        mismatch)" / "(data checksum mismatch)"; "truncated record at byte
//                        offset N of file F: ..." when the file ends inside a record (TF also
//                        fails there); corrupt or truncated compressed data. Offsets of a
//                        compressed file are in its uncompressed bytes.
//                        A mapped file truncated under the reader: "file F was truncated
//                        while it was read (found at byte offset N)".
//   RESOURCE_EXHAUSTED   the memory budget refused a read buffer (naming the file).
//
// Thread safety: none; one reader per thread.
#ifndef SLUICE_CORE_TFRECORD_READER_H_
#define SLUICE_CORE_TFRECORD_READER_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/io/input_stream.h"
#include "core/io/zlib_stream.h"
#include "sluice/tensor.h"

namespace sluice {

class ThreadPool;

// TFRecord framing sizes.
inline constexpr size_t kTFRecordHeaderBytes = 12;  // length + its crc
inline constexpr size_t kTFRecordFooterBytes = 4;   // data crc

struct TFRecordReaderOptions {
  Compression compression = Compression::kNone;
  // Bytes buffered per read (uncompressed bytes; also the compressed read size). 0: default.
  size_t buffer_size = 256 << 10;
  // Open() maps an uncompressed local file rather than reading it (see above). false: read.
  bool map_local_file = true;
  // Where a mapping is unmapped once no view or reader holds it (see above): a closure on this
  // pool, which must outlive the mapping's views; null: on the thread dropping the last one.
  ThreadPool* unmap_pool = nullptr;
};

class TFRecordReader {
 public:
  // Opens `filename` (NOT_FOUND naming it when missing). Nothing is read yet.
  static absl::StatusOr<std::unique_ptr<TFRecordReader>> Open(
      const std::string& filename, const TFRecordReaderOptions& options = {});
  // Reads from `stream` (raw, possibly compressed bytes as `options` says); for tests and
  // fuzzing. `size`, when known, lets SkipRecord() detect truncation without reading.
  static std::unique_ptr<TFRecordReader> FromStream(std::unique_ptr<InputStream> stream,
                                                    const TFRecordReaderOptions& options = {},
                                                    std::optional<uint64_t> size = std::nullopt);

  // The next record into *record. OUT_OF_RANGE at the clean end of the file; DATA_LOSS as
  // above.
  absl::Status ReadRecord(std::string* record);
  // Where a record read by ReadRecordUnchecked lies and the checksum its data must have.
  struct UncheckedData {
    uint64_t offset = 0;      // byte offset of the record (uncompressed)
    uint32_t masked_crc = 0;  // the masked crc32c stored after the data
    // The masked crc32c is still in the file, in the 4 bytes right after the data (a record
    // framed by FrameMappedRecords, whose view reaches into the mapping): CheckData reads it
    // from there, and masked_crc is unused.
    bool crc_follows_data = false;
  };
  // As ReadRecord, except that the data checksum is not verified: *unchecked says what
  // CheckData needs to verify it later, on any thread (a parallel map verifies it outside the
  // lock that orders its reads). The reader moves past the record whatever its data; a
  // mismatch found later is the caller's to report, and it must not use later records then.
  absl::Status ReadRecordUnchecked(std::string* record, UncheckedData* unchecked);
  // OK when `data` has the checksum `unchecked` recorded; otherwise ReadRecord's DATA_LOSS
  // "corrupted record at byte offset N of file F (data checksum mismatch)", with `filename`
  // (this reader's filename()). Needs no reader: thread-safe.
  static absl::Status CheckData(absl::string_view data, const UncheckedData& unchecked,
                                absl::string_view filename);

  // As ReadRecordUnchecked, without copying: *data views the record in a read buffer (or the
  // mapping) that *owner keeps alive (*owner is replaced only when the buffer differs from the
  // one it holds, so a caller keeping one reference per buffer passes the last one back). The
  // buffer's bytes stay charged to the memory budget until the last such reference goes; a
  // record larger than the buffer comes in a string of its own, owned by *owner. The view stays
  // valid, and may be read on any thread, for as long as a reference lives, whatever the reader
  // does meanwhile.
  // The data checksum, as a policy per call: deferred to CheckData (`unchecked` set, what a
  // parallel map does off its read lock), or verified here before the view is returned
  // (`unchecked` null, as ReadRecord does: what a snapshot chunk's reader does; the bytes are
  // then in the cache for whoever parses them next), with ReadRecord's DATA_LOSS.
  absl::Status ReadRecordView(absl::string_view* data, UncheckedData* unchecked,
                              std::shared_ptr<const void>* owner);
  // A record FrameMappedRecords framed: its data in the mapping, and what CheckData needs.
  struct FramedRecord {
    absl::string_view data;
    UncheckedData unchecked;  // crc_follows_data
  };
  // Mapped readers only (FAILED_PRECONDITION otherwise): frames the next records as that many
  // ReadRecordView calls with `unchecked` set would, in one pass over their headers that reads
  // neither their data nor their data checksums (CheckData reads those, off the caller's lock):
  // appends up to `max_records` records to *out, stopping after the one whose data brings
  // *data_bytes (added to) over `max_bytes`. Each record's length checksum and its extent
  // (inside the file, under the element limit) are checked here, with ReadRecordView's errors.
  // Returns OK when it stopped at a limit, OUT_OF_RANGE at the clean end of the file, or the
  // error of the record that stopped it (sticky, as ReadRecordView's); the records appended
  // before are good to use either way. *owner is set as ReadRecordView sets it (the mapping).
  // This is the serial part of a parallel map over a TFRecord file (its read lock): the
  // next headers are prefetched at the stride of the last record (records of one file often
  // have one size), so their cache misses overlap instead of following one another.
  absl::Status FrameMappedRecords(int64_t max_records, int64_t max_bytes,
                                  std::vector<FramedRecord>* out, int64_t* data_bytes,
                                  std::shared_ptr<const void>* owner);

  // The mapping a mapped reader reads (null when it reads): every view of a record lies in it.
  // The pointer keeps the file mapped, and guarded against truncation, for as long as it lives
  // (a tensor viewing the mapping holds it: core/tensor/raw_element.h ParseRawElementInPlace).
  std::shared_ptr<TensorBuffer> mapped_file() const;

  // Moves past the next record checking only its length checksum (what the record index
  // needs): the data is skipped with a seek on an uncompressed file. Same errors as ReadRecord
  // except data checksum mismatches.
  absl::Status SkipRecord();
  // Positions the reader at byte `offset`, which must be the start of a record (from the record
  // index). FAILED_PRECONDITION on a compressed file.
  absl::Status Seek(uint64_t offset);

  // Pages of a mapped file for another thread to fault in (FaultIn) before the reader first
  // touches them: their bytes, and a reference that keeps the mapping alive meanwhile.
  struct PagesAhead {
    std::shared_ptr<const void> mapping;
    absl::string_view bytes;
  };
  // How far ahead of its position a mapped reader hands out pages to fault in.
  static constexpr uint64_t kFaultAheadBytes = 2 << 20;
  // Mapped only (nullopt otherwise, or when there is nothing new): the file's pages from the
  // reader's position up to kFaultAheadBytes past it that no earlier call handed out. A reader
  // that serializes its callers (a parallel map's input lock) lets them fault the pages in
  // after releasing its lock, so that its header reads under the lock find them mapped: the
  // page-table work of a mapped file (about a tenth of a parse pipeline's CPU) leaves the
  // serial part. Never needed for correctness.
  std::optional<PagesAhead> TakePagesAhead();
  // Maps `pages` into the page tables, reading them from the disk when they are not cached:
  // one read per 64 KiB, each read fault mapping its 64 KiB (the kernel's default
  // fault-around; with a smaller one the pages between are left for the reader to fault in).
  // Advisory. A page past the end of a file truncated since it was mapped reads zeros (the
  // mapping's truncation guard, held by `pages`), never SIGBUS, and marks the mapping
  // truncated: its reader then reports DATA_LOSS, possibly before it reaches the new end
  // (up to kFaultAheadBytes early). Thread-safe.
  static void FaultIn(const PagesAhead& pages);

  // Whether the reader reads from a mapping of the file (see above).
  bool mapped() const { return mapping_ != nullptr; }
  // Byte offset (uncompressed) of the next record.
  uint64_t offset() const { return offset_; }
  const std::string& filename() const { return stream_->name(); }

 private:
  TFRecordReader(std::unique_ptr<InputStream> stream, const TFRecordReaderOptions& options,
                 std::optional<uint64_t> size);

  // A read buffer: its bytes, charged to the process's memory budget while it lives.
  struct Chunk;
  // The file's mapping and its truncation guard, which views hold.
  struct Mapping;

  // Makes the reader read from `mapping` (the whole file, as one buffer that is never refilled).
  void UseMapping(std::shared_ptr<const Mapping> mapping);
  // DATA_LOSS when the mapped file was truncated under the reader (sticky).
  absl::Status CheckNotTruncated();
  // The DATA_LOSS that says the mapped file was truncated under the reader at offset_.
  absl::Status TruncatedWhileRead() const;
  // `s`, or TruncatedWhileRead() when `s` is a DATA_LOSS and the mapped file has shrunk since
  // it was mapped (the zeros past its new end are what failed the checks).
  absl::Status ExplainMappedFailure(absl::Status s) const;

  // Makes at least `n` (<= buffer_size_) bytes available in the buffer unless the stream ends
  // first; returns how many are available. Reads into a new buffer when there is none yet or
  // views hold the current one. RESOURCE_EXHAUSTED when the budget refuses the buffer.
  absl::StatusOr<size_t> Fill(size_t n);
  // Moves the unread bytes into a new buffer of buffer_size_ bytes.
  absl::Status NewChunk();
  // ReadHeader, then the checks of the length against the file's size and the element limit;
  // sets *total to the record's framed size. Failures are sticky (Fail).
  absl::Status ReadCheckedHeader(uint64_t* length, uint64_t* total);
  // The data and footer of a record whose header was consumed, into *record.
  absl::Status ReadData(uint64_t length, uint64_t total, std::string* record,
                        UncheckedData* unchecked);
  // Reads the header at offset_; sets *length. OUT_OF_RANGE at a clean end.
  absl::Status ReadHeader(uint64_t* length);
  // Copies `n` bytes into dst, from the buffer then the stream; returns how many (less at EOF).
  absl::StatusOr<size_t> ReadBytes(char* dst, size_t n);
  absl::Status Truncated(uint64_t record_bytes, uint64_t got) const;
  // ReadRecord (unchecked null) or ReadRecordUnchecked.
  absl::Status Read(std::string* record, UncheckedData* unchecked);
  absl::Status Fail(absl::Status s) {
    error_ = mapping_ != nullptr ? ExplainMappedFailure(std::move(s)) : std::move(s);
    return error_;
  }

  std::unique_ptr<InputStream> stream_;
  const bool compressed_;
  std::optional<uint64_t> size_;  // for a mapped file: the mapping's size
  const size_t buffer_size_;
  std::shared_ptr<Chunk> chunk_;  // null until the first read, and always when mapped
  std::shared_ptr<const Mapping> mapping_;  // null unless mapped
  char* buf_ = nullptr;           // chunk_'s bytes
  bool chunk_lent_ = false;       // a view holds chunk_: never write it again
  size_t pos_ = 0;    // next unread byte in buf_
  size_t limit_ = 0;  // end of valid bytes in buf_
  bool eof_ = false;
  uint64_t offset_ = 0;
  uint64_t faulted_ahead_to_ = 0;  // mapped: TakePagesAhead handed out pages up to here
  absl::Status error_;
};

}  // namespace sluice

#endif  // SLUICE_CORE_TFRECORD_READER_H_
