#include "core/data/map_fns.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/data/op_iterator.h"
#include "core/data/op_registry.h"
#include "core/format/python_literal.h"
#include "core/util/status_context.h"
#include "core/util/status_macros.h"
#include "google/protobuf/descriptor.h"
#include "proto/dataset.pb.h"

namespace sluice {
namespace {

absl::Status Invalid(absl::string_view message) {
  return absl::InvalidArgumentError(std::string(message));
}

// dtype and shape as errors print them: "float32 [28,28]".
std::string Describe(const Tensor& t) {
  return absl::StrCat(DTypeName(t.dtype()), " ", TfShapeString(t.shape()));
}
std::string Describe(const TensorSpec& s) {
  return absl::StrCat(DTypeName(s.dtype), " ", TfShapeString(s.shape));
}

// ---------------------------------------------------------------------------------------------
// Applying a component fn to an element.

// True if `fn` takes `e` whole: a tuple or list of TupleArity() leaves.
template <typename T>
bool TakesWhole(const ComponentFn& fn, const Nest<T>& e) {
  if (fn.TupleArity() < 2 || (e.kind() != NestKind::kTuple && e.kind() != NestKind::kList) ||
      e.children().size() != static_cast<size_t>(fn.TupleArity())) {
    return false;
  }
  return std::all_of(e.children().begin(), e.children().end(),
                     [](const Nest<T>& c) { return c.is_leaf(); });
}

// The leaves of a tuple TakesWhole accepted, and how messages show them: "(string [], int32 [4])".
template <typename T>
std::vector<T> TupleParts(const Nest<T>& e, std::string* described) {
  std::vector<T> parts;
  std::vector<std::string> shown;
  for (const Nest<T>& c : e.children()) {
    parts.push_back(c.leaf());
    shown.push_back(Describe(c.leaf()));
  }
  *described = absl::StrCat("(", absl::StrJoin(shown, ", "), ")");
  return parts;
}

// " on component 'x'" / " on leaf 2" / "": where a message places a failed leaf.
std::string LeafPlace(const std::string& where, int index) {
  if (!where.empty()) return absl::StrCat(" on component ", where);
  return index == 0 ? "" : absl::StrCat(" on leaf ", index);
}

// Applies `fn` to every leaf of `e`; `*leaf` counts leaves for messages.
absl::StatusOr<Element> MapLeaves(const ComponentFn& fn, const Element& e,
                                  const std::string& where, int* leaf) {
  if (TakesWhole(fn, e)) {
    const int index = (*leaf)++;
    std::string described;
    absl::StatusOr<Element> out = fn.ApplyTuple(TupleParts(e, &described));
    if (!out.ok()) {
      return MarkElementError(WithContext(
          absl::StrCat(fn.Describe(), LeafPlace(where, index), " (", described, ")"),
          out.status()));
    }
    return out;
  }
  if (e.is_leaf()) {
    const int index = (*leaf)++;
    absl::StatusOr<Element> out = fn.Apply(e.leaf());
    if (!out.ok()) {
      const std::string at = LeafPlace(where, index);
      return MarkElementError(WithContext(
          absl::StrCat(fn.Describe(), at, " (", Describe(e.leaf()), ")"), out.status()));
    }
    return out;
  }
  std::vector<Element> children(e.children().size());
  for (size_t i : e.FlattenOrder()) {
    ASSIGN_OR_RETURN(children[i], MapLeaves(fn, e.children()[i], where, leaf));
  }
  return Element::FromParts(e.kind(), std::move(children), e.keys());
}

absl::StatusOr<ElementSpec> MapLeafSpecs(const ComponentFn& fn, const ElementSpec& s,
                                         const std::string& where, int* leaf) {
  if (TakesWhole(fn, s)) {
    const int index = (*leaf)++;
    std::string described;
    absl::StatusOr<ElementSpec> out = fn.TupleOutputSpec(TupleParts(s, &described));
    if (!out.ok()) {
      return Invalid(absl::StrCat(fn.Describe(), LeafPlace(where, index), " (", described,
                                  "): ", out.status().message()));
    }
    return out;
  }
  if (s.is_leaf()) {
    const int index = (*leaf)++;
    absl::StatusOr<ElementSpec> out = fn.OutputSpec(s.leaf());
    if (!out.ok()) {
      const std::string at = LeafPlace(where, index);
      return Invalid(absl::StrCat(fn.Describe(), at, " (", Describe(s.leaf()),
                                  "): ", out.status().message()));
    }
    return out;
  }
  std::vector<ElementSpec> children(s.children().size());
  for (size_t i : s.FlattenOrder()) {
    ASSIGN_OR_RETURN(children[i], MapLeafSpecs(fn, s.children()[i], where, leaf));
  }
  return ElementSpec::FromParts(s.kind(), std::move(children), s.keys());
}

// The child position the MapOp's key/index selects in `structure`; -1 without a component.
template <typename T>
absl::StatusOr<int> SelectComponent(const proto::MapOp& map, const Nest<T>& structure) {
  const std::string* key = map.component_case() == proto::MapOp::kKey ? &map.key() : nullptr;
  const int64_t index = map.index();
  return SelectChild(structure.kind(), structure.keys(), structure.children().size(), key,
                     map.component_case() == proto::MapOp::kIndex ? &index : nullptr);
}

class ComponentMapFunction : public MapFunction {
 public:
  ComponentMapFunction(std::shared_ptr<const ComponentFn> fn, proto::MapOp map)
      : fn_(std::move(fn)), map_(std::move(map)), where_(ComponentName(map_)) {}

