// JsonlLineIndex: where the elements of a JSON Lines file start, sparsely, for random access to
// jsonl_dataset (random_access_source.h). Element e of a file is its e-th non-blank line
// (jsonl_line_scanner.h says which lines are blank).
//
// The index keeps a checkpoint (element number, line number, byte offset) for the first element
// and then for the first element starting at least `spacing_bytes` after the last checkpoint, so
// it holds at most file size / spacing_bytes + 1 checkpoints (24 bytes each: 384 KiB for 1 GiB
// of text at the default 64 KiB), and finding element e means reading forward from the last
// checkpoint at or before it: at most spacing_bytes plus one line.
//
// Built by one sequential read of the file (through core/io: local paths, s3://, ...) that keeps
// no line; it records the file's size and modification time, and a file whose size or mtime
// changed while it was read is an error naming it. Random access checks, as it reads, that
// checkpoints still start lines where the index says (a file changed since is DATA_LOSS naming
// it).
//
// Thread safety: a const JsonlLineIndex may be shared.
#ifndef SLUICE_CORE_DATA_OPS_JSONL_LINE_INDEX_H_
#define SLUICE_CORE_DATA_OPS_JSONL_LINE_INDEX_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/io/input_stream.h"

namespace sluice {

class JsonlLineIndex {
 public:
  static constexpr size_t kDefaultSpacingBytes = 64 << 10;

  struct Checkpoint {
    int64_t element = 0;  // element number in the file, from 0
    int64_t line = 0;     // the element's line number, from 1
    uint64_t offset = 0;  // byte offset of the line's first byte
  };

  // Reads `filename` once. NOT_FOUND when missing, the read's errors naming the file, ABORTED
  // naming it when its size or mtime changed while it was read or it gives a block more than
  // its size (a writer is still at work; a device or pipe that never ends).
  static absl::StatusOr<JsonlLineIndex> Build(const std::string& filename,
                                              size_t spacing_bytes = kDefaultSpacingBytes);

  int64_t num_elements() const { return num_elements_; }
  // The checkpoints, in element order; empty when the file has no element.
  const std::vector<Checkpoint>& checkpoints() const { return checkpoints_; }
  // The position in checkpoints() of the last checkpoint at or before `element`; requires
  // 0 <= element < num_elements().
  size_t CheckpointBefore(int64_t element) const;
  // The file's size and mtime when it was indexed.
  const FileStat& file_stat() const { return stat_; }

 private:
  FileStat stat_;
  int64_t num_elements_ = 0;
  std::vector<Checkpoint> checkpoints_;
};

}  // namespace sluice

#endif  // SLUICE_CORE_DATA_OPS_JSONL_LINE_INDEX_H_
