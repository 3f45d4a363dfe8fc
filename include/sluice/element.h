// Elements and their specs: what one step of a dataset yields, and its static description.
#ifndef SLUICE_CORE_ELEMENT_H_
#define SLUICE_CORE_ELEMENT_H_

#include <string>
#include <utility>
#include <vector>

#include "sluice/dtype.h"
#include "sluice/nest.h"
#include "sluice/shape.h"
#include "sluice/tensor.h"

namespace sluice {

// TF's TensorSpec: a dtype and a shape whose dimensions may be unknown.
struct TensorSpec {
  DType dtype = DType::kInvalid;
  Shape shape;

  // True if `t` has this dtype and a shape compatible with this one.
  bool IsCompatibleWith(const Tensor& t) const {
    return t.dtype() == dtype && shape.IsCompatibleWith(t.shape());
  }
  // "TensorSpec(shape=(None, 1), dtype=tf.float32, name=None)"
  std::string ToString() const {
    return "TensorSpec(shape=" + shape.ToString() + ", dtype=tf." + std::string(DTypeName(dtype)) +
           ", name=None)";
  }
  friend bool operator==(const TensorSpec& a, const TensorSpec& b) {
    return a.dtype == b.dtype && a.shape == b.shape;
  }
  friend bool operator!=(const TensorSpec& a, const TensorSpec& b) { return !(a == b); }
};

using Element = Nest<Tensor>;
using ElementSpec = Nest<TensorSpec>;

// The spec of a composite value node (sluice/composite_tensor.h): TF's SparseTensorSpec or
// RaggedTensorSpec of it, with TF's component specs. Defined in core/tensor/composite_tensor.cc.
ElementSpec CompositeSpecOf(const Element& node);

// The spec of a concrete element: each leaf's dtype and exact shape; a composite's spec as TF's
// *TensorSpec.from_value gives it.
inline ElementSpec SpecOf(const Element& e) {
  if (e.is_leaf()) return ElementSpec(TensorSpec{e.leaf().dtype(), e.leaf().shape()});
  if (e.is_composite()) return CompositeSpecOf(e);
  std::vector<ElementSpec> children;
  children.reserve(e.children().size());
  for (const Element& c : e.children()) children.push_back(SpecOf(c));
  return ElementSpec::FromParts(e.kind(), std::move(children), e.keys());
}

}  // namespace sluice

#endif  // SLUICE_CORE_ELEMENT_H_
