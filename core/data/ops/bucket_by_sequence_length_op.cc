// bucket_by_sequence_length(element_length_func, bucket_boundaries, bucket_batch_sizes, ...):
// the registration of the op (core/data/op_registry.h); the iterator and its semantics are in
// bucket_by_sequence_length_iterator.h.
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/data/op_expression.h"
#include "core/data/op_parse.h"
#include "core/data/op_registry.h"
#include "core/data/ops/bucket_by_sequence_length_iterator.h"
#include "core/data/ops/padded_batch_iterator.h"
#include "core/format/python_literal.h"
#include "core/tensor/proto_convert.h"
#include "core/util/status_macros.h"

namespace sluice {
namespace {

std::string LengthFuncExpression(const proto::BucketBySequenceLengthOp& op) {
  switch (op.length_of_case()) {
    case proto::BucketBySequenceLengthOp::kKey:
      return absl::StrCat("length(", PythonStringLiteral(op.key()), ")");
    case proto::BucketBySequenceLengthOp::kIndex:
      return absl::StrCat("length(", op.index(), ")");
    case proto::BucketBySequenceLengthOp::LENGTH_OF_NOT_SET:
      break;
  }
  return "length()";
}

std::string Expression(const proto::BucketBySequenceLengthOp& op) {
  std::string out = absl::StrCat("bucket_by_sequence_length(", LengthFuncExpression(op), ", [",
                                 absl::StrJoin(op.bucket_boundaries(), ", "), "], [",
                                 absl::StrJoin(op.bucket_batch_sizes(), ", "), "]");
  out += PaddedShapesAndValuesExpression(op.padded_shapes(), op.padding_values());
  if (op.pad_to_bucket_boundary()) out += ", pad_to_bucket_boundary=True";
  if (op.no_padding()) out += ", no_padding=True";
  if (op.drop_remainder()) out += ", drop_remainder=True";
  return out + ")";
}

// element_length_func: length('key'), length(0), length(), or the bare key / index.
absl::Status ParseLengthFunc(const ParseCall& c, proto::BucketBySequenceLengthOp* op) {
  const ParsedArg* slot = c.slot(0);
  const PyValue& v = *c.arg(0);
  const PyValue* of = &v;
  if (slot != nullptr && slot->call_args != nullptr) {
    if (StripCallPrefixes(v.text) != "length" || slot->call_args->size() > 1) {
      return c.Error(v.begin, absl::StrCat("bucket_by_sequence_length: element_length_func must "
                                           "be length('key'), length(index) or length(), got ",
                                           c.Text(v)));
    }
    if (slot->call_args->empty()) {
      op->set_length_of_element(true);
      return absl::OkStatus();
    }
    of = &(*slot->call_args)[0].value;
  }
  if (of->kind == PyValue::Kind::kStr) {
    op->set_key(of->text);
    return absl::OkStatus();
  }
  if (of->kind == PyValue::Kind::kInt) {
    ASSIGN_OR_RETURN(int64_t i, c.Int("element_length_func", *of));
    op->set_index(i);
    return absl::OkStatus();
  }
  return c.Error(of->begin, absl::StrCat("bucket_by_sequence_length: element_length_func must be "
                                         "length('key'), length(index) or length(), got ",
                                         c.Text(*of)));
}

absl::Status ParseBucketBySequenceLength(const ParseCall& c, proto::OpDef* def) {
  proto::BucketBySequenceLengthOp* op = def->mutable_bucket_by_sequence_length();
  RETURN_IF_ERROR(ParseLengthFunc(c, op));
  ASSIGN_OR_RETURN(std::vector<int64_t> boundaries,
                   c.Ints("bucket_boundaries", *c.arg(1), /*none_ok=*/false));
  for (int64_t b : boundaries) op->add_bucket_boundaries(b);
  ASSIGN_OR_RETURN(std::vector<int64_t> sizes,
                   c.Ints("bucket_batch_sizes", *c.arg(2), /*none_ok=*/false));
  for (int64_t b : sizes) op->add_bucket_batch_sizes(b);
  // padded_shapes / padding_values as padded_batch reads them.
  proto::OpDef padded;
  if (c.given(3) || c.given(4)) {
    RETURN_IF_ERROR(ParsePaddedShapesAndValues(c, 3, 4, padded.mutable_padded_batch()));
    *op->mutable_padded_shapes() = padded.padded_batch().padded_shapes();
    *op->mutable_padding_values() = padded.padded_batch().padding_values();
  }
  if (c.given(5)) {
    ASSIGN_OR_RETURN(bool b, c.Bool("pad_to_bucket_boundary", *c.arg(5)));
    op->set_pad_to_bucket_boundary(b);
  }
  if (c.given(6)) {
    ASSIGN_OR_RETURN(bool b, c.Bool("no_padding", *c.arg(6)));
    op->set_no_padding(b);
  }
  if (c.given(7)) {
    ASSIGN_OR_RETURN(bool b, c.Bool("drop_remainder", *c.arg(7)));
    op->set_drop_remainder(b);
  }
  return absl::OkStatus();
}

}  // namespace

SLUICE_REGISTER_OPS(bucket_by_sequence_length_op) {
  OpRegistration r;
  r.takes_composites = true;  // with no_padding, batched as batch() does; refused otherwise
  r.name = "bucket_by_sequence_length";
  r.infer_spec = [](const proto::OpDef& op, const ElementSpec& input) {
    return InferBucketBySequenceLengthSpec(op.bucket_by_sequence_length(), input);
  };
  r.expression = [](const proto::OpDef& op) { return Expression(op.bucket_by_sequence_length()); };
  r.build = [](OpBuildArgs args) -> absl::StatusOr<IteratorFactory> {
    const std::string label = args.label;
    IteratorFactory input = std::move(args.input);
    const ElementSpec spec = args.input_spec;
    const proto::BucketBySequenceLengthOp op = args.op.bucket_by_sequence_length();
    return IteratorFactory([label, input, spec, op] {
      return NewBucketBySequenceLengthIterator(label, input(), spec, op);
    });
  };
  r.global_order_conflict = [](const proto::OpDef&) -> std::string {
    return "batches elements by their lengths, out of order";
  };
  {
    OpParseRule p;
    p.name = "bucket_by_sequence_length";
    p.list_order = 17;
    p.params = {{"element_length_func", true}, {"bucket_boundaries", true},
                {"bucket_batch_sizes", true},  {"padded_shapes", false},
                {"padding_values", false},     {"pad_to_bucket_boundary", false},
                {"no_padding", false},         {"drop_remainder", false}};
    p.parse = ParseBucketBySequenceLength;
    r.parse.push_back(std::move(p));
  }
  registry.AddOp(proto::OpDef::kBucketBySequenceLength, std::move(r));
}

}  // namespace sluice
