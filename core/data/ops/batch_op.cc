// batch(batch_size, drop_remainder): the registration of the op (core/data/op_registry.h); the
// iterator is in batch_iterator.h.
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/data/op_expression.h"
#include "core/data/op_parse.h"
#include "core/data/op_registry.h"
#include "core/data/ops/batch_iterator.h"
#include "core/tensor/composite_rows.h"
#include "core/util/status_macros.h"

namespace sluice {

SLUICE_REGISTER_OPS(batch_op) {
  OpRegistration r;
  r.name = "batch";
  r.takes_composites = true;  // SparseTensor / RaggedTensor batched as TF (composite_rows.h)
  r.infer_spec = [](const proto::OpDef& op,
                    const ElementSpec& input) -> absl::StatusOr<ElementSpec> {
    const int64_t n = op.batch().batch_size();
    if (n <= 0) {
      return absl::InvalidArgumentError(absl::StrCat("batch_size must be positive, got ", n));
    }
    const int64_t dim = op.batch().drop_remainder() ? n : kUnknownDim;
    return BatchedSpec(input, dim);
  };
  r.cardinality = [](const proto::OpDef& op, const ElementSpec&, int64_t n) -> int64_t {
    if (n < 0) return n;
    const int64_t b = op.batch().batch_size();
    return n / b + (n % b == 0 || op.batch().drop_remainder() ? 0 : 1);
  };
  r.expression = [](const proto::OpDef& op) {
    return absl::StrCat("batch(", op.batch().batch_size(),
                        ", drop_remainder=", PyBool(op.batch().drop_remainder()), ")");
  };
  r.build = [](OpBuildArgs args) {
    const std::string label = args.label;
    const proto::BatchOp b = args.op.batch();
    return CheckedFactory(std::move(args.input), [label, b](std::unique_ptr<Iterator> in) {
      return NewBatchIterator(label, std::move(in), b.batch_size(), b.drop_remainder());
    });
  };
  r.batch_params = [](const proto::OpDef& op) {
    return BatchParams{op.batch().batch_size(), op.batch().drop_remainder()};
  };
  r.global_order_conflict = [](const proto::OpDef&) -> std::string {
    return "is a second batch: exactly one batch op may cut the global steps";
  };
  {
    OpParseRule p;
    p.name = "batch";
    p.list_order = 0;
    p.params = {{"batch_size", true}, {"drop_remainder", false}};
    p.parse = [](const ParseCall& c, proto::OpDef* op) -> absl::Status {
      ASSIGN_OR_RETURN(int64_t n, c.Int("batch_size", *c.arg(0)));
      op->mutable_batch()->set_batch_size(n);
      if (c.arg(1).has_value()) {
        ASSIGN_OR_RETURN(bool drop, c.Bool("drop_remainder", *c.arg(1)));
        op->mutable_batch()->set_drop_remainder(drop);
      }
      return absl::OkStatus();
    };
    r.parse.push_back(std::move(p));
  }
  registry.AddOp(proto::OpDef::kBatch, std::move(r));
}

}  // namespace sluice
