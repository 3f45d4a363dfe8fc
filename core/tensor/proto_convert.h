// Conversions between core types and their protos (proto/tensor.proto). The data plane does
// not use these for bulk tensor bytes; they serve literals, specs and control messages.
#ifndef SLUICE_CORE_PROTO_CONVERT_H_
#define SLUICE_CORE_PROTO_CONVERT_H_

#include "absl/status/statusor.h"
#include "sluice/element.h"
#include "proto/tensor.pb.h"

namespace sluice {

proto::TensorProto TensorToProto(const Tensor& t);
// INVALID_ARGUMENT if the dtype is unknown, a dim is negative or the content size is wrong.
absl::StatusOr<Tensor> TensorFromProto(const proto::TensorProto& p);

proto::TensorSpecProto TensorSpecToProto(const TensorSpec& s);
absl::StatusOr<TensorSpec> TensorSpecFromProto(const proto::TensorSpecProto& p);

// The structure of `n`, ignoring its leaf values.
template <typename T>
proto::StructureProto StructureToProto(const Nest<T>& n) {
  proto::StructureProto p;
  p.set_kind(static_cast<proto::StructureProto::Kind>(n.kind()));
  for (const auto& k : n.keys()) p.add_keys(k);
  for (const auto& c : n.children()) *p.add_children() = StructureToProto(c);
  for (int64_t d : n.composite_dims()) p.add_composite_dims(d);
  return p;
}
// A Nest<bool> with the structure of `p` (leaf values false); INVALID_ARGUMENT if malformed (a
// composite whose children are not leaves or are too few, dims below -1).
absl::StatusOr<Nest<bool>> StructureFromProto(const proto::StructureProto& p);

proto::ElementProto ElementToProto(const Element& e);
// INVALID_ARGUMENT naming the component when a composite's components disagree
// (sluice/composite_tensor.h: CheckComposites).
absl::StatusOr<Element> ElementFromProto(const proto::ElementProto& p);

proto::ElementSpecProto ElementSpecToProto(const ElementSpec& s);
// INVALID_ARGUMENT when a composite's component specs are not the ones its dtype and static
// shape give (SparseTensorSpecOf / RaggedTensorSpecOf).
absl::StatusOr<ElementSpec> ElementSpecFromProto(const proto::ElementSpecProto& p);

}  // namespace sluice

#endif  // SLUICE_CORE_PROTO_CONVERT_H_
