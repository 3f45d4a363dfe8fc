// ignore_errors(log_warning): the registration of the op (core/data/op_registry.h); the
// iterator is in ignore_errors_iterator.h.
#include <atomic>
#include <memory>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/data/op_parse.h"
#include "core/data/op_registry.h"
#include "core/data/ops/ignore_errors_iterator.h"
#include "core/util/status_macros.h"

namespace sluice {

SLUICE_REGISTER_OPS(ignore_errors_op) {
  OpRegistration r;
  r.takes_composites = true;  // elements pass through whole
  r.name = "ignore_errors";
  r.infer_spec = [](const proto::OpDef&, const ElementSpec& input) -> absl::StatusOr<ElementSpec> {
    return input;
  };
  r.cardinality = [](const proto::OpDef&, const ElementSpec&, int64_t n) {
    return n == kInfiniteCardinality ? n : kUnknownCardinality;
  };
  r.expression = [](const proto::OpDef& op) -> std::string {
    return op.ignore_errors().log_warning() ? "ignore_errors(log_warning=True)" : "ignore_errors()";
  };
  r.build = [](OpBuildArgs args) -> absl::StatusOr<IteratorFactory> {
    const std::string label = args.label;
    IteratorFactory input = std::move(args.input);
    const bool log = args.op.ignore_errors().log_warning();
    std::shared_ptr<std::atomic<int64_t>> counter;
    if (args.options.stats != nullptr) {
      counter = std::shared_ptr<std::atomic<int64_t>>(args.options.stats,
                                                      &args.options.stats->ignored_errors);
    }
    return IteratorFactory([label, input, log, counter] {
      return NewIgnoreErrorsIterator(label, input(), log, counter);
    });
  };
  r.global_order_conflict = [](const proto::OpDef&) -> std::string {
    return "drops elements depending on their values";
  };
  {
    OpParseRule p;
    p.name = "ignore_errors";
    p.list_order = 14;
    p.params = {{"log_warning", false}};
    p.parse = [](const ParseCall& c, proto::OpDef* op) -> absl::Status {
      op->mutable_ignore_errors();
      if (c.given(0)) {
        ASSIGN_OR_RETURN(bool log, c.Bool("log_warning", *c.arg(0)));
        op->mutable_ignore_errors()->set_log_warning(log);
      }
      return absl::OkStatus();
    };
    r.parse.push_back(std::move(p));
  }
  registry.AddOp(proto::OpDef::kIgnoreErrors, std::move(r));
}

}  // namespace sluice
