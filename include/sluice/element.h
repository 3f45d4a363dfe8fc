// Elements and their specs: what one step of a dataset yields, and its static description.
#ifndef SLUICE_CORE_ELEMENT_H_
#define SLUICE_CORE_ELEMENT_H_

#include <string>

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

// The spec of a concrete element: each leaf's dtype and exact shape.
inline ElementSpec SpecOf(const Element& e) {
  return e.Map([](const Tensor& t) { return TensorSpec{t.dtype(), t.shape()}; });
}

}  // namespace sluice

#endif  // SLUICE_CORE_ELEMENT_H_
