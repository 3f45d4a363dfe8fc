// PerReplica<T>: one value per replica in sync, as tf.distribute's PerReplica; and
// PerReplicaSpec, the spec side of it (what DistributedDataset::element_spec() nests).
#ifndef SLUICE_CLIENT_PER_REPLICA_H_
#define SLUICE_CLIENT_PER_REPLICA_H_

#include <cstddef>
#include <type_traits>
#include <utility>
#include <vector>

#include "sluice/element.h"

namespace sluice {

template <typename T>
class PerReplica {
 public:
  PerReplica() = default;
  explicit PerReplica(std::vector<T> values) : values_(std::move(values)) {}

  size_t num_replicas() const { return values_.size(); }
  const T& operator[](size_t replica) const { return values_[replica]; }
  T& operator[](size_t replica) { return values_[replica]; }
  const std::vector<T>& values() const { return values_; }
  auto begin() const { return values_.begin(); }
  auto end() const { return values_.end(); }

  // strategy.run(fn, args=(x,)): fn applied to each replica's value, in replica order.
  template <typename F>
  auto Run(F&& fn) const -> PerReplica<std::decay_t<decltype(fn(std::declval<const T&>()))>> {
    using R = std::decay_t<decltype(fn(std::declval<const T&>()))>;
    std::vector<R> out;
    out.reserve(values_.size());
    for (const T& v : values_) out.push_back(fn(v));
    return PerReplica<R>(std::move(out));
  }

 private:
  std::vector<T> values_;
};

// One TensorSpec per replica, printed as PerReplicaSpec(TensorSpec(...), ...).
struct PerReplicaSpec {
  std::vector<TensorSpec> specs;
  friend bool operator==(const PerReplicaSpec& a, const PerReplicaSpec& b) {
    return a.specs == b.specs;
  }
};

// DistributedDataset::element_spec(): the element's structure with a PerReplicaSpec per leaf.
using DistributedElementSpec = Nest<PerReplicaSpec>;

}  // namespace sluice

#endif  // SLUICE_CLIENT_PER_REPLICA_H_
