// Reads the records of an uncompressed TFRecord file that is mapped into memory
// (core/io/mapped_file.h) as views of the mapping: no read(2), no copy, no buffer. The framing
// and its checks are TFRecordReader's (core/io/tfrecord_reader.h), and so are the errors:
//   DATA_LOSS  "corrupted record at byte offset N of file F (length checksum mismatch)" /
//              "(data checksum mismatch)"; "truncated record at byte offset N of file F: ..."
//              when the file ends inside a record.
// Each record's data checksum is verified before its view is returned (the bytes are then in
// the cache for whoever parses them next). Nothing is allocated from a length in the file:
// every length is checked against the bytes the mapping has left.
//
//   ASSIGN_OR_RETURN(std::shared_ptr<MappedFile> file, MappedFile::Map(path));
//   MappedTFRecordReader reader(file);
//   absl::string_view record;
//   while ((s = reader.Next(&record)).ok()) { ... record points into *file ... }
//   if (!absl::IsOutOfRange(s)) return s;
//
// Thread safety: none; one reader per thread (the views may be read on any thread).
#ifndef SLUICE_CORE_IO_MAPPED_TFRECORD_READER_H_
#define SLUICE_CORE_IO_MAPPED_TFRECORD_READER_H_

#include <cstdint>
#include <memory>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "core/io/mapped_file.h"

namespace sluice {

class MappedTFRecordReader {
 public:
  explicit MappedTFRecordReader(std::shared_ptr<MappedFile> file) : file_(std::move(file)) {}

  // The next record's data, a view of the mapping that lives as long as file(). OUT_OF_RANGE
  // at the clean end of the file; DATA_LOSS as above, after which the reader is stuck on it.
  absl::Status Next(absl::string_view* record);

  // Byte offset of the next record.
  uint64_t offset() const { return offset_; }
  const std::shared_ptr<MappedFile>& file() const { return file_; }

 private:
  absl::Status Fail(absl::Status s) {
    error_ = s;
    return s;
  }

  const std::shared_ptr<MappedFile> file_;
  uint64_t offset_ = 0;
  absl::Status error_;
};

}  // namespace sluice

#endif  // SLUICE_CORE_IO_MAPPED_TFRECORD_READER_H_
