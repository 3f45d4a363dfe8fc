// take(count): the registration of the op (core/data/op_registry.h); the iterator is in
// simple_op_iterators.h.
#include <algorithm>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/data/op_parse.h"
#include "core/data/op_registry.h"
#include "core/data/ops/simple_op_iterators.h"
#include "core/util/status_macros.h"

namespace sluice {

SLUICE_REGISTER_OPS(take_op) {
  OpRegistration r;
  r.takes_composites = true;  // elements pass through whole
  r.name = "take";
  r.infer_spec = [](const proto::OpDef& op,
                    const ElementSpec& input) -> absl::StatusOr<ElementSpec> {
    if (op.take().count() < -1) {
      return absl::InvalidArgumentError(
          absl::StrCat("count must be -1 (all) or >= 0, got ", op.take().count()));
    }
    return input;
  };
  r.cardinality = [](const proto::OpDef& op, const ElementSpec&, int64_t n) -> int64_t {
    const int64_t count = op.take().count();
    if (n == kUnknownCardinality) return kUnknownCardinality;
    if (n == kInfiniteCardinality) return count < 0 ? kInfiniteCardinality : count;
    if (count < 0) return n;
    return std::min(n, count);
  };
  r.expression = [](const proto::OpDef& op) {
    return absl::StrCat("take(", op.take().count(), ")");
  };
  r.build = [](OpBuildArgs args) -> absl::StatusOr<IteratorFactory> {
    const std::string label = args.label;
    IteratorFactory input = std::move(args.input);
    const int64_t count = args.op.take().count();
    return IteratorFactory(
        [label, input, count] { return NewTakeIterator(label, input(), count); });
  };
  r.keeps_batch_size = true;
  r.global_order_conflict = [](const proto::OpDef&) -> std::string {
    return "changes the number of records: restrict the source instead (e.g. a record_range)";
  };
  {
    OpParseRule p;
    p.name = "take";
    p.list_order = 2;
    p.params = {{"count", true}};
    p.parse = [](const ParseCall& c, proto::OpDef* op) -> absl::Status {
      ASSIGN_OR_RETURN(int64_t count, c.Int("count", *c.arg(0)));
      op->mutable_take()->set_count(count);
      return absl::OkStatus();
    };
    r.parse.push_back(std::move(p));
  }
  registry.AddOp(proto::OpDef::kTake, std::move(r));
}

}  // namespace sluice
