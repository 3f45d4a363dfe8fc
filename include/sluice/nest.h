// Nest<T>: a nested structure (leaf, tuple, list or dict) with values of type T at its leaves,
// as tf.nest sees Python structures.
//
// Dict keys keep their insertion order (that is how TF prints them), but Flatten() visits them
// in sorted order, as tf.nest.flatten does; Pack() is its inverse. An Element is a
// Nest<Tensor> and an ElementSpec a Nest<TensorSpec> (element.h).
//
// Composite values (TF's CompositeTensor) are nodes of kind kSparse and kRagged whose children
// are their dense components in TF's _to_components order, always leaves:
//   kSparse: indices int64 [N, rank], values [N], dense_shape int64 [rank]
//   kRagged: flat_values, then one int64 row_splits per ragged dimension (outermost first)
// plus the static dense shape of the value (composite_dims(), kUnknownDim = -1 for unknown:
// SparseTensorSpec's and RaggedTensorSpec's shape). Flatten() yields the components, so every
// path that moves dense leaves (wire, budgets, shared memory) carries composites unchanged;
// ops that must see a composite as one value (batch, unbatch, printing) test is_composite().
// element.h builds and checks composites; a Nest never checks its components itself.
//
// Thread safety: a const Nest may be read from many threads; it is a plain value type.
#ifndef SLUICE_CORE_NEST_H_
#define SLUICE_CORE_NEST_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

namespace sluice {

enum class NestKind { kLeaf, kTuple, kList, kDict, kSparse, kRagged };

template <typename T>
class Nest {
 public:
  Nest() = default;  // an empty tuple
  Nest(T leaf) : kind_(NestKind::kLeaf), leaf_(std::move(leaf)) {}  // NOLINT: implicit leaf

  static Nest Leaf(T value) { return Nest(std::move(value)); }
  static Nest Tuple(std::vector<Nest> children) {
    return Nest(NestKind::kTuple, std::move(children), {});
  }
  static Nest List(std::vector<Nest> children) {
    return Nest(NestKind::kList, std::move(children), {});
  }
  // Requires unique keys; their order is kept for printing.
  static Nest Dict(std::vector<std::pair<std::string, Nest>> items) {
    std::vector<Nest> children;
    std::vector<std::string> keys;
    for (auto& [k, v] : items) {
      keys.push_back(std::move(k));
      children.push_back(std::move(v));
    }
    return Nest(NestKind::kDict, std::move(children), std::move(keys));
  }

  // A composite node: kSparse or kRagged, `children` its components (leaves), `dims` the static
  // dense shape (kUnknownDim for unknown dimensions). Callers check the components (element.h).
  static Nest Composite(NestKind kind, std::vector<Nest> children, std::vector<int64_t> dims) {
    Nest n(kind, std::move(children), {});
    n.composite_dims_ = std::move(dims);
    return n;
  }

  NestKind kind() const { return kind_; }
  bool is_leaf() const { return kind_ == NestKind::kLeaf; }
  bool is_composite() const { return kind_ == NestKind::kSparse || kind_ == NestKind::kRagged; }
  // The static dense shape of a composite node; empty for other kinds.
  const std::vector<int64_t>& composite_dims() const { return composite_dims_; }
  // True if this node or one below it is a composite.
  bool HasComposite() const {
    if (is_composite()) return true;
    for (const Nest& c : children_) {
      if (c.HasComposite()) return true;
    }
    return false;
  }
  const T& leaf() const { return *leaf_; }
  T& mutable_leaf() { return *leaf_; }
  const std::vector<Nest>& children() const { return children_; }
  std::vector<Nest>& mutable_children() { return children_; }
  // Dict keys in insertion order, parallel to children(); empty for other kinds.
  const std::vector<std::string>& keys() const { return keys_; }

  // Child positions in flatten order: insertion order, except dicts by sorted key.
  std::vector<size_t> FlattenOrder() const {
    std::vector<size_t> order(children_.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    if (kind_ == NestKind::kDict) {
      std::sort(order.begin(), order.end(),
                [this](size_t a, size_t b) { return keys_[a] < keys_[b]; });
    }
    return order;
  }

  // Leaves in tf.nest.flatten order.
  std::vector<T> Flatten() const {
    std::vector<T> out;
    FlattenInto(&out);
    return out;
  }
  size_t num_leaves() const {
    if (is_leaf()) return 1;
    size_t n = 0;
    for (const Nest& c : children_) n += c.num_leaves();
    return n;
  }

  // The same structure with f(leaf) at each leaf.
  template <typename F>
  auto Map(F&& f) const -> Nest<std::decay_t<decltype(f(std::declval<const T&>()))>> {
    using U = std::decay_t<decltype(f(std::declval<const T&>()))>;
    if (is_leaf()) return Nest<U>(f(*leaf_));
    std::vector<Nest<U>> children;
    children.reserve(children_.size());
    for (const Nest& c : children_) children.push_back(c.Map(f));
    return Nest<U>::FromParts(kind_, std::move(children), keys_, composite_dims_);
  }

  // The structure of `structure` with `flat` (in flatten order) at its leaves.
  // INVALID_ARGUMENT if the counts differ.
  template <typename U>
  static absl::StatusOr<Nest> Pack(const Nest<U>& structure, std::vector<T> flat) {
    if (flat.size() != structure.num_leaves()) {
      return absl::InvalidArgumentError(absl::StrCat("cannot pack ", flat.size(),
                                                     " values into a structure with ",
                                                     structure.num_leaves(), " leaves"));
    }
    size_t next = 0;
    return PackFrom(structure, flat, &next);
  }

  // True if `other` has the same kinds, arity and keys everywhere (a composite's static shape is
  // not structure: batching changes it).
  template <typename U>
  bool SameStructure(const Nest<U>& other) const {
    if (kind_ != other.kind() || children_.size() != other.children().size() ||
        keys_ != other.keys()) {
      return false;
    }
    for (size_t i = 0; i < children_.size(); ++i) {
      if (!children_[i].SameStructure(other.children()[i])) return false;
    }
    return true;
  }

  // Builds a non-leaf nest; for Map() and Pack(). `composite_dims` only for composite kinds.
  static Nest FromParts(NestKind kind, std::vector<Nest> children, std::vector<std::string> keys,
                        std::vector<int64_t> composite_dims = {}) {
    Nest n(kind, std::move(children), std::move(keys));
    n.composite_dims_ = std::move(composite_dims);
    return n;
  }

 private:
  Nest(NestKind kind, std::vector<Nest> children, std::vector<std::string> keys)
      : kind_(kind), children_(std::move(children)), keys_(std::move(keys)) {}

  void FlattenInto(std::vector<T>* out) const {
    if (is_leaf()) {
      out->push_back(*leaf_);
      return;
    }
    for (size_t i : FlattenOrder()) children_[i].FlattenInto(out);
  }

  template <typename U>
  static Nest PackFrom(const Nest<U>& structure, std::vector<T>& flat, size_t* next) {
    if (structure.is_leaf()) return Nest(std::move(flat[(*next)++]));
    std::vector<Nest> children(structure.children().size());
    for (size_t i : structure.FlattenOrder()) {
      children[i] = PackFrom(structure.children()[i], flat, next);
    }
    return FromParts(structure.kind(), std::move(children), structure.keys(),
                     structure.composite_dims());
  }

  NestKind kind_ = NestKind::kTuple;
  std::optional<T> leaf_;
  std::vector<Nest> children_;
  std::vector<std::string> keys_;
  std::vector<int64_t> composite_dims_;
};

}  // namespace sluice

#endif  // SLUICE_CORE_NEST_H_
