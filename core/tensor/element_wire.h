// Writes an Element as the wire format of a serialized proto::ElementProto, straight from the
// tensors' bytes: no intermediate ElementProto (which would copy every string and buffer once
// into the proto, then once more into the serialized string).
//
// The bytes are exactly those of ElementToProto(e).SerializeToString() (field order, proto3's
// omission of default scalars, packed shapes), so readers of ElementProto records, old and new,
// read them unchanged: the on-disk format of snapshot chunks does not change.
//
//   std::string record;                    // reused across elements: no allocation once grown
//   SerializeElementProto(element, &record);
//
// Thread safety: a pure function of its arguments.
#ifndef SLUICE_CORE_TENSOR_ELEMENT_WIRE_H_
#define SLUICE_CORE_TENSOR_ELEMENT_WIRE_H_

#include <string>

#include "absl/status/statusor.h"
#include "proto/tensor.pb.h"
#include "sluice/element.h"

namespace sluice {

// Replaces *out with the serialized ElementProto of `e`. Keeps out's capacity.
void SerializeElementProto(const Element& e, std::string* out);

// The reading side: ElementFromProto (core/tensor/proto_convert.h, which defines this beside it
// and checks the same), but the strings move out of *p instead of being copied; *p is left
// unspecified. Saves one copy of every string of a snapshot element read back.
absl::StatusOr<Element> ConsumeElementProto(proto::ElementProto* p);

}  // namespace sluice

#endif  // SLUICE_CORE_TENSOR_ELEMENT_WIRE_H_
