// padded_batch(batch_size, padded_shapes, padding_values, drop_remainder): the registration of
// the op (core/data/op_registry.h); the iterator is in padded_batch_iterator.h.
#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/data/op_expression.h"
#include "core/data/op_parse.h"
#include "core/data/op_registry.h"
#include "core/data/ops/padded_batch_iterator.h"
#include "core/tensor/proto_convert.h"
#include "core/util/status_macros.h"

namespace sluice {

namespace {

// Leaves of a padded_shapes / padding_values structure in flatten order: tuples in order, dicts
// by sorted key. `is_leaf` says what counts as one value.
template <typename IsLeaf>
void FlattenPy(const PyValue& v, IsLeaf is_leaf, std::vector<const PyValue*>* out) {
  if (is_leaf(v) || (v.kind != PyValue::Kind::kTuple && v.kind != PyValue::Kind::kDict)) {
    out->push_back(&v);
    return;
  }
  std::vector<size_t> order(v.items.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  if (v.kind == PyValue::Kind::kDict) {
    std::sort(order.begin(), order.end(),
              [&v](size_t a, size_t b) { return v.keys[a] < v.keys[b]; });
  }
  for (size_t i : order) FlattenPy(v.items[i], is_leaf, out);
}

}  // namespace

std::string PaddedShapesAndValuesExpression(
    const google::protobuf::RepeatedPtrField<proto::PaddedShape>& padded_shapes,
    const google::protobuf::RepeatedPtrField<proto::TensorProto>& padding_values) {
  std::string out;
  if (!padded_shapes.empty()) {
    std::vector<std::string> shapes;
    for (const proto::PaddedShape& s : padded_shapes) {
      std::vector<std::string> dims;
      for (int64_t d : s.dims()) dims.push_back(d < 0 ? "None" : absl::StrCat(d));
      shapes.push_back(absl::StrCat("[", absl::StrJoin(dims, ", "), "]"));
    }
    absl::StrAppend(&out, ", padded_shapes=", Structure(shapes));
  }
  if (!padding_values.empty()) {
    std::vector<std::string> values;
    for (const proto::TensorProto& v : padding_values) values.push_back(TensorLiteral(v));
    absl::StrAppend(&out, ", padding_values=", Structure(values));
  }
  return out;
}

absl::Status ParsePaddedShapesAndValues(const ParseCall& c, size_t shapes_arg, size_t values_arg,
                                        proto::PaddedBatchOp* p) {
  if (c.given(shapes_arg)) {
    // A shape is a list (or a bare int n for [n]); tuples and dicts are structure.
    std::vector<const PyValue*> shapes;
    FlattenPy(
        *c.arg(shapes_arg), [](const PyValue& x) { return x.kind == PyValue::Kind::kList; }, &shapes);
    for (const PyValue* s : shapes) {
      if (s->kind != PyValue::Kind::kList && s->kind != PyValue::Kind::kInt) {
        return c.Error(s->begin, absl::StrCat(c.name(), ": a padded shape must be a list "
                                              "such as [None, 5] (None pads to the longest), "
                                              "got ",
                                              c.Text(*s)));
      }
      ASSIGN_OR_RETURN(std::vector<int64_t> dims, c.Ints("padded_shapes", *s, true));
      proto::PaddedShape* out = p->add_padded_shapes();
      for (int64_t d : dims) out->add_dims(d);
    }
  }
  if (c.given(values_arg)) {
    std::vector<const PyValue*> values;
    FlattenPy(
        *c.arg(values_arg), [](const PyValue&) { return false; }, &values);
    for (const PyValue* v : values) {
      ASSIGN_OR_RETURN(Tensor t, c.Scalar("padding_values", *v));
      *p->add_padding_values() = TensorToProto(t);
    }
  }
  return absl::OkStatus();
}

SLUICE_REGISTER_OPS(padded_batch_op) {
  OpRegistration r;
  r.name = "padded_batch";
  r.infer_spec = [](const proto::OpDef& op, const ElementSpec& input) {
    return InferPaddedBatchSpec(op.padded_batch(), input);
  };
  r.cardinality = [](const proto::OpDef& op, const ElementSpec&, int64_t n) -> int64_t {
    if (n < 0) return n;
    const int64_t b = op.padded_batch().batch_size();
    if (b <= 0) return kUnknownCardinality;
    return n / b + (n % b == 0 || op.padded_batch().drop_remainder() ? 0 : 1);
  };
  r.expression = [](const proto::OpDef& op) {
    const proto::PaddedBatchOp& p = op.padded_batch();
    std::string out = absl::StrCat("padded_batch(", p.batch_size());
    out += PaddedShapesAndValuesExpression(p.padded_shapes(), p.padding_values());
    return absl::StrCat(out, ", drop_remainder=", PyBool(p.drop_remainder()), ")");
  };
  r.build = [](OpBuildArgs args) -> absl::StatusOr<IteratorFactory> {
    const std::string label = args.label;
    IteratorFactory input = std::move(args.input);
    const proto::PaddedBatchOp p = args.op.padded_batch();
    return IteratorFactory([label, input, p] { return NewPaddedBatchIterator(label, input(), p); });
  };
  r.batch_params = [](const proto::OpDef& op) {
    return BatchParams{op.padded_batch().batch_size(), op.padded_batch().drop_remainder()};
  };
  r.global_order_conflict = [](const proto::OpDef&) -> std::string {
    return "is a second batch: exactly one batch op may cut the global steps";
  };
  {
    OpParseRule p;
    p.name = "padded_batch";
    p.list_order = 12;
    p.params = {{"batch_size", true},
                {"padded_shapes", false},
                {"padding_values", false},
                {"drop_remainder", false}};
    p.parse = [](const ParseCall& c, proto::OpDef* op) -> absl::Status {
      proto::PaddedBatchOp* p = op->mutable_padded_batch();
      ASSIGN_OR_RETURN(int64_t n, c.Int("batch_size", *c.arg(0)));
      p->set_batch_size(n);
      RETURN_IF_ERROR(ParsePaddedShapesAndValues(c, 1, 2, p));
      if (c.given(3)) {
        ASSIGN_OR_RETURN(bool drop, c.Bool("drop_remainder", *c.arg(3)));
        p->set_drop_remainder(drop);
      }
      return absl::OkStatus();
    };
    r.parse.push_back(std::move(p));
  }
  registry.AddOp(proto::OpDef::kPaddedBatch, std::move(r));
}

}  // namespace sluice
