// range(start, stop, step): the registration of the source (core/data/op_registry.h); the
// iterator is in source_iterators.h.
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/data/op_parse.h"
#include "core/data/op_registry.h"
#include "core/data/ops/source_iterators.h"
#include "core/util/status_macros.h"
#include "sluice/dataset.h"

namespace sluice {
namespace {

__int128 RangeLength(const proto::RangeSource& r) {
  __int128 start = r.start(), stop = r.stop(), step = r.step();
  if (step > 0) return stop > start ? (stop - start - 1) / step + 1 : 0;
  return start > stop ? (start - stop - 1) / -step + 1 : 0;
}

int64_t RangeCardinality(const proto::RangeSource& r) { return CountOrUnknown(RangeLength(r)); }

}  // namespace

SLUICE_REGISTER_OPS(range_op) {
  SourceRegistration r;
  r.name = "range";
  r.infer_spec = [](const proto::SourceDef& s) -> absl::StatusOr<ElementSpec> {
    if (s.range().step() == 0) return absl::InvalidArgumentError("step must not be 0");
    // Every count, split and shard of a range is an int64: one whose length does not fit is
    // refused here rather than overflowing later.
    if (RangeLength(s.range()) > std::numeric_limits<int64_t>::max()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "range(", s.range().start(), ", ", s.range().stop(), ", ", s.range().step(),
          "): its length does not fit in int64 (at most 2^63 - 1 elements)"));
    }
    return ElementSpec(TensorSpec{DType::kInt64, Shape()});
  };
  r.cardinality = [](const proto::SourceDef& s) { return RangeCardinality(s.range()); };
  r.expression = [](const proto::SourceDef& s) {
    return absl::StrCat("range(", s.range().start(), ", ", s.range().stop(), ", ", s.range().step(),
                        ")");
  };
  r.build = [](const SourceBuildArgs& args) {
    const std::string label = args.label;
    const proto::RangeSource range = args.source.range();
    return CheckedFactory(nullptr, [label, range](std::unique_ptr<Iterator>) {
      return NewRangeIterator(label, range.start(), range.stop(), range.step());
    });
  };
  {
    SourceParseRule p;
    p.name = "range";
    p.list_order = 0;
    p.unbound = true;
    p.parse = [](const ParseCall& c, proto::SourceDef* source) -> absl::Status {
      for (const ParsedArg& a : c.args()) {
        if (a.keyword.has_value()) {
          return c.Error(a.at, absl::StrCat("range: unexpected keyword argument '", *a.keyword,
                                            "' (range takes 1 to 3 positional arguments: "
                                            "[start,] stop[, step])"));
        }
      }
      const std::vector<ParsedArg>& args = c.args();
      if (args.empty() || args.size() > 3) {
        return c.Error(args.empty() ? c.at() : args[3].at,
                       absl::StrCat("range: takes 1 to 3 positional arguments ([start,] stop[, "
                                    "step]), got ",
                                    args.size()));
      }
      static const char* const kNames[] = {"start", "stop", "step"};
      int64_t values[3] = {0, 0, 1};
      const char* const* names = args.size() == 1 ? kNames + 1 : kNames;
      int first = args.size() == 1 ? 1 : 0;
      for (size_t i = 0; i < args.size(); ++i) {
        ASSIGN_OR_RETURN(values[first + i], c.Int(names[i], args[i].value));
      }
      proto::RangeSource* r = source->mutable_range();
      r->set_start(values[0]);
      r->set_stop(values[1]);
      r->set_step(values[2]);
      return absl::OkStatus();
    };
    r.parse.push_back(std::move(p));
  }
  r.random_access = [](const proto::SourceDef&) { return absl::OkStatus(); };
  registry.AddSource(proto::SourceDef::kRange, std::move(r));
}

}  // namespace sluice
