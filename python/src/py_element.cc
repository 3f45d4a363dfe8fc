#include "python/src/py_element.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "python/src/py_tensor.h"
#include "python/src/status_exception.h"

namespace sluice::python {

namespace py = pybind11;

namespace {

// sluice/_values.py, imported once (the module lives as long as the interpreter).
py::object ValuesAttr(const char* name) {
  return py::module_::import("sluice._values").attr(name);
}

template <typename T, typename F>
py::object NestToPython(const Nest<T>& nest, const F& leaf) {
  switch (nest.kind()) {
    case NestKind::kLeaf:
      return leaf(nest.leaf());
    case NestKind::kTuple: {
      py::tuple out(nest.children().size());
      for (size_t i = 0; i < nest.children().size(); ++i) {
        out[i] = NestToPython(nest.children()[i], leaf);
      }
      return out;
    }
    case NestKind::kList: {
      py::list out;
      for (const Nest<T>& c : nest.children()) out.append(NestToPython(c, leaf));
      return out;
    }
    case NestKind::kDict: {
      py::dict out;
      for (size_t i = 0; i < nest.children().size(); ++i) {
        out[py::str(nest.keys()[i])] = NestToPython(nest.children()[i], leaf);
      }
      return out;
    }
  }
  return py::none();
}

py::object TensorSpecToPython(const TensorSpec& spec) {
  static py::object* cls = new py::object(ValuesAttr("TensorSpec"));
  py::tuple shape(spec.shape.rank());
  for (int i = 0; i < spec.shape.rank(); ++i) {
    const int64_t d = spec.shape.dim(i);
    shape[i] = d == kUnknownDim ? py::object(py::none()) : py::object(py::int_(d));
  }
  return (*cls)(shape, std::string(DTypeName(spec.dtype)));
}

// The leaves of `e` in the nest's own order (the order NestToPython visits them).
void LeavesInOrder(const Element& e, std::vector<const Tensor*>* out) {
  if (e.is_leaf()) {
    out->push_back(&e.leaf());
    return;
  }
  for (const Element& c : e.children()) LeavesInOrder(c, out);
}

}  // namespace

Element ElementFromPython(py::handle value) {
  if (PyTuple_Check(value.ptr())) {
    std::vector<Element> children;
    for (py::handle item : value) children.push_back(ElementFromPython(item));
    return Element::Tuple(std::move(children));
  }
  if (PyDict_Check(value.ptr())) {
    std::vector<std::pair<std::string, Element>> items;
    for (auto [k, v] : value.cast<py::dict>()) {
      if (!PyUnicode_Check(k.ptr())) {
        ThrowStatus(absl::InvalidArgumentError(absl::StrCat(
            "dict keys of an element must be str, got ", std::string(py::repr(k)))));
      }
      items.emplace_back(k.cast<std::string>(), ElementFromPython(v));
    }
    return Element::Dict(std::move(items));
  }
  return Element(TensorFromPython(value));
}

py::object ElementToPython(const Element& element) {
  return NestToPython(element, [](const Tensor& t) { return py::cast(t); });
}

py::object SpecToPython(const ElementSpec& spec) {
  return NestToPython(spec, [](const TensorSpec& s) { return TensorSpecToPython(s); });
}

py::object StepToPython(const PerReplica<Element>& step) {
  if (step.num_replicas() == 1) return ElementToPython(step[0]);
  static py::object* per_replica = new py::object(ValuesAttr("PerReplica"));
  bool same = true;
  for (const Element& e : step) same = same && e.SameStructure(step[0]);
  if (!same) {  // not expected from a dataset; keep every replica's whole element
    py::tuple values(step.num_replicas());
    for (size_t r = 0; r < step.num_replicas(); ++r) values[r] = ElementToPython(step[r]);
    return (*per_replica)(values);
  }
  std::vector<std::vector<const Tensor*>> leaves(step.num_replicas());
  for (size_t r = 0; r < step.num_replicas(); ++r) LeavesInOrder(step[r], &leaves[r]);
  size_t next = 0;
  return NestToPython(step[0], [&](const Tensor&) {
    py::tuple values(step.num_replicas());
    for (size_t r = 0; r < step.num_replicas(); ++r) values[r] = py::cast(*leaves[r][next]);
    ++next;
    return (*per_replica)(values);
  });
}

py::object DistributedSpecToPython(const DistributedElementSpec& spec) {
  static py::object* cls = new py::object(ValuesAttr("PerReplicaSpec"));
  return NestToPython(spec, [](const PerReplicaSpec& s) {
    py::tuple specs(s.specs.size());
    for (size_t i = 0; i < s.specs.size(); ++i) specs[i] = TensorSpecToPython(s.specs[i]);
    return (*cls)(*specs);
  });
}

}  // namespace sluice::python
