#include "sluice/per_replica_format.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/format/tensor_format.h"
#include "sluice/composite_tensor.h"

namespace sluice {
namespace {

// "PerReplica:{\n  0: v0,\n  1: v1\n}" from the replicas' texts.
std::string PerReplicaBlock(const std::vector<std::string>& texts) {
  std::string out = "PerReplica:{\n";
  for (size_t i = 0; i < texts.size(); ++i) {
    if (i > 0) out += ",\n";
    absl::StrAppend(&out, "  ", i, ": ", texts[i]);
  }
  return out + "\n}";
}

// `nodes` holds the same position of every replica's element.
std::string FormatNode(const std::vector<const Element*>& nodes, bool repr) {
  const Element& first = *nodes[0];
  if (first.is_leaf() || first.is_composite()) {  // a SparseTensor or RaggedTensor is one value
    std::vector<std::string> texts;
    for (const Element* n : nodes) texts.push_back(repr ? FormatElementRepr(*n) : FormatElement(*n));
    return PerReplicaBlock(texts);
  }
  auto child = [&](size_t i) {
    std::vector<const Element*> children;
    for (const Element* n : nodes) children.push_back(&n->children()[i]);
    return FormatNode(children, /*repr=*/true);
  };
  const size_t n = first.children().size();
  if (first.kind() == NestKind::kDict) {
    std::string out = "{";
    for (size_t i = 0; i < n; ++i) {
      if (i > 0) out += ", ";
      absl::StrAppend(&out, PythonStrRepr(first.keys()[i]), ": ", child(i));
    }
    return out + "}";
  }
  const bool tuple = first.kind() == NestKind::kTuple;
  std::string out = tuple ? "(" : "[";
  for (size_t i = 0; i < n; ++i) {
    if (i > 0) out += ", ";
    out += child(i);
  }
  if (tuple && n == 1) out += ",";
  return out + (tuple ? ")" : "]");
}

std::string FormatValue(const PerReplica<Element>& v, bool repr) {
  if (v.num_replicas() == 0) return PerReplicaBlock({});
  bool same = true;
  for (const Element& e : v) same = same && e.SameStructure(v[0]);
  if (!same) {
    std::vector<std::string> texts;
    for (const Element& e : v) texts.push_back(repr ? FormatElementRepr(e) : FormatElement(e));
    return PerReplicaBlock(texts);
  }
  std::vector<const Element*> nodes;
  for (const Element& e : v) nodes.push_back(&e);
  return FormatNode(nodes, repr);
}

// A leaf of a kPlainElement spec: its one replica's TensorSpec (TF's own spec).
bool PlainLeaf(const DistributedElementSpec& spec, bool plain) {
  return plain && spec.is_leaf() && spec.leaf().specs.size() == 1;
}

// A composite node (SparseTensor / RaggedTensor) as TF prints it: its spec for one replica of a
// kPlainElement spec, else PerReplicaSpec(spec of replica 0, spec of replica 1, ...).
std::string FormatCompositeSpec(const DistributedElementSpec& spec, bool plain,
                                const std::string& separator) {
  const size_t replicas =
      spec.children().empty() ? 0 : spec.children()[0].leaf().specs.size();
  std::vector<std::string> texts;
  for (size_t r = 0; r < replicas; ++r) {
    std::vector<ElementSpec> components;
    for (const DistributedElementSpec& c : spec.children()) {
      components.push_back(ElementSpec(c.leaf().specs[r]));
    }
    texts.push_back(CompositeSpecToString(
        ElementSpec::Composite(spec.kind(), std::move(components), spec.composite_dims())));
  }
  if (plain && texts.size() == 1) return texts[0];
  std::string out = "PerReplicaSpec(";
  for (size_t i = 0; i < texts.size(); ++i) {
    if (i > 0) out += separator;
    out += texts[i];
  }
  if (texts.size() == 1) out += ",";
  return out + ")";
}

// The seed layout; `col` is the column where this node's text starts.
std::string FormatSpecAt(const DistributedElementSpec& spec, size_t col, bool plain) {
  if (PlainLeaf(spec, plain)) return spec.leaf().specs[0].ToString();
  if (spec.is_composite()) {
    return FormatCompositeSpec(spec, plain, ",\n" + std::string(col + 15, ' '));
  }
  if (spec.is_leaf()) {
    static constexpr char kOpen[] = "PerReplicaSpec(";
    const std::string indent = ",\n" + std::string(col + sizeof(kOpen) - 1, ' ');
    std::string out = kOpen;
    const std::vector<TensorSpec>& specs = spec.leaf().specs;
    for (size_t i = 0; i < specs.size(); ++i) {
      if (i > 0) out += indent;
      out += specs[i].ToString();
    }
    if (specs.size() == 1) out += ",";  // Python's repr of the one-element tuple of specs
    return out + ")";
  }
  const size_t n = spec.children().size();
  const std::string indent = ",\n" + std::string(col + 1, ' ');
  if (spec.kind() == NestKind::kDict) {
    std::string out = "{";
    for (size_t i = 0; i < n; ++i) {
      if (i > 0) out += indent;
      const std::string key = PythonStrRepr(spec.keys()[i]) + ": ";
      out += key + FormatSpecAt(spec.children()[i], col + 1 + key.size(), plain);
    }
    return out + "}";
  }
  const bool tuple = spec.kind() == NestKind::kTuple;
  std::string out = tuple ? "(" : "[";
  for (size_t i = 0; i < n; ++i) {
    if (i > 0) out += indent;
    out += FormatSpecAt(spec.children()[i], col + 1, plain);
  }
  if (tuple && n == 1) out += ",";
  return out + (tuple ? ")" : "]");
}

std::string FormatSpecRepr(const DistributedElementSpec& spec, bool plain) {
  if (PlainLeaf(spec, plain)) return spec.leaf().specs[0].ToString();
  if (spec.is_composite()) return FormatCompositeSpec(spec, plain, ", ");
  if (spec.is_leaf()) {
    std::string out = "PerReplicaSpec(";
    const std::vector<TensorSpec>& specs = spec.leaf().specs;
    for (size_t i = 0; i < specs.size(); ++i) {
      if (i > 0) out += ", ";
      out += specs[i].ToString();
    }
    // The specs are a serialized tuple: Python shows a one-element tuple with its comma.
    if (specs.size() == 1) out += ",";
    return out + ")";
  }
  const size_t n = spec.children().size();
  if (spec.kind() == NestKind::kDict) {
    std::string out = "{";
    for (size_t i = 0; i < n; ++i) {
      if (i > 0) out += ", ";
      absl::StrAppend(&out, PythonStrRepr(spec.keys()[i]), ": ",
                      FormatSpecRepr(spec.children()[i], plain));
    }
    return out + "}";
  }
  const bool tuple = spec.kind() == NestKind::kTuple;
  std::string out = tuple ? "(" : "[";
  for (size_t i = 0; i < n; ++i) {
    if (i > 0) out += ", ";
    out += FormatSpecRepr(spec.children()[i], plain);
  }
  if (tuple && n == 1) out += ",";
  return out + (tuple ? ")" : "]");
}

bool PlainValue(const PerReplica<Element>& v, PerReplicaWrapping wrapping) {
  return wrapping == PerReplicaWrapping::kPlainElement && v.num_replicas() == 1;
}

}  // namespace

std::string FormatPerReplica(const PerReplica<Element>& v, PerReplicaWrapping wrapping) {
  return PlainValue(v, wrapping) ? FormatElement(v[0]) : FormatValue(v, false);
}

std::string FormatPerReplicaRepr(const PerReplica<Element>& v, PerReplicaWrapping wrapping) {
  return PlainValue(v, wrapping) ? FormatElementRepr(v[0]) : FormatValue(v, true);
}

std::string FormatPerReplicaSpec(const DistributedElementSpec& spec,
                                 PerReplicaWrapping wrapping) {
  return FormatSpecAt(spec, 0, wrapping == PerReplicaWrapping::kPlainElement);
}

std::string FormatPerReplicaSpecRepr(const DistributedElementSpec& spec,
                                     PerReplicaWrapping wrapping) {
  return FormatSpecRepr(spec, wrapping == PerReplicaWrapping::kPlainElement);
}

}  // namespace sluice
