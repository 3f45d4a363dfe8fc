// DeferredCheckBlockSource: a block source (Iterator::GetNextBlock) whose checks of a block's
// content, and the building of the block itself, can run after the read, on another thread,
// outside the caller's lock.
//
// Why: a parallel map that pulls a record file's blocks on the pool
// (Iterator::BlocksPullableOnPool) reads them under a lock, so that blocks come in file order;
// all the work done under that lock is serial, and it bounds how far the map scales. Verifying
// TFRecord data checksums, copying each record out of the read buffer and allocating its
// string are most of a read's CPU time and need no order, so a source implementing this
// interface only frames the records under the lock (which bytes are which record) and hands
// the rest back as a closure, which the map runs after releasing its lock, beside the next
// read.
//
//   DeferredCheckBlockSource::BlockCheck check;
//   { lock; s = source->GetNextBlockDeferringChecks(rows, &block, &n, &end, &check); }
//   int64_t good = n;
//   bool mapped = false;
//   if (check != nullptr) s = check(&block, &good, map_rows, &mapped);  // no lock held
//   // !s.ok(): use the block's first `good` rows, then end with s; pull the source no more.
//   // mapped: `block` is map_rows' result on those rows, not the rows themselves.
//
// Map-and-parse fusion (map_rows): a block of serialized records (a 1-D string block, such
// as a TFRecord file's) is built by copying every record out of the read buffer into a string
// of its own (a malloc, a copy and, after the parse, a free per record) only for a parse that
// reads each record once and copies out what it keeps. With a map_rows fn (the map's fn on a
// block of serialized rows, e.g. parse_example's tf.io.parse_example over the records' bytes),
// the check hands it views of the rows in the read buffers instead, each verified just before
// the fn reads it (RowCheck), and returns its result: one pass over the bytes fewer, no
// per-record allocation on the thread that maps, and each record's bytes read from memory once.
//
// Thread safety: GetNextBlockDeferringChecks as GetNextBlock (one call at a time); a returned
// BlockCheck may run on any thread, at most once, while the source is alive.
#ifndef SLUICE_CORE_DATA_DEFERRED_CHECK_BLOCKS_H_
#define SLUICE_CORE_DATA_DEFERRED_CHECK_BLOCKS_H_

#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "sluice/element.h"

namespace sluice {

// Verifies row `i` of the rows given to a SerializedRowsFn (a record's data checksum): OK, or
// the row's error.
using RowCheck = std::function<absl::Status(size_t i)>;

// A map's fn on a block of serialized rows given as views of their bytes: the same result as
// the map's block fn on the 1-D string tensor of those rows, or an error (the caller then maps
// that tensor its usual way, which finds and places the row's error). When `check` is set, the
// fn calls check(i), in row order, before it reads row i, and fails with its error: rows are
// verified just before they are parsed, while their bytes are in the L1 cache (one pass over
// each record from memory instead of two). Must be safe to call from many threads at once; the
// views are valid during the call only.
using SerializedRowsFn = std::function<absl::StatusOr<Element>(
    const std::vector<absl::string_view>& rows, const RowCheck& check)>;

class DeferredCheckBlockSource {
 public:
  // Completes and verifies the block it came with: *block is the `out` of that call, which the
  // check may build only now. OK, or the error GetNextBlock would have returned after the
  // block's first *good_rows rows (then set; *good_rows may be 0, and *block holds at least
  // those rows), e.g. DATA_LOSS naming the file and byte offset of a corrupted record, or
  // RESOURCE_EXHAUSTED when the memory budget refuses the block.
  // With `map_rows` set, a check whose block is 1-D string rows may instead call map_rows on
  // views of the block's rows, with a RowCheck that verifies each row as map_rows reaches it
  // (or on its verified rows alone), and return the result on its first *good_rows rows (the
  // verified ones before any bad row) in *block, setting *mapped; when map_rows fails it builds the unmapped block as without it (*mapped
  // false) so that the caller maps it, and places its errors, its usual way. *mapped is false
  // whenever *block holds the rows themselves.
  using BlockCheck = std::function<absl::Status(Element* block, int64_t* good_rows,
                                                const SerializedRowsFn& map_rows, bool* mapped)>;

  // As Iterator::GetNextBlock, except that checks of the block's content, and building *out,
  // may be left to *check (set to an empty function when there are none; *n is set either
  // way). The caller runs *check on *out before it uses the block; a failed check is the
  // source's terminal error: the caller uses the block's first *good_rows rows, then ends with
  // that error, and calls the source no more (it has read past the bad row). Errors found while reading are returned here, as GetNextBlock's.
  virtual absl::Status GetNextBlockDeferringChecks(int64_t max_elements, Element* out,
                                                   int64_t* n, bool* end_of_sequence,
                                                   BlockCheck* check) = 0;

 protected:
  ~DeferredCheckBlockSource() = default;
};

}  // namespace sluice

#endif  // SLUICE_CORE_DATA_DEFERRED_CHECK_BLOCKS_H_
