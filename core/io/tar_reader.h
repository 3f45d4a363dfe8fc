// TarReader: the regular files of a tar archive (POSIX ustar, GNU long names, pax `path` and
// `size` records), streamed from an InputStream without extracting: Next() gives a member's
// name and size, ReadData() its bytes; a member not read is skipped with a seek. Directories,
// links and other entries are passed over. Uncompressed archives only.
//
// Errors name the archive and the byte offset: DATA_LOSS for a header whose checksum does not
// match ("not a tar archive?" at offset 0), a size field that is not a number, an archive that
// ends inside a header or a member's data; the stream's own errors as they come.
//
// Thread safety: none; one caller at a time.
#ifndef SLUICE_CORE_TAR_READER_H_
#define SLUICE_CORE_TAR_READER_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "core/io/input_stream.h"

namespace sluice {

struct TarMember {
  std::string name;     // the path inside the archive
  uint64_t size = 0;    // bytes of data
  uint64_t offset = 0;  // where its data starts in the archive
};

class TarReader {
 public:
  explicit TarReader(std::unique_ptr<InputStream> in) : in_(std::move(in)) {}

  // The next regular file. OUT_OF_RANGE at the end of the archive (two zero blocks or the end
  // of the stream at a block boundary).
  absl::Status Next(TarMember* member);
  // The data of the member Next() returned last; at most once per member.
  absl::Status ReadData(std::string* out);

  const std::string& name() const { return in_->name(); }

 private:
  absl::Status ReadExact(char* dst, size_t n, bool* at_end);
  // Moves past what is left of the current member (data and padding).
  absl::Status SkipRest();

  std::unique_ptr<InputStream> in_;
  uint64_t pos_ = 0;        // bytes consumed from the stream
  uint64_t data_left_ = 0;  // unread data bytes of the current member
  uint64_t padding_ = 0;    // padding after them
  std::string current_;     // the current member's name, for errors
};

}  // namespace sluice

#endif  // SLUICE_CORE_TAR_READER_H_
