// filter(predicate, key): the registration of the op (core/data/op_registry.h); the iterator is
// in filter_iterator.h.
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/data/op_expression.h"
#include "core/data/op_registry.h"
#include "core/data/ops/filter_iterator.h"

namespace sluice {

SLUICE_REGISTER_OPS(filter_op) {
  OpRegistration r;
  r.name = "filter";
  r.infer_spec = [](const proto::OpDef& op, const ElementSpec& input) {
    return InferFilterSpec(op.filter(), input);
  };
  r.cardinality = [](const proto::OpDef&, const ElementSpec&, int64_t n) {
    return n == kInfiniteCardinality ? n : kUnknownCardinality;
  };
  r.expression = [](const proto::OpDef& op) {
    const proto::FilterOp& f = op.filter();
    std::vector<std::string> values;
    for (const proto::TensorProto& v : f.values()) values.push_back(TensorLiteral(v));
    std::string operands = f.predicate() == proto::FilterOp::VALUE_IN
                               ? absl::StrCat("[", absl::StrJoin(values, ", "), "]")
                               : absl::StrJoin(values, ", ");
    return absl::StrCat("filter(", FilterPredicateName(f.predicate()), "(", operands, ")",
                        KeyArg(f, f.component_case() == proto::FilterOp::kKey,
                               f.component_case() == proto::FilterOp::kIndex),
                        ")");
  };
  r.build = [](OpBuildArgs args) -> absl::StatusOr<IteratorFactory> {
    const std::string label = args.label;
    IteratorFactory input = std::move(args.input);
    const proto::FilterOp f = args.op.filter();
    return IteratorFactory([label, input, f] { return NewFilterIterator(label, input(), f); });
  };
  r.keeps_batch_size = true;
  r.global_order_conflict = [](const proto::OpDef&) -> std::string {
    return "drops elements depending on their values";
  };
  registry.AddOp(proto::OpDef::kFilter, std::move(r));
}

}  // namespace sluice
