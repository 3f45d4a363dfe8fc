// map(fn, num_parallel_calls, deterministic, key): the registration of the op
// (core/data/op_registry.h); the functions are in core/data/map_fns.h, the iterator in
// map_iterator.h.
#include <memory>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/data/map_fns.h"
#include "core/data/op_expression.h"
#include "core/data/op_registry.h"
#include "core/data/ops/map_iterator.h"
#include "core/data/ops/parallel_calls.h"

namespace sluice {
namespace {

std::string MapFnExpression(const proto::MapOp& m) {
  if (m.fn_case() == proto::MapOp::FN_NOT_SET) return "<unset fn>()";
  const MapFnRegistration* r = OpRegistry::Global().FindMapFn(m.fn_case());
  if (r == nullptr) return absl::StrCat("<unregistered fn ", MapFnName(m), ">()");
  return r->expression(m);
}

}  // namespace

SLUICE_REGISTER_OPS(map_op) {
  OpRegistration r;
  r.name = "map";
  r.infer_spec = [](const proto::OpDef& op, const ElementSpec& input) {
    return InferMapSpec(op.map(), input);
  };
  r.cardinality = [](const proto::OpDef&, const ElementSpec&, int64_t n) { return n; };
  r.expression = [](const proto::OpDef& op) {
    const proto::MapOp& m = op.map();
    return absl::StrCat(
        "map(", MapFnExpression(m),
        KeyArg(m, m.component_case() == proto::MapOp::kKey,
               m.component_case() == proto::MapOp::kIndex),
        ParallelArgs(m.num_parallel_calls(), m.has_deterministic(), m.deterministic()), ")");
  };
  r.build = [](OpBuildArgs args) -> absl::StatusOr<IteratorFactory> {
    const std::string label = args.label;
    IteratorFactory input = std::move(args.input);
    const proto::MapOp& m = args.op.map();
    absl::StatusOr<std::shared_ptr<const MapFunction>> fn = MakeMapFunction(m, args.input_spec);
    if (!fn.ok()) {
      return absl::Status(fn.status().code(), absl::StrCat(label, ": ", fn.status().message()));
    }
    // An element-wise fn also maps whole blocks (the bulk path, core/data/iterator.h).
    const ElementFn block_apply = (*fn)->ElementWise() ? ElementFn([fn = *fn](Element e) {
      return fn->Apply(std::move(e));
    }) : ElementFn();
    ElementFn apply = [fn = *std::move(fn)](Element e) { return fn->Apply(std::move(e)); };
    const int64_t threads = ResolveParallelCalls(m.num_parallel_calls(), args.options);
    const bool deterministic = !m.has_deterministic() || m.deterministic();
    const bool autotune = m.num_parallel_calls() == -1;
    return IteratorFactory([label, input, apply, threads, deterministic, block_apply, autotune] {
      return NewMapIterator(label, input(), apply, threads, deterministic, block_apply,
                            autotune);
    });
  };
  r.global_order_conflict = [](const proto::OpDef& op) -> std::string {
    if (op.map().has_deterministic() && !op.map().deterministic()) {
      return "has deterministic=False: its output order is not fixed";
    }
    return "";
  };
  registry.AddOp(proto::OpDef::kMap, std::move(r));
}

}  // namespace sluice
