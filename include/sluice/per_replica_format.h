// Printing distributed values and their specs as TensorFlow 2.15 prints them.
//
// FormatPerReplica is what `print(next(iterator))` shows for a distributed dataset: TF gives
// the element's structure with a PerReplica at each leaf, and
//   PerReplica.__str__  = "PerReplica:{\n" + ",\n".join("  %d: %s" % (i, v)) + "\n}"
//   PerReplica.__repr__ = the same with %r.
// A leaf at the top prints with str():
//   PerReplica:{
//     0: tf.Tensor([1 2], shape=(2,), dtype=int32),
//     1: tf.Tensor([3 4], shape=(2,), dtype=int32)
//   }
// A tuple, list or dict at the top prints as Python prints containers, with repr() of what is
// inside: "(PerReplica:{\n  0: <tf.Tensor: ...>,\n ...\n}, PerReplica:{...})", "(x,)" for a
// one-element tuple, "{'key': ...}" with dict keys in insertion order.
// (Goldens from TF itself: tests/testdata/format/per_replica.txt.)
//
// With one device on one worker TF returns the plain element rather than PerReplica objects
// (per_replica.h: PerReplicaWrapping); pass the dataset's wrapping() and a one-replica value
// then prints as TF prints the element (FormatElement: "tf.Tensor([0 1], shape=(2,), ...)"),
// its spec as the nest of TensorSpecs in the same layout. Without it (kPerReplica) these print
// what they are given, so a one-replica PerReplica prints as "PerReplica:{\n  0: ...\n}". If the replicas' elements differ in structure, the whole elements are printed as the
// replicas' values (each replica's element with str() at the top, repr() nested).
//
// FormatPerReplicaSpec prints a DistributedElementSpec in the seed's layout:
//   (PerReplicaSpec(TensorSpec(shape=(None, 1), dtype=tf.float32, name=None),
//                   TensorSpec(shape=(None, 1), dtype=tf.float32, name=None)),
//    PerReplicaSpec(TensorSpec(shape=(None, 1), dtype=tf.int32, name=None),
//                   TensorSpec(shape=(None, 1), dtype=tf.int32, name=None)))
// The rule: every container (tuple "(", list "[", dict "{") and every "PerReplicaSpec(" puts its
// items one per line, separated by ",\n", each continuation line indented to the column just
// after its own opening bracket (absolute columns, so nesting accumulates). A one-element tuple
// keeps Python's trailing comma "(x,)"; dict items are "'key': value" (keys in insertion order,
// Python-quoted) and the value's own continuation lines align after its opening bracket; empty
// containers are "()", "[]", "{}". A PerReplicaSpec of one spec also keeps the comma, as
// Python prints it: "PerReplicaSpec(TensorSpec(...),)".
// FormatPerReplicaSpecRepr is Python's actual one-line repr(element_spec):
//   "(PerReplicaSpec(TensorSpec(...), TensorSpec(...)), PerReplicaSpec(...))".
//
// Thread safety: all functions are pure.
#ifndef SLUICE_CORE_PER_REPLICA_FORMAT_H_
#define SLUICE_CORE_PER_REPLICA_FORMAT_H_

#include <string>

#include "sluice/per_replica.h"
#include "sluice/element.h"

namespace sluice {

// print(value): str() of the element structure with PerReplica leaves.
// kPlainElement with other than one replica prints the PerReplica (it is not TF's plain case).
std::string FormatPerReplica(const PerReplica<Element>& v,
                             PerReplicaWrapping wrapping = PerReplicaWrapping::kPerReplica);
// repr(value): the same with repr() at the top too.
std::string FormatPerReplicaRepr(const PerReplica<Element>& v,
                                 PerReplicaWrapping wrapping = PerReplicaWrapping::kPerReplica);

// The seed's multi-line layout of an element_spec (see the rule above); kPlainElement prints
// each leaf's one TensorSpec without "PerReplicaSpec(...)" (TF's element_spec for one device).
std::string FormatPerReplicaSpec(const DistributedElementSpec& spec,
                                 PerReplicaWrapping wrapping = PerReplicaWrapping::kPerReplica);
// Python's one-line repr of the element_spec.
std::string FormatPerReplicaSpecRepr(
    const DistributedElementSpec& spec,
    PerReplicaWrapping wrapping = PerReplicaWrapping::kPerReplica);

}  // namespace sluice

#endif  // SLUICE_CORE_PER_REPLICA_FORMAT_H_