  absl::StatusOr<Element> Apply(Element input) const override {
    absl::StatusOr<int> at = SelectComponent(map_, input);
    if (!at.ok()) return MarkElementError(at.status());
    int leaf = 0;
    if (*at < 0) return MapLeaves(*fn_, input, where_, &leaf);
    ASSIGN_OR_RETURN(Element mapped, MapLeaves(*fn_, input.children()[*at], where_, &leaf));
    input.mutable_children()[*at] = std::move(mapped);
    return input;
  }

  // Selecting a component depends on the structure alone, the same for a block.
  bool ElementWise() const override { return fn_->ElementWise(); }
  bool DrawsPerElement() const override { return fn_->DrawsPerElement(); }
  // A fn on a component of the element, or one with per-element draws, has no row form.
  SerializedRowsFn SerializedRowsApply() const override {
    if (map_.component_case() != proto::MapOp::COMPONENT_NOT_SET || fn_->DrawsPerElement() ||
        !fn_->MapsSerializedRows()) {
      return nullptr;
    }
    return [fn = fn_](const std::vector<absl::string_view>& rows, const RowCheck& check) {
      return fn->ApplyToSerializedRows(rows, check);
    };
  }

 private:
  const std::shared_ptr<const ComponentFn> fn_;
  const proto::MapOp map_;
  const std::string where_;
};

}  // namespace

absl::StatusOr<Element> ComponentFn::ApplyToSerializedRows(
    const std::vector<absl::string_view>&, const RowCheck&) const {
  return absl::UnimplementedError(absl::StrCat(Describe(), " has no form on serialized rows"));
}

std::unique_ptr<ComponentFn> ComponentFn::FuseWith(const ComponentFn&) const { return nullptr; }

absl::StatusOr<ElementSpec> ComponentFn::TupleOutputSpec(const std::vector<TensorSpec>&) const {
  return Invalid("takes one tensor, not a tuple");
}
absl::StatusOr<Element> ComponentFn::ApplyTuple(const std::vector<Tensor>&) const {
  return Invalid("takes one tensor, not a tuple");
}

absl::StatusOr<int> SelectChild(NestKind kind, const std::vector<std::string>& keys,
                                size_t num_children, const std::string* key,
                                const int64_t* index) {
  auto what = [kind] {
    switch (kind) {
      case NestKind::kLeaf: return "a single tensor";
      case NestKind::kDict: return "a dict";
      default: return "a tuple";
    }
  };
  if (key != nullptr) {
    if (kind != NestKind::kDict) {
      return Invalid(absl::StrCat("key='", *key, "' needs a dict element; the element is ",
                                  what()));
    }
    for (size_t i = 0; i < keys.size(); ++i) {
      if (keys[i] == *key) return static_cast<int>(i);
    }
    std::vector<std::string> quoted;
    for (const std::string& k : keys) quoted.push_back(PythonStringLiteral(k));
    return Invalid(absl::StrCat("key '", *key, "' is not in the element; its keys are [",
                                absl::StrJoin(quoted, ", "), "]"));
  }
  if (index != nullptr) {
    if (kind != NestKind::kTuple && kind != NestKind::kList) {
      return Invalid(absl::StrCat("key=", *index, " needs a tuple element; the element is ",
                                  what()));
    }
    const int64_t n = static_cast<int64_t>(num_children);
    if (*index < 0 || *index >= n) {
      return Invalid(absl::StrCat("key=", *index, " is out of range for a tuple of ", n,
                                  " components"));
    }
    return static_cast<int>(*index);
  }
  return -1;
}

std::string MapFnName(const proto::MapOp& map) {
  if (map.fn_case() == proto::MapOp::FN_NOT_SET) return "unset";
  const MapFnRegistration* r = OpRegistry::Global().FindMapFn(map.fn_case());
  if (r != nullptr) return r->name_of ? r->name_of(map) : r->name;
  const google::protobuf::FieldDescriptor* f =
      proto::MapOp::descriptor()->FindFieldByNumber(map.fn_case());
  return f != nullptr ? f->name() : "?";
}

std::string ComponentName(const proto::MapOp& map) {
  switch (map.component_case()) {
    case proto::MapOp::kKey: return PythonStringLiteral(map.key());
    case proto::MapOp::kIndex: return absl::StrCat(map.index());
    case proto::MapOp::COMPONENT_NOT_SET: break;
  }
  return "";
}

absl::StatusOr<std::unique_ptr<ComponentFn>> MakeComponentFn(const proto::MapOp& map) {
  ASSIGN_OR_RETURN(const MapFnRegistration* r, FindMapFnRegistration(map));
  return r->make(map);
}

absl::StatusOr<ElementSpec> InferMapSpec(const proto::MapOp& map, const ElementSpec& input) {
  if (map.num_parallel_calls() < -1) {
    return Invalid(absl::StrCat("num_parallel_calls must be positive, 0 or -1 (AUTOTUNE), got ",
                                map.num_parallel_calls()));
  }
  ASSIGN_OR_RETURN(std::unique_ptr<ComponentFn> fn, MakeComponentFn(map));
  ASSIGN_OR_RETURN(int at, SelectComponent(map, input));
  const std::string where = ComponentName(map);
  int leaf = 0;
  if (at < 0) return MapLeafSpecs(*fn, input, where, &leaf);
  ElementSpec out = input;
  ASSIGN_OR_RETURN(out.mutable_children()[at],
                   MapLeafSpecs(*fn, input.children()[at], where, &leaf));
  return out;
}

absl::StatusOr<std::shared_ptr<const MapFunction>> MakeMapFunction(const proto::MapOp& map,
                                                                   const ElementSpec& input) {
  RETURN_IF_ERROR(InferMapSpec(map, input).status());
  ASSIGN_OR_RETURN(std::unique_ptr<ComponentFn> fn, MakeComponentFn(map));
  RETURN_IF_ERROR(fn->Open());
  return std::shared_ptr<const MapFunction>(
      new ComponentMapFunction(std::shared_ptr<const ComponentFn>(std::move(fn)), map));
}

absl::StatusOr<std::shared_ptr<const MapFunction>> MakeMapFunctionOf(
    std::shared_ptr<const ComponentFn> fn, const proto::MapOp& map, const ElementSpec& input) {
  ASSIGN_OR_RETURN(int at, SelectComponent(map, input));
  int leaf = 0;
  RETURN_IF_ERROR(
      MapLeafSpecs(*fn, at < 0 ? input : input.children()[at], ComponentName(map), &leaf)
          .status());
  return std::shared_ptr<const MapFunction>(new ComponentMapFunction(std::move(fn), map));
}

}  // namespace sluice
