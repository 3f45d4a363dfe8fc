// skip(count): the registration of the op (core/data/op_registry.h); the iterator is in
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

SLUICE_REGISTER_OPS(skip_op) {
  OpRegistration r;
  r.takes_composites = true;  // elements pass through whole
  r.name = "skip";
  r.infer_spec = [](const proto::OpDef& op,
                    const ElementSpec& input) -> absl::StatusOr<ElementSpec> {
    if (op.skip().count() < -1) {
      return absl::InvalidArgumentError(
          absl::StrCat("count must be -1 (all) or >= 0, got ", op.skip().count()));
    }
    return input;
  };
  r.cardinality = [](const proto::OpDef& op, const ElementSpec&, int64_t n) -> int64_t {
    if (n < 0) return n;
    const int64_t count = op.skip().count();
    if (count < 0) return 0;
    return std::max<int64_t>(0, n - count);
  };
  r.expression = [](const proto::OpDef& op) {
    return absl::StrCat("skip(", op.skip().count(), ")");
  };
  r.build = [](OpBuildArgs args) -> absl::StatusOr<IteratorFactory> {
    const std::string label = args.label;
    IteratorFactory input = std::move(args.input);
    const int64_t count = args.op.skip().count();
    return IteratorFactory(
        [label, input, count] { return NewSkipIterator(label, input(), count); });
  };
  r.keeps_batch_size = true;
  r.global_order_conflict = [](const proto::OpDef&) -> std::string {
    return "changes the number of records: restrict the source instead (e.g. a record_range)";
  };
  {
    OpParseRule p;
    p.name = "skip";
    p.list_order = 3;
    p.params = {{"count", true}};
    p.parse = [](const ParseCall& c, proto::OpDef* op) -> absl::Status {
      ASSIGN_OR_RETURN(int64_t count, c.Int("count", *c.arg(0)));
      op->mutable_skip()->set_count(count);
      return absl::OkStatus();
    };
    r.parse.push_back(std::move(p));
  }
  registry.AddOp(proto::OpDef::kSkip, std::move(r));
}

}  // namespace sluice
