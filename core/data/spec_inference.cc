#include "core/data/spec_inference.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/data/op_expression.h"
#include "core/data/op_registry.h"
#include "core/data/shape_limits.h"
#include "core/format/python_literal.h"
#include "core/tensor/proto_convert.h"
#include "core/util/status_macros.h"
#include "sluice/composite_tensor.h"
#include "google/protobuf/descriptor.h"
#include "proto/dataset.pb.h"

namespace sluice {
namespace {

// A literal tensor may claim at most this many elements; larger claims are refused before
// anything is allocated (a corrupt or hostile graph must not make us multiply into overflow).
constexpr int64_t kMaxLiteralElements = int64_t{1} << 40;

absl::Status Invalid(absl::string_view message) {
  return absl::InvalidArgumentError(std::string(message));
}

absl::Status CheckStructureHasNoLists(const Element& e) {
  if (e.kind() == NestKind::kList) {
    return Invalid(
        "the element has a list structure; tf.data reads Python lists as tensors, so a "
        "structure must be a tuple or a dict");
  }
  for (const Element& c : e.children()) RETURN_IF_ERROR(CheckStructureHasNoLists(c));
  return absl::OkStatus();
}

// Decodes a source literal, refusing oversized shape claims before ElementFromProto
// allocates them.
}  // namespace

absl::StatusOr<Element> DecodeSourceLiteral(const proto::ElementProto& p) {
  for (int i = 0; i < p.tensors_size(); ++i) {
    int64_t n = 1;
    for (int64_t d : p.tensors(i).shape()) {
      if (d < 0) {
        return Invalid(absl::StrCat("literal component ", i, " has a negative dimension ", d));
      }
      if (d != 0 && n > kMaxLiteralElements / d) {
        return Invalid(absl::StrCat("literal component ", i, " claims more than ",
                                    kMaxLiteralElements, " elements"));
      }
      n *= d;
    }
  }
  absl::StatusOr<Element> e = ElementFromProto(p);
  if (!e.ok()) return Invalid(absl::StrCat("bad literal: ", e.status().message()));
  RETURN_IF_ERROR(CheckStructureHasNoLists(*e));
  if (e->num_leaves() == 0) {
    return Invalid("the element has no components (tf.data needs at least one tensor)");
  }
  return *std::move(e);
}

namespace {

void AppendSpec(const ElementSpec& spec, std::string* out) {
  switch (spec.kind()) {
    case NestKind::kLeaf:
      out->append(spec.leaf().ToString());
      return;
    case NestKind::kSparse:
    case NestKind::kRagged:
      out->append(CompositeSpecToString(spec));
      return;
    case NestKind::kDict:
      out->push_back('{');
      for (size_t i = 0; i < spec.children().size(); ++i) {
        if (i > 0) out->append(", ");
        absl::StrAppend(out, PythonStringLiteral(spec.keys()[i]), ": ");
        AppendSpec(spec.children()[i], out);
      }
      out->push_back('}');
      return;
    case NestKind::kTuple:
    case NestKind::kList: {
      bool list = spec.kind() == NestKind::kList;
      out->push_back(list ? '[' : '(');
      for (size_t i = 0; i < spec.children().size(); ++i) {
        if (i > 0) out->append(", ");
        AppendSpec(spec.children()[i], out);
      }
      if (!list && spec.children().size() == 1) out->push_back(',');
      out->push_back(list ? ']' : ')');
      return;
    }
  }
}

}  // namespace

std::string SourceKindName(const proto::SourceDef& source) {
  if (source.kind_case() == proto::SourceDef::KIND_NOT_SET) return "unset";
  const SourceRegistration* r = OpRegistry::Global().FindSource(source.kind_case());
  if (r != nullptr) return r->name;
  const google::protobuf::FieldDescriptor* f =
      proto::SourceDef::descriptor()->FindFieldByNumber(source.kind_case());
  return f != nullptr ? f->name() : "?";
}

std::string OpKindName(const proto::OpDef& op) {
  if (op.kind_case() == proto::OpDef::KIND_NOT_SET) return "unset";
  const OpRegistration* r = OpRegistry::Global().FindOp(op.kind_case());
  if (r != nullptr) return r->name_of ? r->name_of(op) : r->name;
  const google::protobuf::FieldDescriptor* f =
      proto::OpDef::descriptor()->FindFieldByNumber(op.kind_case());
  return f != nullptr ? f->name() : "?";
}

std::string DescribePosition(const proto::DatasetDef& def, int position) {
  if (position < 0) return "dataset graph";
  if (position == 0) return absl::StrCat("source (", SourceKindName(def.source()), ")");
  std::string name = position <= def.ops_size() ? OpKindName(def.ops(position - 1)) : "?";
  return absl::StrCat("op ", position, " (", name, ")");
}

int FirstScalarComponent(const ElementSpec& spec) {
  std::vector<TensorSpec> leaves = spec.Flatten();
  for (size_t i = 0; i < leaves.size(); ++i) {
    if (leaves[i].shape.rank() == 0) return static_cast<int>(i);
  }
  return -1;
}

absl::StatusOr<ElementSpec> InferSourceSpec(const proto::SourceDef& source) {
  ASSIGN_OR_RETURN(const SourceRegistration* r, FindSourceRegistration(source));
  return r->infer_spec(source);
}

absl::StatusOr<ElementSpec> InferOpSpec(const proto::OpDef& op, const ElementSpec& input) {
  ASSIGN_OR_RETURN(const OpRegistration* r, FindOpRegistration(op));
  if (!r->takes_composites && input.HasComposite()) {
    return Invalid(absl::StrCat(r->name_of ? r->name_of(op) : r->name,
                                " does not support SparseTensor or RaggedTensor components yet "
                                "(input element_spec: ", ElementSpecToString(input), ")"));
  }
  return r->infer_spec(op, input);
}

namespace {

// A spec an op gives must describe tensors that can exist: the known dimensions of each
// component multiply to an int64 (an op such as resize([2**40, 2**31 - 1]) or reshape could
// claim more, which a spec's reader, e.g. the client library's ElementSpecFromProto, refuses
// only after the job exists). INVALID_ARGUMENT naming the op's expression and the component.
// `expression` is built only on failure (a literal's expression may be megabytes).
template <typename ExpressionFn>
absl::Status CheckSpecShapes(const ElementSpec& spec, ExpressionFn expression) {
  const std::vector<TensorSpec> leaves = spec.Flatten();
  for (size_t i = 0; i < leaves.size(); ++i) {
    std::vector<int64_t> known;
    for (int64_t d : leaves[i].shape.dims()) {
      if (d != kUnknownDim) known.push_back(d);
    }
    if (CheckedNumElements(known, "").ok()) continue;
    std::string what = expression();
    if (what.size() > 200) what = what.substr(0, 200) + "...";
    absl::StrAppend(&what, ": its output", leaves.size() > 1 ? absl::StrCat(" component ", i) : "");
    return CheckedNumElements(known, what).status();
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<ElementSpec>> InferElementSpecs(const proto::DatasetDef& def,
                                                           int* failed_position) {
  int position = kGraphPosition;
  auto fail = [&](const absl::Status& s) {
    if (failed_position != nullptr) *failed_position = position;
    return absl::InvalidArgumentError(
        absl::StrCat(DescribePosition(def, position), ": ", s.message()));
  };
  if (def.version() != proto::DATASET_GRAPH_VERSION_1) {
    if (def.version() == proto::DATASET_GRAPH_VERSION_UNSPECIFIED) {
      return fail(Invalid("version is not set"));
    }
    return fail(Invalid(absl::StrCat("unknown version ", static_cast<int>(def.version()),
                                     " (this build reads version 1)")));
  }
  if (def.source().kind_case() == proto::SourceDef::KIND_NOT_SET) {
    return fail(Invalid("no source set"));
  }
  std::vector<ElementSpec> specs;
  position = 0;
  absl::StatusOr<ElementSpec> spec = InferSourceSpec(def.source());
  if (!spec.ok()) return fail(spec.status());
  if (absl::Status c = CheckSpecShapes(*spec, [&] { return SourceExpression(def.source()); }); !c.ok()) {
    return fail(c);
  }
  specs.push_back(*std::move(spec));
  for (int i = 0; i < def.ops_size(); ++i) {
    position = i + 1;
    spec = InferOpSpec(def.ops(i), specs.back());
    if (!spec.ok()) return fail(spec.status());
    if (absl::Status c = CheckSpecShapes(*spec, [&] { return OpExpression(def.ops(i)); });
        !c.ok()) {
      return fail(c);
    }
    specs.push_back(*std::move(spec));
  }
  return specs;
}

std::string ElementSpecToString(const ElementSpec& spec) {
  std::string out;
  AppendSpec(spec, &out);
  return out;
}

}  // namespace sluice
