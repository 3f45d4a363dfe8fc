// map(fn, num_parallel_calls, deterministic, key): the registration of the op
// (core/data/op_registry.h); the functions are in core/data/map_fns.h, the iterator in
// map_iterator.h.
#include <memory>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/data/element_draws.h"
#include "core/data/map_fns.h"
#include "core/data/op_iterator.h"
#include "core/data/op_expression.h"
#include "core/data/op_parse.h"
#include "core/data/op_registry.h"
#include "core/data/ops/map_fusion.h"
#include "core/data/ops/map_iterator.h"
#include "core/data/ops/parallel_calls.h"
#include "core/util/status_context.h"
#include "core/util/status_macros.h"

namespace sluice {
namespace {

std::string MapFnExpression(const proto::MapOp& m) {
  if (m.fn_case() == proto::MapOp::FN_NOT_SET) return "<unset fn>()";
  const MapFnRegistration* r = OpRegistry::Global().FindMapFn(m.fn_case());
  if (r == nullptr) return absl::StrCat("<unregistered fn ", MapFnName(m), ">()");
  return r->expression(m);
}

// Under a fn that draws per element (ComponentFn::DrawsPerElement): the map's input with each
// element paired with its draw key, (int64 [epoch, position], element), which KeyedApply takes
// apart on whichever thread maps the element. Keys travel with their elements, so a parallel
// map's threads and its order mode change nothing. An element error takes its position too.
class DrawKeyIterator : public Iterator {
 public:
  DrawKeyIterator(std::unique_ptr<Iterator> input, int64_t epoch, int64_t first_position)
      : input_(std::move(input)), epoch_(epoch), next_position_(first_position) {}

  absl::Status GetNext(Element* out, bool* end_of_sequence) override {
    Element e;
    absl::Status s = input_->GetNext(&e, end_of_sequence);
    if (!s.ok()) {
      if (IsElementError(s)) ++next_position_;
      return s;
    }
    if (*end_of_sequence) return s;
    Tensor key = Tensor::FromVector<int64_t>({epoch_, next_position_++}, Shape({2}));
    *out = Element::Tuple({Element(std::move(key)), std::move(e)});
    return absl::OkStatus();
  }

 private:
  const std::unique_ptr<Iterator> input_;
  const int64_t epoch_;
  int64_t next_position_;
};

// Applies `fn` to the element of a DrawKeyIterator pair under its key.
absl::StatusOr<Element> KeyedApply(const MapFunction& fn, Element keyed) {
  const int64_t* key = keyed.children()[0].leaf().data<int64_t>();
  ScopedElementDrawKey scope(ElementDrawKey{key[0], key[1]});
  return fn.Apply(std::move(keyed.mutable_children()[1]));
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
    // With maps fused into this one (map_fusion.h) their fns run as one, in this map's settings.
    absl::StatusOr<std::shared_ptr<const MapFunction>> fn =
        args.fused_next.empty() ? MakeMapFunction(m, args.input_spec)
                                : MakeFusedMapFunction(m, args.fused_next, args.input_spec);
    if (!fn.ok()) {
      return WithContext(label, fn.status());
    }
    // An element-wise fn also maps whole blocks (the bulk path, core/data/iterator.h).
    const ElementFn block_apply =
        (*fn)->ElementWise() ? ElementFn([fn = *fn](Element e) { return fn->Apply(std::move(e)); })
                             : ElementFn();
    const int64_t threads = ResolveParallelCalls(m.num_parallel_calls(), args.options);
    const bool deterministic = !m.has_deterministic() || m.deterministic();
    const bool autotune = m.num_parallel_calls() == -1;
    if ((*fn)->DrawsPerElement()) {
      // Draw keys (core/data/element_draws.h): a RANGES task's PermutedSource fixes the epoch
      // and the first position; else the repeat() epoch the iterator is built under.
      const bool ranges = args.upstream.source().has_permuted();
      const int64_t ranges_epoch = ranges ? args.upstream.source().permuted().epoch() : 0;
      const int64_t first = ranges ? args.upstream.source().permuted().begin() : 0;
      ElementFn keyed = [fn = *std::move(fn)](Element e) { return KeyedApply(*fn, std::move(e)); };
      return IteratorFactory([label, input, keyed, threads, deterministic, autotune, ranges,
                              ranges_epoch, first] {
        const int64_t epoch = ranges ? ranges_epoch : CurrentRepeatEpoch();
        return NewMapIterator(label, std::make_unique<DrawKeyIterator>(input(), epoch, first),
                              keyed, threads, deterministic, nullptr, autotune);
      });
    }
    const SerializedRowsFn rows_apply =
        block_apply != nullptr ? (*fn)->SerializedRowsApply() : SerializedRowsFn();
    ElementFn apply = [fn = *std::move(fn)](Element e) { return fn->Apply(std::move(e)); };
    return IteratorFactory(
        [label, input, apply, threads, deterministic, block_apply, autotune, rows_apply] {
          return NewMapIterator(label, input(), apply, threads, deterministic, block_apply,
                                autotune, rows_apply);
        });
  };
  r.fusable_next = FusableMaps;
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
