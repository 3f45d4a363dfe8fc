// Writes TFRecord files byte-identical to TensorFlow's tf.io.TFRecordWriter (framing in
// core/io/tfrecord_reader.h), uncompressed or GZIP / ZLIB compressed with the zlib parameters TF
// uses (level Z_DEFAULT_COMPRESSION, window bits 15 (+16 for gzip), memLevel 9, default
// strategy, no flushes before Close()).
//
// Thread safety: none; one writer per thread.
#ifndef SLUICE_CORE_TFRECORD_WRITER_H_
#define SLUICE_CORE_TFRECORD_WRITER_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/io/file_system.h"
#include "core/io/zlib_stream.h"

namespace sluice {

// Appends the framed record (header, data, data crc) to *out.
void AppendTFRecord(absl::string_view record, std::string* out);

class TFRecordWriter {
 public:
  // Creates or truncates `filename`. Errors name the file (errno's code).
  static absl::StatusOr<std::unique_ptr<TFRecordWriter>> Open(
      const std::string& filename, Compression compression = Compression::kNone);
  // Writes to the open descriptor `fd` (taking it over; Close() closes it), naming `filename`
  // in errors: for files opened under confinement (core/io/confined_open.h) or with O_EXCL.
  static absl::StatusOr<std::unique_ptr<TFRecordWriter>> FromDescriptor(
      const std::string& filename, int fd, Compression compression = Compression::kNone);
  // Writes to `file` (core/io/file_system.h: an object store's upload), which Close() closes,
  // making the whole file appear; a writer destroyed without Close() abandons it.
  static absl::StatusOr<std::unique_ptr<TFRecordWriter>> ToFile(
      std::unique_ptr<WritableFile> file, Compression compression = Compression::kNone);
  // Closes a descriptor if Close() was not called; errors are then lost, so call Close().
  ~TFRecordWriter();

  absl::Status Write(absl::string_view record);
  // Finishes the compressed stream, writes every buffered byte and closes the file.
  absl::Status Close();

 private:
  TFRecordWriter(std::string filename, int fd, Compression compression);
  absl::Status WriteRaw(const char* data, size_t n);  // to the file, through out_
  absl::Status FlushOut();
  absl::Status Deflate(const char* data, size_t n, int flush);

  const std::string filename_;
  int fd_;  // -1 when closed or writing to file_
  std::unique_ptr<WritableFile> file_;  // when writing to a WritableFile
  const Compression compression_;
  struct ZState;
  std::unique_ptr<ZState> z_;
  std::vector<char> out_;  // bytes waiting to be written to fd_
  size_t out_len_ = 0;
  std::string frame_;
  absl::Status error_;
};

}  // namespace sluice

#endif  // SLUICE_CORE_TFRECORD_WRITER_H_
