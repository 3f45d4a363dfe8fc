// unbatch(): the registration of the op (core/data/op_registry.h); the iterator is in
// batch_iterator.h.
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/data/op_parse.h"
#include "core/data/op_registry.h"
#include "core/data/ops/batch_iterator.h"
#include "core/data/spec_inference.h"
#include "core/tensor/composite_rows.h"
#include "core/util/status_macros.h"

namespace sluice {

SLUICE_REGISTER_OPS(unbatch_op) {
  OpRegistration r;
  r.name = "unbatch";
  r.takes_composites = true;  // SparseTensor / RaggedTensor split as TF (composite_rows.h)
  r.infer_spec = [](const proto::OpDef&, const ElementSpec& input) -> absl::StatusOr<ElementSpec> {
    const int scalar = FirstScalarComponent(input);
    if (scalar >= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("cannot unbatch scalar components: component ", scalar, " has shape ()"));
    }
    return UnbatchedSpec(input);
  };
  r.cardinality = [](const proto::OpDef&, const ElementSpec& input, int64_t n) -> int64_t {
    if (n < 0) return n;
    // TF uses the first statically known dimension 0 among the components.
    for (int64_t rows : RowCounts(input)) {  // a composite counts as one component
      if (rows != kUnknownDim) return CountOrUnknown(static_cast<__int128>(n) * rows);
    }
    return kUnknownCardinality;
  };
  r.expression = [](const proto::OpDef&) -> std::string { return "unbatch()"; };
  r.build = [](OpBuildArgs args) -> absl::StatusOr<IteratorFactory> {
    const std::string label = args.label;
    IteratorFactory input = std::move(args.input);
    return IteratorFactory([label, input] { return NewUnbatchIterator(label, input()); });
  };
  r.global_order_conflict = [](const proto::OpDef&) -> std::string {
    return "changes how many elements there are, so positions of records no longer cut "
           "global steps";
  };
  {
    OpParseRule p;
    p.name = "unbatch";
    p.list_order = 7;
    p.parse = [](const ParseCall& c, proto::OpDef* op) -> absl::Status {
      (void)c;
      op->mutable_unbatch();
      return absl::OkStatus();
    };
    r.parse.push_back(std::move(p));
  }
  registry.AddOp(proto::OpDef::kUnbatch, std::move(r));
}

}  // namespace sluice
