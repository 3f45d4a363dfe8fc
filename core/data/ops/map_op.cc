// map(fn, num_parallel_calls, deterministic, key): the registration of the op
// (core/data/op_registry.h); the functions are in core/data/map_fns.h, the iterator in
// map_iterator.h.
#include <memory>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/data/map_fns.h"
#include "core/data/op_expression.h"
#include "core/data/op_parse.h"
#include "core/data/op_registry.h"
#include "core/data/ops/map_iterator.h"
#include "core/data/ops/parallel_calls.h"
#include "core/util/status_macros.h"

namespace sluice {
namespace {

std::string MapFnExpression(const proto::MapOp& m) {
  if (m.fn_case() == proto::MapOp::FN_NOT_SET) return "<unset fn>()";
  const MapFnRegistration* r = OpRegistry::Global().FindMapFn(m.fn_case());
  if (r == nullptr) return absl::StrCat("<unregistered fn ", MapFnName(m), ">()");
  return r->expression(m);
}

}  // namespace

namespace {

// The fn of map(...) from its call, through the fn's parse rule (MapFnRegistration::parse).
absl::Status ParseMapFn(const ParseCall& c, proto::MapOp* m) {
  const OpRegistry& registry = OpRegistry::Global();
  const ParsedArg* arg = c.slot(0);
  const PyValue& v = *c.arg(0);
  if (arg == nullptr || arg->call_args == nullptr) {
    return c.Error(v.begin, absl::StrCat("map: map_func must be a call of a built-in function "
                                         "such as cast(tf.float32), got ",
                                         c.Text(v), "; known: ", registry.MapFnParserNames()));
  }
  const std::string fn = StripCallPrefixes(v.text);
  const MapFnParseRule* rule = registry.FindMapFnParser(fn);
  if (rule == nullptr) {
    return c.Error(v.begin, absl::StrCat("map: unknown function '", v.text,
                                         "'; known: ", registry.MapFnParserNames()));
  }
  if (arg->map_fn != nullptr) {  // read by the rule's parse_text
    m->MergeFrom(*arg->map_fn);
    return absl::OkStatus();
  }
  if (rule->unbound) {
    return rule->parse(ParseCall::Unbound(c.context(), fn, v.begin, *arg->call_args), m);
  }
  ASSIGN_OR_RETURN(ParseCall call,
                   ParseCall::Bind(c.context(), fn, v.begin, *arg->call_args, rule->params));
  return rule->parse(call, m);
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
    const ElementFn block_apply =
        (*fn)->ElementWise() ? ElementFn([fn = *fn](Element e) { return fn->Apply(std::move(e)); })
                             : ElementFn();
    ElementFn apply = [fn = *std::move(fn)](Element e) { return fn->Apply(std::move(e)); };
    const int64_t threads = ResolveParallelCalls(m.num_parallel_calls(), args.options);
    const bool deterministic = !m.has_deterministic() || m.deterministic();
    const bool autotune = m.num_parallel_calls() == -1;
    return IteratorFactory([label, input, apply, threads, deterministic, block_apply, autotune] {
      return NewMapIterator(label, input(), apply, threads, deterministic, block_apply, autotune);
    });
  };
  r.global_order_conflict = [](const proto::OpDef& op) -> std::string {
    if (op.map().has_deterministic() && !op.map().deterministic()) {
      return "has deterministic=False: its output order is not fixed";
    }
    return "";
  };
  {
    OpParseRule p;
    p.name = "map";
    p.list_order = 10;
    p.params = {{"map_func", true},
                {"num_parallel_calls", false},
                {"deterministic", false},
                {"key", false}};
    p.parse = [](const ParseCall& c, proto::OpDef* op) -> absl::Status {
      proto::MapOp* m = op->mutable_map();
      RETURN_IF_ERROR(ParseMapFn(c, m));
      if (c.given(1)) {
        ASSIGN_OR_RETURN(int64_t n, c.Int("num_parallel_calls", *c.arg(1)));
        m->set_num_parallel_calls(n);
      }
      if (c.given(2)) {
        ASSIGN_OR_RETURN(bool d, c.Bool("deterministic", *c.arg(2)));
        m->set_deterministic(d);
      }
      RETURN_IF_ERROR(c.Component(c.arg(3), m));
      return absl::OkStatus();
    };
    r.parse.push_back(std::move(p));
  }
  registry.AddOp(proto::OpDef::kMap, std::move(r));
}

}  // namespace sluice
