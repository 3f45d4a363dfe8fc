// JsonlLineScanner: the lines of one JSON Lines file as jsonl_dataset counts them, read in blocks
// from a byte source: a stream from the file's start (the sequential iterator, the line index's
// build), or a random-access file from any line start (random access, jsonl_line_index.h).
//
//   JsonlLineScanner scanner(1 << 20);
//   scanner.Reset([&](char* dst, size_t n) { return stream->Read(dst, n); }, 0, 0);
//   JsonlLineScanner::Line line;
//   bool have = false;
//   while (scanner.Next(limit, &line, &have).ok() && have) { ... }
//
// A line ends at '\n' or at the end of the file (a last line without '\n' is still a line); a
// trailing '\r' is not part of it. A line is *blank* when it holds only spaces, tabs and '\r',
// whatever its length: blank lines are not elements, every other line is one element (valid
// JSON or not). The sequential iterator and the line index both count elements this way, so an
// element's position does not depend on the element limit of the process that counts.
//
// A line longer than `max_line_bytes` is skipped to its end without being kept (memory stays
// bounded by the block and the limit) and reported `too_long`.
//
// Thread safety: none (one user at a time).
#ifndef SLUICE_CORE_DATA_OPS_JSONL_LINE_SCANNER_H_
#define SLUICE_CORE_DATA_OPS_JSONL_LINE_SCANNER_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace sluice {

class JsonlLineScanner {
 public:
  // Reads up to `n` bytes into `dst`, the next bytes of the file; 0 at its end.
  using ReadFn = std::function<absl::StatusOr<size_t>(char* dst, size_t n)>;

  struct Line {
    // The line's bytes (without '\n' and a trailing '\r'), valid until the next Next or Reset
    // and readable for simdjson's padding (SIMDJSON_PADDING bytes) past `length`. Not set when
    // too_long.
    const char* data = nullptr;
    size_t length = 0;
    bool too_long = false;
    bool blank = false;
    int64_t number = 0;   // within the file, from 1
    uint64_t offset = 0;  // byte offset of its first byte in the file
  };

  // Reads `block_bytes` (> 0) at a time.
  explicit JsonlLineScanner(size_t block_bytes);

  // Starts over: `read` gives the file's bytes from byte `offset` on, where line
  // `lines_before` + 1 starts.
  void Reset(ReadFn read, uint64_t offset, int64_t lines_before);

  // The next line; *have is false at the end of the file. Errors are `read`'s (the scanner is
  // then at an unspecified place: Reset before using it again).
  absl::Status Next(size_t max_line_bytes, Line* line, bool* have);

  // The byte offset where the next line starts.
  uint64_t next_offset() const { return next_offset_; }

 private:
  void Append(const char* p, size_t n);

  const size_t block_bytes_;
  ReadFn read_;
  std::vector<char> block_;  // block_bytes_ + padding
  size_t pos_ = 0;
  size_t end_ = 0;
  std::vector<char> carry_;  // a line that crosses blocks, padded once complete
  size_t carry_size_ = 0;
  uint64_t next_offset_ = 0;
  int64_t lines_ = 0;  // lines returned since the file's start
};

}  // namespace sluice

#endif  // SLUICE_CORE_DATA_OPS_JSONL_LINE_SCANNER_H_
