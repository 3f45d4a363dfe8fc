// Keeps a mapped file that another process truncates while it is mapped from killing the
// process. Touching a mapped page past the new end of a file raises SIGBUS; while a range is
// guarded, a SIGBUS inside it is handled by mapping a page of zeros over the faulting page and
// marking the range truncated, so the access reads zeros instead. Readers of the range check
// truncated() (and their checksums fail on the zeros), and report DATA_LOSS.
//
//   std::shared_ptr<MappedFile> file = ...;
//   MappingTruncationGuard guard(file->bytes());   // before any page is touched
//   ... read file->bytes() ...
//   if (guard.truncated()) return DataLoss(...);   // the zeros read are not the file's
//
// The process-wide SIGBUS handler is installed with the first guard and stays; a SIGBUS outside
// every guarded range restores the handler that was there before (the default: the process
// dies, as it would have), so other faults keep their meaning. At most kMaxGuardedRanges ranges
// are guarded at once; a range beyond that is unguarded (guarded() says so) and its reader
// must not map (it falls back to read()).
//
// Thread safety: a guard is created and destroyed on any thread; truncated() may be read on
// any thread. The guard must be destroyed before the range is unmapped.
#ifndef SLUICE_CORE_IO_MAPPING_TRUNCATION_GUARD_H_
#define SLUICE_CORE_IO_MAPPING_TRUNCATION_GUARD_H_

#include <cstddef>

#include "absl/strings/string_view.h"

namespace sluice {

inline constexpr int kMaxGuardedRanges = 1024;

class MappingTruncationGuard {
 public:
  explicit MappingTruncationGuard(absl::string_view range);
  ~MappingTruncationGuard();
  MappingTruncationGuard(const MappingTruncationGuard&) = delete;
  MappingTruncationGuard& operator=(const MappingTruncationGuard&) = delete;

  // Whether the range has a slot (false: every slot was taken, or the handler could not be
  // installed; the range is then not protected).
  bool guarded() const { return slot_ >= 0; }
  // Whether a page of the range was found past the end of its file and replaced with zeros.
  bool truncated() const;

 private:
  int slot_ = -1;
};

}  // namespace sluice

#endif  // SLUICE_CORE_IO_MAPPING_TRUNCATION_GUARD_H_
