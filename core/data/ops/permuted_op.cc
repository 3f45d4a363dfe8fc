// permuted(source, ...): positions [begin, end) of a seeded global order over an indexed source
// (core/data/distribute/global_order.h). The registration of the source
// (core/data/op_registry.h); the iterator is in permuted_source_iterator.h.
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/data/op_expression.h"
#include "core/data/op_registry.h"
#include "core/data/ops/permuted_source_iterator.h"
#include "core/data/spec_inference.h"
#include "core/util/status_macros.h"

namespace sluice {

SLUICE_REGISTER_OPS(permuted_op) {
  SourceRegistration r;
  r.name = "permuted";
  r.infer_spec = [](const proto::SourceDef& s) -> absl::StatusOr<ElementSpec> {
    RETURN_IF_ERROR(ValidatePermutedSource(s.permuted()));
    return InferSourceSpec(s.permuted().source());
  };
  r.cardinality = [](const proto::SourceDef& s) {
    return s.permuted().end() - s.permuted().begin();
  };
  // Written by the coordinator, never parsed: for logs and errors.
  r.expression = [](const proto::SourceDef& s) {
    const proto::PermutedSource& p = s.permuted();
    return absl::StrCat("permuted(", SourceExpression(p.source()),
                        ", shuffle=", proto::ShuffleMode_Name(p.shuffle()), ", seed=", p.seed(),
                        ", epoch=", p.epoch(), ", block_size=", p.block_size(),
                        ", begin=", p.begin(), ", end=", p.end(), ")");
  };
  r.build = [](const SourceBuildArgs& args) -> absl::StatusOr<IteratorFactory> {
    const std::string label = args.label;
    const proto::PermutedSource p = args.source.permuted();
    return IteratorFactory([label, p] { return NewPermutedSourceIterator(label, p); });
  };
  r.no_random_access = "it is already a range of a global order";
  registry.AddSource(proto::SourceDef::kPermuted, std::move(r));
}

}  // namespace sluice
