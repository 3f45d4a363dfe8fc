#include "sluice/shape.h"

#include "absl/strings/str_cat.h"

namespace sluice {

bool Shape::IsFullyDefined() const {
  for (int64_t d : dims_) {
    if (d == kUnknownDim) return false;
  }
  return true;
}

int64_t Shape::num_elements() const {
  int64_t n = 1;
  for (int64_t d : dims_) n *= d;
  return n;
}

Shape Shape::Prepend(int64_t d) const {
  std::vector<int64_t> dims;
  dims.reserve(dims_.size() + 1);
  dims.push_back(d);
  dims.insert(dims.end(), dims_.begin(), dims_.end());
  return Shape(std::move(dims));
}

Shape Shape::DropFirst() const {
  return Shape(std::vector<int64_t>(dims_.begin() + 1, dims_.end()));
}

Shape Shape::WithFirst(int64_t d) const {
  Shape s = *this;
  s.dims_[0] = d;
  return s;
}

bool Shape::IsCompatibleWith(const Shape& other) const {
  if (rank() != other.rank()) return false;
  for (int i = 0; i < rank(); ++i) {
    if (dims_[i] != kUnknownDim && other.dims_[i] != kUnknownDim && dims_[i] != other.dims_[i]) {
      return false;
    }
  }
  return true;
}

Shape Shape::MostSpecificCommon(const Shape& other) const {
  Shape s = *this;
  for (int i = 0; i < rank(); ++i) {
    if (s.dims_[i] != other.dims_[i]) s.dims_[i] = kUnknownDim;
  }
  return s;
}

std::string Shape::ToString() const {
  std::string out = "(";
  for (size_t i = 0; i < dims_.size(); ++i) {
    if (i > 0) absl::StrAppend(&out, ", ");
    if (dims_[i] == kUnknownDim) {
      absl::StrAppend(&out, "None");
    } else {
      absl::StrAppend(&out, dims_[i]);
    }
  }
  if (dims_.size() == 1) absl::StrAppend(&out, ",");
  absl::StrAppend(&out, ")");
  return out;
}

}  // namespace sluice
