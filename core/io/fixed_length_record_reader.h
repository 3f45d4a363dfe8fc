// Reads fixed-length record files as tf.data.FixedLengthRecordDataset does: `header_bytes`
// skipped, then records of `record_bytes` each, then `footer_bytes` skipped; optionally inside
// a GZIP or ZLIB stream.
//
// A body (file minus header and footer) that is not a multiple of record_bytes is TF's error:
// on an uncompressed file INVALID_ARGUMENT when opening, before any record; on a compressed one
// DATA_LOSS after the whole records (TF only learns the size at the end). Both read
// "Excluding the header (3 bytes) and footer (2 bytes), input file \"F\" has body length 14
// bytes, which is not an exact multiple of the record length (4 bytes)."
//
// Thread safety: none; one reader per thread.
#ifndef SLUICE_CORE_FIXED_LENGTH_RECORD_READER_H_
#define SLUICE_CORE_FIXED_LENGTH_RECORD_READER_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "core/io/input_stream.h"
#include "core/io/zlib_stream.h"

namespace sluice {

struct FixedLengthRecordOptions {
  int64_t record_bytes = 1;  // must be positive
  int64_t header_bytes = 0;
  int64_t footer_bytes = 0;
  Compression compression = Compression::kNone;
  size_t buffer_size = 256 << 10;  // 0: default
};

class FixedLengthRecordReader {
 public:
  // NOT_FOUND naming a missing file; INVALID_ARGUMENT for bad sizes or (uncompressed) a body
  // that is not a multiple of record_bytes.
  static absl::StatusOr<std::unique_ptr<FixedLengthRecordReader>> Open(
      const std::string& filename, const FixedLengthRecordOptions& options);

  // The next record. OUT_OF_RANGE at the end; DATA_LOSS for a short compressed body.
  absl::Status ReadRecord(std::string* record);
  // Where ReadRecordInto writes a record of `bytes` bytes: memory for them, or an error.
  using RecordDestination = absl::FunctionRef<absl::StatusOr<char*>(size_t bytes)>;
  // As ReadRecord, writing the record's record_bytes bytes to `destination(record_bytes)`,
  // which is called once the record is known to exist. On an uncompressed file the bytes not
  // buffered yet are read from the file straight there when the record is at least
  // kDirectReadBytes long: one copy from the page cache, none through a buffer (no buffer
  // allocated or faulted in for it either). OUT_OF_RANGE and DATA_LOSS as ReadRecord (DATA_LOSS
  // also when the file shrinks while the record is read: then the destination holds part of
  // it); an error of `destination` is returned as it is, with the record skipped (the next call
  // reads the one after it, as a reader whose caller failed on the record would).
  absl::Status ReadRecordInto(RecordDestination destination);
  static constexpr size_t kDirectReadBytes = 16 << 10;
  // As ReadRecord, without the record: on an uncompressed file its bytes are passed over in
  // the buffer, or with a seek when they are not buffered (not read); a compressed file's are
  // decompressed into a scratch buffer. OUT_OF_RANGE and DATA_LOSS as ReadRecord.
  absl::Status SkipRecord();
  // Positions at record `i` (seek on an uncompressed file, read-through on a compressed one,
  // where i must not be behind the current record: FAILED_PRECONDITION).
  absl::Status SeekToRecord(int64_t i);
  // The record count of an uncompressed file; nullopt for a compressed one.
  std::optional<int64_t> num_records() const { return num_records_; }
  int64_t next_record() const { return next_; }

 private:
  FixedLengthRecordReader(std::string filename, std::unique_ptr<InputStream> stream,
                          const FixedLengthRecordOptions& options);
  absl::Status Fill(size_t n);  // compressed: at least n bytes in pending_ unless EOF
  // ReadRecordInto of an uncompressed file: its buffered bytes, then straight from the file.
  absl::Status ReadUncompressedInto(RecordDestination destination);

  const std::string filename_;
  std::unique_ptr<InputStream> stream_;
  const FixedLengthRecordOptions options_;
  std::optional<int64_t> num_records_;
  int64_t next_ = 0;
  bool header_skipped_ = false;
  // Buffered bytes (uncompressed files: a window of the file; compressed: decompressed bytes).
  std::string pending_;
  size_t pos_ = 0;
  bool eof_ = false;
  uint64_t body_consumed_ = 0;  // compressed: body bytes handed out as records
  absl::Status error_;
  std::string skipped_;  // a compressed file's record SkipRecord passed over, reused
};

}  // namespace sluice

#endif  // SLUICE_CORE_FIXED_LENGTH_RECORD_READER_H_
