// The element error of an op that a source runs as part of itself (source fusion:
// SourceRegistration::absorbed_op, core/data/op_registry.h), raised where the op stands in the
// pipeline rather than at the source. Apart, the ops between the source and that op (repeat,
// take, skip, shard: they pass elements on whole) see the element the op then fails on, and
// count it as any other: shard(3, 1) keeps every third record whether or not the map fails on
// it. So a fused source that fails on an element it keeps hands out a stand-in element and
// defers the error here; the executor's place for the absorbed op (core/data/executor.cc) takes
// it when the stand-in reaches it and returns the error instead.
//
//   source:  DeferAbsorbedOpError(MarkElementError(refused)); *out = Element(); return OK;
//   place:   if (std::optional<absl::Status> e = TakeAbsorbedOpError()) return *e;
//
// Thread safety: the deferred error is the calling thread's. The ops between a source and its
// absorbed op pull on the caller's thread and hold no element back (they only pass it on or
// drop it through Iterator::Skip, which makes none), so the stand-in reaches the place within
// the same GetNext, on the same thread.
#ifndef SLUICE_CORE_DATA_ABSORBED_OP_ERROR_H_
#define SLUICE_CORE_DATA_ABSORBED_OP_ERROR_H_

#include <optional>

#include "absl/status/status.h"

namespace sluice {

// Records `error` (not OK) for this thread's next TakeAbsorbedOpError, replacing any not taken.
void DeferAbsorbedOpError(absl::Status error);

// The error DeferAbsorbedOpError recorded on this thread since the last call, taken; nullopt
// when none was.
std::optional<absl::Status> TakeAbsorbedOpError();

}  // namespace sluice

#endif  // SLUICE_CORE_DATA_ABSORBED_OP_ERROR_H_
