#include "core/data/ops/jsonl_line_index.h"

#include <algorithm>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/data/ops/jsonl_line_scanner.h"
#include "core/util/status_macros.h"

namespace sluice {
namespace {

constexpr size_t kBuildBlockBytes = 1 << 20;

absl::Status Changed(const std::string& filename, const FileStat& before, const FileStat& after,
                     uint64_t bytes_read) {
  return absl::AbortedError(absl::StrCat(
      "jsonl_dataset: file ", filename, " changed while its lines were indexed (size ",
      before.size, " -> ", after.size, ", ", bytes_read, " bytes read, mtime ", before.mtime_ns,
      " -> ", after.mtime_ns, " ns): is a writer still at work?"));
}

}  // namespace

absl::StatusOr<JsonlLineIndex> JsonlLineIndex::Build(const std::string& filename,
                                                     size_t spacing_bytes) {
  JsonlLineIndex index;
  ASSIGN_OR_RETURN(index.stat_, StatFile(filename));
  ASSIGN_OR_RETURN(std::unique_ptr<InputStream> stream, OpenFileStream(filename));
  JsonlLineScanner scanner(kBuildBlockBytes);
  InputStream* in = stream.get();
  // Reads no more than the file had when it was stat'ed (and one block to see it end), so a
  // file that grows without end (a pipe, a writer at work) is an error, not an endless scan.
  const uint64_t bound = index.stat_.size + kBuildBlockBytes;
  uint64_t total = 0;
  scanner.Reset(
      [in, bound, &total, &filename](char* dst, size_t n) -> absl::StatusOr<size_t> {
        ASSIGN_OR_RETURN(size_t done, in->Read(dst, n));
        total += done;
        if (total > bound) {
          return absl::AbortedError(absl::StrCat("file ", filename, " grew past ", bound,
                                                 " bytes while its lines were indexed"));
        }
        return done;
      },
      0, 0);
  uint64_t next_checkpoint = 0;
  while (true) {
    JsonlLineScanner::Line line;
    bool have = false;
    // A limit of 0 bytes: lines are only counted, never kept.
    absl::Status s = scanner.Next(0, &line, &have);
    if (!s.ok()) {
      return absl::Status(s.code(), absl::StrCat("jsonl_dataset: indexing the lines of ",
                                                 filename, ": ", s.message()));
    }
    if (!have) break;
    if (line.blank) continue;
    if (index.checkpoints_.empty() || line.offset >= next_checkpoint) {
      index.checkpoints_.push_back({index.num_elements_, line.number, line.offset});
      next_checkpoint = line.offset + spacing_bytes;
    }
    ++index.num_elements_;
  }
  ASSIGN_OR_RETURN(FileStat after, StatFile(filename));
  if (after.size != index.stat_.size || after.mtime_ns != index.stat_.mtime_ns ||
      scanner.next_offset() != index.stat_.size) {
    return Changed(filename, index.stat_, after, scanner.next_offset());
  }
  index.checkpoints_.shrink_to_fit();
  return index;
}

size_t JsonlLineIndex::CheckpointBefore(int64_t element) const {
  auto it = std::upper_bound(
      checkpoints_.begin(), checkpoints_.end(), element,
      [](int64_t e, const Checkpoint& c) { return e < c.element; });
  return static_cast<size_t>(it - checkpoints_.begin()) - 1;
}

}  // namespace sluice
