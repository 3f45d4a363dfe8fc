// The raw record of an element: the tensors' bytes behind a small header, so that reading one
// back is a bounds check and one copy per tensor (per string for string tensors), with no
// protobuf parse; from a mapped chunk (ParseRawElementInPlace) aligned numeric tensors are
// views and only strings are copied. Snapshot chunks of format version 2 hold one such record per element
// (core/data/ops/snapshot_chunk.h); the element's nesting is not in the record but in the
// element spec it is read against (the snapshot's manifest), so a record is its spec's leaves,
// in Flatten() order: any number of dense components, which is also what a composite value
// (sparse, ragged) decomposes into.
//
// Layout, every integer little-endian, every section starting at a multiple of 8 bytes from the
// record's start (numeric data is 8-byte aligned within the record; padding is zero):
//
//   uint64 num_components
//   per component:  uint32 dtype (sluice::DType) | uint32 rank | int64 dims[rank]
//   per component, in the same order, its data:
//     numeric:  the row-major bytes (num_elements * DTypeSize), padded to a multiple of 8
//     string:   uint64 lengths[num_elements], then the strings' bytes back to back, padded
//
// Example: {'label': int64 (2,), 'image': string (2,) "ab","c"} (Flatten order: image, label)
//   02 00.. | 0e 00 00 00 01 00 00 00 02 00.. | 05 00 00 00 01 00 00 00 02 00.. |
//   lengths 2,1 | "abc" + 5 zero bytes | two int64s
//
//   std::string record;                         // reused: no allocation once grown
//   SerializeRawElement(element, &record);
//   ASSIGN_OR_RETURN(Element e, ParseRawElement(record, spec, "op 0 (load)"));
//
// Thread safety: pure functions of their arguments.
#ifndef SLUICE_CORE_TENSOR_RAW_ELEMENT_H_
#define SLUICE_CORE_TENSOR_RAW_ELEMENT_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "sluice/element.h"
#include "sluice/tensor.h"

namespace sluice {

// Replaces *out with the raw record of `e` (host tensors). Keeps out's capacity.
void SerializeRawElement(const Element& e, std::string* out);

// The element a raw record holds, nested as `spec`. Every size in the record is checked against
// the bytes the record has left before anything is allocated; the tensors are charged to the
// process's memory budget. Errors (the caller adds the file and position):
//   DATA_LOSS           a size that does not fit the record, a dtype that is no dtype, a negative
//                       dimension, a bool that is neither 0 nor 1, bytes left over at the end
//   FAILED_PRECONDITION a well-formed record of another spec (component count, dtype, shape)
//   RESOURCE_EXHAUSTED  the memory budget refused a tensor (naming `what`)
absl::StatusOr<Element> ParseRawElement(absl::string_view record, const ElementSpec& spec,
                                        absl::string_view what);

// As ParseRawElement for a record that lies inside `backing` (a mapped chunk file), with the
// same checks and errors: each numeric component whose bytes are aligned there for its dtype
// (a multiple of its size) is a view of `backing` (core/tensor/charged_view.h: charged to the
// memory budget as a copy would be, and keeping `backing` alive), any other one copied; strings
// are copied once (a string tensor owns its strings). INVALID_ARGUMENT when `record` is not
// inside `backing`.
// With `crc`, *crc is the CRC32C (core/util/crc32c.h, unmasked) of the whole record once the
// parse succeeds, computed in the same pass (each string summed from its copy, while that is
// in the cache: the record's bytes are read from memory once, where a checksum pass before the
// parse reads them twice); after an error it covers only a prefix. The caller compares it
// before it uses the element.
absl::StatusOr<Element> ParseRawElementInPlace(absl::string_view record,
                                               const std::shared_ptr<TensorBuffer>& backing,
                                               const ElementSpec& spec, absl::string_view what,
                                               uint32_t* crc = nullptr);

}  // namespace sluice

#endif  // SLUICE_CORE_TENSOR_RAW_ELEMENT_H_
