// prefetch(buffer_size): the registration of the op (core/data/op_registry.h); the iterator is
// in prefetch_iterator.h.
#include <memory>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/data/cancellation.h"
#include "core/data/op_parse.h"
#include "core/data/op_registry.h"
#include "core/data/ops/prefetch_iterator.h"
#include "core/util/status_macros.h"

namespace sluice {

SLUICE_REGISTER_OPS(prefetch_op) {
  OpRegistration r;
  r.takes_composites = true;  // elements pass through whole
  r.name = "prefetch";
  r.infer_spec = [](const proto::OpDef& op,
                    const ElementSpec& input) -> absl::StatusOr<ElementSpec> {
    if (op.prefetch().buffer_size() < -1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "buffer_size must be >= 0 or -1 (AUTOTUNE), got ", op.prefetch().buffer_size()));
    }
    return input;
  };
  r.cardinality = [](const proto::OpDef&, const ElementSpec&, int64_t n) { return n; };
  r.expression = [](const proto::OpDef& op) -> std::string {
    if (op.prefetch().buffer_size() == -1) return "prefetch(tf.data.AUTOTUNE)";
    return absl::StrCat("prefetch(", op.prefetch().buffer_size(), ")");
  };
  r.build = [](OpBuildArgs args) -> absl::StatusOr<IteratorFactory> {
    const std::string label = args.label;
    IteratorFactory input = std::move(args.input);
    int64_t n = args.op.prefetch().buffer_size();
    if (n == -1) n = args.options.autotune_prefetch_elements;
    if (n < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(label, ": buffer_size must be non-negative or -1 (AUTOTUNE), got ", n));
    }
    if (n == 0) return input;  // prefetch(0) is a no-op, as in TF
    return IteratorFactory([label, input, n]() -> std::unique_ptr<Iterator> {
      // Built where its pipeline's op iterators are: the executor's context holds the token.
      return std::make_unique<PrefetchIterator>(input(), n, label, /*pool=*/nullptr,
                                                CurrentCancellation());
    });
  };
  r.keeps_batch_size = true;
  r.global_order_conflict = [](const proto::OpDef&) -> std::string { return ""; };
  {
    OpParseRule p;
    p.name = "prefetch";
    p.list_order = 6;
    p.params = {{"buffer_size", true}};
    p.parse = [](const ParseCall& c, proto::OpDef* op) -> absl::Status {
      ASSIGN_OR_RETURN(int64_t buffer_size, c.Int("buffer_size", *c.arg(0)));
      op->mutable_prefetch()->set_buffer_size(buffer_size);
      return absl::OkStatus();
    };
    r.parse.push_back(std::move(p));
  }
  registry.AddOp(proto::OpDef::kPrefetch, std::move(r));
}

}  // namespace sluice
