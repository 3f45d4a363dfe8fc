// The executor turns the graph into a chain of IteratorFactory closures, one per op, each
// holding its input's factory and built by the op's registration (core/data/op_registry.h);
// MakeIterator() calls the last one. Factories, not iterators, are
// the unit because repeat() makes a fresh input iterator per epoch, and because per-op state
// that outlives one iterator (shuffle's iteration count) lives in the closure.
#include "core/data/executor.h"

#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/data/absorbed_op_error.h"
#include "core/data/cancellation.h"
#include "core/data/op_iterator.h"
#include "core/data/op_profile.h"
#include "core/data/op_registry.h"
#include "core/data/spec_inference.h"
#include "core/util/status_macros.h"
#include "proto/dataset.pb.h"

namespace sluice {
namespace {

// `label` names the source in errors (DescribePosition()). *absorbed: the op the source runs
// as part of itself (SourceRegistration::absorbed_op), -1 when none.
absl::StatusOr<IteratorFactory> BuildSource(const std::string& label,
                                            const proto::DatasetDef& def,
                                            const ExecutorOptions& options, int* absorbed) {
  const proto::SourceDef& source = def.source();
  *absorbed = -1;
  absl::StatusOr<const SourceRegistration*> r = FindSourceRegistration(source);
  if (!r.ok()) {
    if (source.kind_case() == proto::SourceDef::KIND_NOT_SET) {
      return absl::InvalidArgumentError(absl::StrCat(label, ": the graph has no source"));
    }
    return absl::InvalidArgumentError(absl::StrCat(label, ": ", r.status().message()));
  }
  if (options.fuse_maps && (*r)->absorbed_op) {
    const int i = (*r)->absorbed_op(def);
    if (i >= 0 && i < def.ops_size()) *absorbed = i;
  }
  return (*r)->build(SourceBuildArgs{label, source, options, &def, *absorbed});
}

absl::StatusOr<IteratorFactory> BuildOp(OpBuildArgs args) {
  absl::StatusOr<const OpRegistration*> r = FindOpRegistration(args.op);
  if (!r.ok()) {
    if (args.op.kind_case() == proto::OpDef::KIND_NOT_SET) {
      return absl::InvalidArgumentError(absl::StrCat(args.label, ": the op has no kind set"));
    }
    return absl::InvalidArgumentError(absl::StrCat(args.label, ": ", r.status().message()));
  }
  return (*r)->build(std::move(args));
}

// How many ops after op i its registration runs as part of op i (OpRegistration::fusable_next),
// at most those left.
int FusableNext(const proto::DatasetDef& def, int i, const ElementSpec& input) {
  absl::StatusOr<const OpRegistration*> r = FindOpRegistration(def.ops(i));
  if (!r.ok() || !(*r)->fusable_next) return 0;
  return std::clamp((*r)->fusable_next(def, i, input), 0, def.ops_size() - i - 1);
}

// The place of an op its source runs as part of itself (SourceRegistration::absorbed_op) in
// the chain: elements pass through, an element the source failed on as the op raises the op's
// error here (core/data/absorbed_op_error.h), and a Skip from the ops after it is not passed on
// (Iterator::Skip's default: the elements are made and dropped), since apart those ops drop
// the op's output, which the op made. Only the ops before it may have the source drop records
// unmade (the fused fixed-length source drops them undecoded).
class AbsorbedOpPlace : public Iterator {
 public:
  explicit AbsorbedOpPlace(std::unique_ptr<Iterator> source) : source_(std::move(source)) {}
  absl::Status GetNext(Element* out, bool* end_of_sequence) override {
    TakeAbsorbedOpError();  // none is pending between calls; a stale one is not this one's
    absl::Status s = source_->GetNext(out, end_of_sequence);
    if (std::optional<absl::Status> e = TakeAbsorbedOpError(); e.has_value() && s.ok()) {
      return *e;
    }
    return s;
  }

 private:
  std::unique_ptr<Iterator> source_;
};

// Per-op profiling (core/data/op_profile.h): each iterator `factory` makes is wrapped to count
// its calls in `profile`; without a profile the factory is returned as is.
IteratorFactory Profiled(IteratorFactory factory, int position, const std::string& label,
                         const std::shared_ptr<OpProfile>& profile) {
  if (profile == nullptr) return factory;
  return [factory = std::move(factory), position, label, profile] {
    return NewProfilingIterator(factory(), position, label, profile.get());
  };
}

}  // namespace

absl::StatusOr<std::unique_ptr<Iterator>> MakeIterator(const Dataset& dataset,
                                                       const ExecutorOptions& options) {
  const proto::DatasetDef& def = dataset.def();
  if (options.check_graph) RETURN_IF_ERROR(options.check_graph(def));
  // Validates the graph (what Dataset::Validate() does) and gives each op's output spec.
  ASSIGN_OR_RETURN(std::vector<ElementSpec> specs, InferElementSpecs(def));
  int absorbed = -1;  // an op the source runs itself: no iterator of its own
  ASSIGN_OR_RETURN(IteratorFactory factory,
                   BuildSource(DescribePosition(def, 0), def, options, &absorbed));
  const std::shared_ptr<OpProfile> profile =
      options.profile != nullptr ? options.profile : ProcessOpProfile();
  factory = Profiled(std::move(factory), 0, DescribePosition(def, 0), profile);
  proto::DatasetDef upstream = def;  // the graph up to op i
  upstream.clear_ops();
  for (int i = 0; i < def.ops_size();) {
    if (i == absorbed) {
      factory = [source = std::move(factory)] {
        return std::unique_ptr<Iterator>(new AbsorbedOpPlace(source()));
      };
      *upstream.add_ops() = def.ops(i);
      ++i;
      continue;
    }
    const std::string label = DescribePosition(def, i + 1);
    // Ops that op i runs as part of itself (map fusion): the label and the profile are op i's.
    const int fused = options.fuse_maps ? FusableNext(def, i, specs[i]) : 0;
    std::vector<proto::OpDef> fused_next(def.ops().begin() + i + 1,
                                         def.ops().begin() + i + 1 + fused);
    ASSIGN_OR_RETURN(factory,
                     BuildOp(OpBuildArgs{label, def.ops(i), std::move(factory), specs[i],
                                         specs[i + 1 + fused], upstream, options,
                                         std::move(fused_next)}));
    factory = Profiled(std::move(factory), i + 1, label, profile);
    for (int j = i; j <= i + fused; ++j) *upstream.add_ops() = def.ops(j);
    i += 1 + fused;
  }
  // The op iterators built now take the token (OpIterator, CurrentCancellation()); no factory
  // carries it, so a long chain of ops costs no more to build with one.
  const ScopedCancellationContext context(options.cancellation);
  return factory();
}

}  // namespace sluice
