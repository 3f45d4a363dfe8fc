#include "python/src/py_element.h"

#include <atomic>
#include <cstring>
#include <map>
#include <optional>
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
    case NestKind::kSparse:
    case NestKind::kRagged: {  // sluice._values.composite: SparseTensor, RaggedTensor, their specs
      static py::object* composite = new py::object(ValuesAttr("composite"));
      py::list parts;
      for (const Nest<T>& c : nest.children()) parts.append(NestToPython(c, leaf));
      py::tuple dims(nest.composite_dims().size());
      for (size_t i = 0; i < nest.composite_dims().size(); ++i) {
        const int64_t d = nest.composite_dims()[i];
        dims[i] = d == kUnknownDim ? py::object(py::none()) : py::object(py::int_(d));
      }
      return (*composite)(nest.kind() == NestKind::kSparse ? "sparse" : "ragged", parts, dims);
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

std::atomic<int64_t> handout_copies{0};

// How many leaves of `step` refer to each host buffer.
std::map<const TensorBuffer*, long> BufferUsesInStep(const PerReplica<Element>& step) {
  std::map<const TensorBuffer*, long> uses;
  for (const Element& e : step) {
    std::vector<const Tensor*> leaves;
    LeavesInOrder(e, &leaves);
    for (const Tensor* t : leaves) {
      if (t->buffer() != nullptr) ++uses[t->buffer().get()];
    }
  }
  return uses;
}

// `t`, or a copy of it when its host buffer is referenced from outside this step.
Tensor Unshared(const Tensor& t, const std::map<const TensorBuffer*, long>& uses) {
  if (!t.valid() || t.dtype() == DType::kString || t.buffer() == nullptr ||
      t.buffer()->space() == MemorySpace::kDevice) {
    return t;
  }
  // use_count() counts this step's leaves plus every other holder: a dataset's constant
  // (from_tensors, from_tensor_slices), a cache, an earlier step still alive in Python, an op
  // keeping the rest of a batch for the next step. Holders that only pass through (a prefetch
  // thread) make it larger, never smaller, so a miss is an extra copy, never a shared buffer.
  auto it = uses.find(t.buffer().get());
  if (it != uses.end() && t.buffer().use_count() <= it->second) return t;
  Tensor copy = Tensor::Allocate(t.dtype(), t.shape());
  if (t.byte_size() > 0) std::memcpy(copy.mutable_raw_data(), t.raw_data(), t.byte_size());
  handout_copies.fetch_add(1, std::memory_order_relaxed);
  return copy;
}

}  // namespace

int64_t HandoutCopies() { return handout_copies.load(std::memory_order_relaxed); }

PerReplica<Element> UnsharedStep(const PerReplica<Element>& step) {
  const std::map<const TensorBuffer*, long> uses = BufferUsesInStep(step);
  bool shared = false;
  for (const Element& e : step) {
    std::vector<const Tensor*> leaves;
    LeavesInOrder(e, &leaves);
    for (const Tensor* t : leaves) {
      auto it = uses.find(t->buffer().get());
      shared = shared || (it != uses.end() && t->buffer().use_count() > it->second);
    }
  }
  if (!shared) return step;
  return step.Run([&](const Element& e) {
    return e.Map([&](const Tensor& t) { return Unshared(t, uses); });
  });
}

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

py::object StepToPython(const PerReplica<Element>& handed_out, PerReplicaWrapping wrapping,
                        bool may_share) {
  std::optional<PerReplica<Element>> unshared;
  if (may_share) unshared = UnsharedStep(handed_out);
  const PerReplica<Element>& step = unshared.has_value() ? *unshared : handed_out;
  if (wrapping == PerReplicaWrapping::kPlainElement && step.num_replicas() == 1) {
    return ElementToPython(step[0]);  // as TF: one device on one worker is not wrapped
  }
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

py::object DistributedSpecToPython(const DistributedElementSpec& spec,
                                   PerReplicaWrapping wrapping) {
  static py::object* cls = new py::object(ValuesAttr("PerReplicaSpec"));
  bool one_replica = true;
  for (const PerReplicaSpec& s : spec.Flatten()) one_replica = one_replica && s.specs.size() == 1;
  const bool plain = wrapping == PerReplicaWrapping::kPlainElement && one_replica;
  return NestToPython(spec, [plain](const PerReplicaSpec& s) {
    if (plain) return TensorSpecToPython(s.specs[0]);  // as TF: one device is not wrapped
    py::tuple specs(s.specs.size());
    for (size_t i = 0; i < s.specs.size(); ++i) specs[i] = TensorSpecToPython(s.specs[i]);
    return (*cls)(*specs);
  });
}

}  // namespace sluice::python
