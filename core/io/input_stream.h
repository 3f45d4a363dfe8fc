// Sequential byte sources for the record readers: an interface, a file or URL (opened through
// core/io/file_system.h: read(2) on a descriptor for local files, seekable) and an in-memory
// string (for tests and fuzzing). Buffering is the reader's job (core/io/tfrecord_reader.h), so
// Read() may be called with large counts.
//
// Thread safety: none; one caller at a time.
#ifndef SLUICE_CORE_INPUT_STREAM_H_
#define SLUICE_CORE_INPUT_STREAM_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace sluice {

class InputStream {
 public:
  virtual ~InputStream() = default;
  // Reads up to `n` bytes into `dst`; returns how many, 0 only at the end of the stream. Errors
  // name the stream (a file's errno as its status code).
  virtual absl::StatusOr<size_t> Read(char* dst, size_t n) = 0;
  // Moves to byte `offset` from the start; UNIMPLEMENTED where the stream cannot seek.
  virtual absl::Status Seek(uint64_t offset) = 0;
  // The name errors use (a file name).
  virtual const std::string& name() const = 0;
};

// Opens `filename` (a path or a URL, core/io/file_system.h) for reading through the file system of
// its scheme: NOT_FOUND naming it when missing, else the errno's (or the store's) code.
absl::StatusOr<std::unique_ptr<InputStream>> OpenFileStream(const std::string& filename);

// Reads `data` (copied) under the name `name`.
std::unique_ptr<InputStream> NewStringStream(std::string name, std::string data);

// Size and modification time of a file (a path or a URL), for staleness checks. NOT_FOUND
// naming it when missing.
struct FileStat {
  uint64_t size = 0;
  int64_t mtime_ns = 0;
};
absl::StatusOr<FileStat> StatFile(const std::string& filename);

// The status for errno `err` while doing `what` ("open", "read") on `filename`.
absl::Status FileError(int err, absl::string_view what, const std::string& filename);

}  // namespace sluice

#endif  // SLUICE_CORE_INPUT_STREAM_H_
