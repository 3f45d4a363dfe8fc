// TarReader: the regular files of a tar archive (POSIX ustar, GNU long names, pax `path` and
// `size` records), streamed from an InputStream without extracting: Next() gives a member's
// name and size, ReadData() its bytes; a member not read is skipped with a seek. Directories,
// links and other entries are passed over. Uncompressed archives only.
//
// A long name (GNU `L`) or pax extended header (`x`) applies to the one entry that follows it,
// whatever that entry is: one preceding a directory or a link is used up there and never names
// the next file. GNU long link names (`K`) and pax global headers (`g`) are read past and not
// applied (a global `path` would name every file alike).
//
// The archive's header fields are not trusted: a member's data is read in chunks as it
// arrives, so a header claiming 2 GiB over a few real bytes costs a chunk, not 2 GiB, and ends
// in DATA_LOSS at the byte where the archive does.
//
// Errors name the archive and the byte offset: DATA_LOSS for a header whose checksum does not
// match ("not a tar archive?" at offset 0), a size field that is not a number (or is over
// 2^62), a long-name or pax header over kMaxTarMetadataBytes, an archive that ends inside a
// header or a member's data ("truncated tar archive <name>: it ends at byte N, inside member
// 'm'"); RESOURCE_EXHAUSTED from ReadData for a member whose size is over
// TarReaderOptions::max_member_bytes; the stream's own errors as they come.
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

// The largest GNU long-name or pax header read (their data is a path and a few records).
inline constexpr uint64_t kMaxTarMetadataBytes = uint64_t{1} << 20;

struct TarReaderOptions {
  // The most bytes ReadData() returns for one member; a member that claims more is
  // RESOURCE_EXHAUSTED before anything is read. Readers of a pipeline pass the element limit
  // (core/data/memory_budget.h).
  uint64_t max_member_bytes = uint64_t{1} << 31;
};

struct TarMember {
  std::string name;     // the path inside the archive
  uint64_t size = 0;    // bytes of data
  uint64_t offset = 0;  // where its data starts in the archive
};

class TarReader {
 public:
  explicit TarReader(std::unique_ptr<InputStream> in, TarReaderOptions options = {})
      : in_(std::move(in)), options_(options) {}

  // The next regular file. OUT_OF_RANGE at the end of the archive (two zero blocks or the end
  // of the stream at a block boundary).
  absl::Status Next(TarMember* member);
  // The data of the member Next() returned last; at most once per member. RESOURCE_EXHAUSTED
  // naming the member, its offset and the limit when its size is over max_member_bytes;
  // DATA_LOSS when the archive ends inside it.
  absl::Status ReadData(std::string* out);

  const std::string& name() const { return in_->name(); }

 private:
  absl::Status ReadExact(char* dst, size_t n, bool* at_end);
  // Moves past what is left of the current member (data and padding).
  absl::Status SkipRest();
  // Reads the current entry's data_left_ bytes into *out, in chunks as they arrive.
  absl::Status ReadChunked(std::string* out);

  std::unique_ptr<InputStream> in_;
  const TarReaderOptions options_;
  uint64_t pos_ = 0;        // bytes consumed from the stream
  uint64_t data_left_ = 0;  // unread data bytes of the current member
  uint64_t padding_ = 0;    // padding after them
  std::string current_;     // the current member's name, for errors
};

}  // namespace sluice

#endif  // SLUICE_CORE_TAR_READER_H_
