// Tensor shapes. A Shape has a known rank; each dimension is a size or kUnknownDim (TF's None).
// A Tensor's shape is always fully defined; a TensorSpec's may not be.
#ifndef SLUICE_CORE_SHAPE_H_
#define SLUICE_CORE_SHAPE_H_

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

namespace sluice {

inline constexpr int64_t kUnknownDim = -1;

class Shape {
 public:
  Shape() = default;  // a scalar
  Shape(std::initializer_list<int64_t> dims) : dims_(dims) {}
  explicit Shape(std::vector<int64_t> dims) : dims_(std::move(dims)) {}

  int rank() const { return static_cast<int>(dims_.size()); }
  int64_t dim(int i) const { return dims_[i]; }
  const std::vector<int64_t>& dims() const { return dims_; }

  bool IsFullyDefined() const;
  // Product of the dimensions; requires IsFullyDefined(). 1 for a scalar.
  int64_t num_elements() const;

  // A new shape with `d` in front: (3,) prepended by 2 is (2, 3).
  Shape Prepend(int64_t d) const;
  // The shape without its first dimension; requires rank() >= 1.
  Shape DropFirst() const;
  // Same shape with dimension 0 replaced; requires rank() >= 1.
  Shape WithFirst(int64_t d) const;

  // True if every known dimension of both agrees and the ranks match.
  bool IsCompatibleWith(const Shape& other) const;
  // The most specific shape compatible with both: dims that differ become unknown.
  // Requires equal ranks.
  Shape MostSpecificCommon(const Shape& other) const;

  // TF's format: "()", "(2,)", "(None, 1)".
  std::string ToString() const;

  friend bool operator==(const Shape& a, const Shape& b) { return a.dims_ == b.dims_; }
  friend bool operator!=(const Shape& a, const Shape& b) { return !(a == b); }

 private:
  std::vector<int64_t> dims_;
};

}  // namespace sluice

#endif  // SLUICE_CORE_SHAPE_H_
