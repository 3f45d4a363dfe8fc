// DeferredCheckBlockSource: a block source (Iterator::GetNextBlock) whose checks of a block's
// content can run after the read, on another thread, outside the caller's lock.
//
// Why: a parallel map that pulls a record file's blocks on the pool
// (Iterator::BlocksPullableOnPool) reads them under a lock, so that blocks come in file order;
// all the work done under that lock is serial, and it bounds how far the map scales. Verifying
// TFRecord data checksums is about a third of a read's CPU time and needs no order, so a
// source implementing this interface reads without verifying and hands the verification back
// as a closure, which the map runs after releasing its lock, beside the next read.
//
//   DeferredCheckBlockSource::BlockCheck check;
//   { lock; s = source->GetNextBlockDeferringChecks(rows, &block, &n, &end, &check); }
//   int64_t good = n;
//   if (check != nullptr) s = check(&good);  // no lock held
//   // !s.ok(): use the block's first `good` rows, then end with s; pull the source no more.
//
// Thread safety: GetNextBlockDeferringChecks as GetNextBlock (one call at a time); a returned
// BlockCheck may run on any thread, at most once, while the source is alive.
#ifndef SLUICE_CORE_DATA_DEFERRED_CHECK_BLOCKS_H_
#define SLUICE_CORE_DATA_DEFERRED_CHECK_BLOCKS_H_

#include <cstdint>
#include <functional>

#include "absl/status/status.h"
#include "sluice/element.h"

namespace sluice {

class DeferredCheckBlockSource {
 public:
  // Verifies the block it came with. OK, or the error GetNextBlock would have returned after
  // the block's first *good_rows rows (then set; *good_rows may be 0), e.g. DATA_LOSS naming
  // the file and byte offset of a corrupted record.
  using BlockCheck = std::function<absl::Status(int64_t* good_rows)>;

  // As Iterator::GetNextBlock, except that checks of the block's content may be left to *check
  // (set to an empty function when there are none). The caller runs *check before it uses the
  // block; a failed check is the source's terminal error: the caller uses the block's first
  // *good_rows rows, then ends with that error, and calls the source no more (it has read past
  // the bad row). Errors found while reading are returned here, as GetNextBlock's.
  virtual absl::Status GetNextBlockDeferringChecks(int64_t max_elements, Element* out,
                                                   int64_t* n, bool* end_of_sequence,
                                                   BlockCheck* check) = 0;

 protected:
  ~DeferredCheckBlockSource() = default;
};

}  // namespace sluice

#endif  // SLUICE_CORE_DATA_DEFERRED_CHECK_BLOCKS_H_
