// range(start, stop, step): the registration of the source (core/data/op_registry.h); the
// iterator is in source_iterators.h.
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/data/op_registry.h"
#include "core/data/ops/source_iterators.h"
#include "sluice/dataset.h"

namespace sluice {
namespace {

int64_t RangeCardinality(const proto::RangeSource& r) {
  __int128 start = r.start(), stop = r.stop(), step = r.step();
  if (step > 0) return CountOrUnknown(stop > start ? (stop - start - 1) / step + 1 : 0);
  return CountOrUnknown(start > stop ? (start - stop - 1) / -step + 1 : 0);
}

}  // namespace

SLUICE_REGISTER_OPS(range_op) {
  SourceRegistration r;
  r.name = "range";
  r.infer_spec = [](const proto::SourceDef& s) -> absl::StatusOr<ElementSpec> {
    if (s.range().step() == 0) return absl::InvalidArgumentError("step must not be 0");
    return ElementSpec(TensorSpec{DType::kInt64, Shape()});
  };
  r.cardinality = [](const proto::SourceDef& s) { return RangeCardinality(s.range()); };
  r.expression = [](const proto::SourceDef& s) {
    return absl::StrCat("range(", s.range().start(), ", ", s.range().stop(), ", ",
                        s.range().step(), ")");
  };
  r.build = [](const SourceBuildArgs& args) {
    const std::string label = args.label;
    const proto::RangeSource range = args.source.range();
    return CheckedFactory(nullptr, [label, range](std::unique_ptr<Iterator>) {
      return NewRangeIterator(label, range.start(), range.stop(), range.step());
    });
  };
  registry.AddSource(proto::SourceDef::kRange, std::move(r));
}

}  // namespace sluice
