// Elements, steps and specs between C++ and Python, in tf.nest's structures: a tuple stays a
// tuple, a dict a dict (insertion order), a list a list; leaves are sluice.Tensor.
//
// A step (PerReplica<Element>) becomes what TF's iterator returns: the element's structure with
// a sluice.PerReplica at each leaf, holding one Tensor per replica; with one replica, the plain
// element. A DistributedElementSpec becomes the same structure with a sluice.PerReplicaSpec of
// sluice.TensorSpec at each leaf (classes defined in sluice/_values.py); with one local
// replica, as TF, a plain sluice.TensorSpec at each leaf (the steps are plain elements then).
//
// Requires the GIL.
#ifndef SLUICE_PYTHON_SRC_PY_ELEMENT_H_
#define SLUICE_PYTHON_SRC_PY_ELEMENT_H_

#include <pybind11/pybind11.h>

#include "sluice/element.h"
#include "sluice/per_replica.h"

namespace sluice::python {

// tf.data's structure rules: tuples and dicts are structure, everything else (a list included)
// is one tensor (TensorFromPython). INVALID_ARGUMENT (raised) for a dict key that is not a str.
Element ElementFromPython(pybind11::handle value);

pybind11::object ElementToPython(const Element& element);
pybind11::object SpecToPython(const ElementSpec& spec);

// `step` with every host tensor whose buffer something outside the step also holds (a
// dataset's constant, a cache, an earlier step, the rest of a batch kept for the next step)
// replaced by a copy: what Python receives is never memory another step will be handed, so
// in-place ops through DLPack (torch's x.sub_(mean)) change this step only. Tensors whose
// buffers only this step holds (every service step, every fresh batch) pass without a copy;
// device tensors always do (each step has its own ring slot). Requires nothing of the GIL.
PerReplica<Element> UnsharedStep(const PerReplica<Element>& step);
// How many tensors UnsharedStep has copied in this process (tests, measurements).
int64_t HandoutCopies();

// The structure of replica 0 with sluice.PerReplica leaves, or the plain element where TF gives
// it (`wrapping` kPlainElement: one device on one worker; sluice/per_replica.h), over
// UnsharedStep(step) when `may_share`. Steps from the service pass
// may_share = false: they are decoded into receive buffers that no other step is ever given
// while a view lives (several small steps may be views of one frame's buffer, at disjoint
// offsets, which a reference count cannot tell from shared bytes).
pybind11::object StepToPython(const PerReplica<Element>& step, PerReplicaWrapping wrapping,
                              bool may_share = true);

// The element's structure with sluice.PerReplicaSpec leaves, or TensorSpec leaves where TF
// gives the dataset's own spec (kPlainElement).
pybind11::object DistributedSpecToPython(const DistributedElementSpec& spec,
                                         PerReplicaWrapping wrapping);

}  // namespace sluice::python

#endif  // SLUICE_PYTHON_SRC_PY_ELEMENT_H_
