// PerReplica<T>: one value per replica in sync, as tf.distribute's PerReplica; and
// PerReplicaSpec, the spec side of it (what DistributedDataset::element_spec() nests).
#ifndef SLUICE_CLIENT_PER_REPLICA_H_
#define SLUICE_CLIENT_PER_REPLICA_H_

#include <cstddef>
#include <cstdint>
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

// Whether TF would hand out PerReplica values and PerReplicaSpec leaves for a distributed
// dataset, or the dataset's own element and TensorSpecs (TF's input_lib._always_wrap): TF wraps
// when the strategy has more than one local replica or more than one worker
// (MultiWorkerMirroredStrategy wraps even one replica per worker); with one device on one
// worker, `next(iterator)` is the plain element and `element_spec` the dataset's own spec.
// C++ keeps one static type (a PerReplica of one value is the one-device step);
// DistributedDataset::wrapping() says which of the two TF gives, and the printers
// (per_replica_format.h, core/format/json_format.h) and the Python API follow it.
enum class PerReplicaWrapping {
  kPerReplica,    // PerReplica values, PerReplicaSpec leaves
  kPlainElement,  // one replica: its element and TensorSpecs, unwrapped
};

// TF's rule: kPlainElement for one local replica on one worker, else kPerReplica.
inline PerReplicaWrapping WrappingFor(int64_t num_workers, int64_t num_local_replicas) {
  return num_workers == 1 && num_local_replicas == 1 ? PerReplicaWrapping::kPlainElement
                                                     : PerReplicaWrapping::kPerReplica;
}

}  // namespace sluice

#endif  // SLUICE_CLIENT_PER_REPLICA_H_
