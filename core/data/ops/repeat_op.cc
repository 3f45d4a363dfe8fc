// repeat(count): the registration of the op (core/data/op_registry.h); the iterator is in
// simple_op_iterators.h.
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/data/op_parse.h"
#include "core/data/op_registry.h"
#include "core/data/ops/simple_op_iterators.h"
#include "core/util/status_macros.h"

namespace sluice {

SLUICE_REGISTER_OPS(repeat_op) {
  OpRegistration r;
  r.takes_composites = true;  // elements pass through whole
  r.name = "repeat";
  r.infer_spec = [](const proto::OpDef& op,
                    const ElementSpec& input) -> absl::StatusOr<ElementSpec> {
    if (op.repeat().count() < -1) {
      return absl::InvalidArgumentError(
          absl::StrCat("count must be -1 (forever) or >= 0, got ", op.repeat().count()));
    }
    return input;
  };
  r.cardinality = [](const proto::OpDef& op, const ElementSpec&, int64_t n) -> int64_t {
    const int64_t count = op.repeat().count();
    if (count < 0) return n == 0 ? 0 : kInfiniteCardinality;
    if (count == 0) return 0;
    if (n < 0) return n;
    return CountOrUnknown(static_cast<__int128>(count) * n);
  };
  r.expression = [](const proto::OpDef& op) -> std::string {
    if (op.repeat().count() == -1) return "repeat()";
    return absl::StrCat("repeat(", op.repeat().count(), ")");
  };
  r.build = [](OpBuildArgs args) -> absl::StatusOr<IteratorFactory> {
    const std::string label = args.label;
    IteratorFactory input = std::move(args.input);
    const int64_t count = args.op.repeat().count();
    return IteratorFactory(
        [label, input, count] { return NewRepeatIterator(label, input, count); });
  };
  r.keeps_batch_size = true;
  r.global_order_conflict = [](const proto::OpDef&) -> std::string {
    return "repeats the data: epochs are GlobalOrder.num_epochs";
  };
  {
    OpParseRule p;
    p.name = "repeat";
    p.list_order = 1;
    p.params = {{"count", false}};
    p.parse = [](const ParseCall& c, proto::OpDef* op) -> absl::Status {
      int64_t count = -1;
      if (c.given(0)) {
        ASSIGN_OR_RETURN(count, c.Int("count", *c.arg(0)));
      }
      op->mutable_repeat()->set_count(count);
      return absl::OkStatus();
    };
    r.parse.push_back(std::move(p));
  }
  registry.AddOp(proto::OpDef::kRepeat, std::move(r));
}

}  // namespace sluice
