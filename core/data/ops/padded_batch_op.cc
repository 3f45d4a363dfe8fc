// padded_batch(batch_size, padded_shapes, padding_values, drop_remainder): the registration of
// the op (core/data/op_registry.h); the iterator is in padded_batch_iterator.h.
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/data/op_expression.h"
#include "core/data/op_registry.h"
#include "core/data/ops/padded_batch_iterator.h"

namespace sluice {

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
    if (p.padded_shapes_size() > 0) {
      std::vector<std::string> shapes;
      for (const proto::PaddedShape& s : p.padded_shapes()) {
        std::vector<std::string> dims;
        for (int64_t d : s.dims()) dims.push_back(d < 0 ? "None" : absl::StrCat(d));
        shapes.push_back(absl::StrCat("[", absl::StrJoin(dims, ", "), "]"));
      }
      absl::StrAppend(&out, ", padded_shapes=", Structure(shapes));
    }
    if (p.padding_values_size() > 0) {
      std::vector<std::string> values;
      for (const proto::TensorProto& v : p.padding_values()) values.push_back(TensorLiteral(v));
      absl::StrAppend(&out, ", padding_values=", Structure(values));
    }
    return absl::StrCat(out, ", drop_remainder=", PyBool(p.drop_remainder()), ")");
  };
  r.build = [](OpBuildArgs args) -> absl::StatusOr<IteratorFactory> {
    const std::string label = args.label;
    IteratorFactory input = std::move(args.input);
    const proto::PaddedBatchOp p = args.op.padded_batch();
    return IteratorFactory(
        [label, input, p] { return NewPaddedBatchIterator(label, input(), p); });
  };
  r.batch_params = [](const proto::OpDef& op) {
    return BatchParams{op.padded_batch().batch_size(), op.padded_batch().drop_remainder()};
  };
  r.global_order_conflict = [](const proto::OpDef&) -> std::string {
    return "is a second batch: exactly one batch op may cut the global steps";
  };
  registry.AddOp(proto::OpDef::kPaddedBatch, std::move(r));
}

}  // namespace sluice
