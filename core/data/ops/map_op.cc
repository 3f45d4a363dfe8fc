// map(fn, num_parallel_calls, deterministic, key): the registration of the op
// (core/data/op_registry.h); the functions are in core/data/map_fns.h, the iterator in
// map_iterator.h.
#include <memory>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/data/map_fns.h"
#include "core/data/op_expression.h"
#include "core/data/op_registry.h"
#include "core/data/ops/example_parser.h"
#include "core/data/ops/image_ops.h"
#include "core/data/ops/map_iterator.h"
#include "core/data/ops/parallel_calls.h"

namespace sluice {
namespace {

std::string MapFnExpression(const proto::MapOp& m) {
  switch (m.fn_case()) {
    case proto::MapOp::kDecodeRaw:
      return absl::StrCat("decode_raw(", TfDType(m.decode_raw().out_type()),
                          m.decode_raw().big_endian() ? ", little_endian=False" : "", ")");
    case proto::MapOp::kCast:
      return absl::StrCat("cast(", TfDType(m.cast().dtype()), ")");
    case proto::MapOp::kReshape:
      return absl::StrCat("reshape([", absl::StrJoin(m.reshape().shape(), ", "), "])");
    case proto::MapOp::kNormalize:
      return absl::StrCat("normalize(mean=", FloatList(m.normalize().mean()),
                          ", std=", FloatList(m.normalize().std()), ")");
    case proto::MapOp::kOneHot: {
      const proto::OneHotFn& o = m.one_hot();
      std::string out = absl::StrCat("one_hot(", o.depth());
      if (o.has_on_value()) absl::StrAppend(&out, ", on_value=", PythonFloat64Literal(o.on_value()));
      if (o.has_off_value()) {
        absl::StrAppend(&out, ", off_value=", PythonFloat64Literal(o.off_value()));
      }
      if (o.dtype() != proto::DT_INVALID) absl::StrAppend(&out, ", dtype=", TfDType(o.dtype()));
      return out + ")";
    }
    case proto::MapOp::kPlugin: {
      std::string out = absl::StrCat("plugin(", PythonStringLiteral(m.plugin().op()));
      for (const proto::PluginArg& a : m.plugin().args()) {
        absl::StrAppend(&out, ", ", a.key(), "=");
        switch (a.value_case()) {
          case proto::PluginArg::kIntValue: absl::StrAppend(&out, a.int_value()); break;
          case proto::PluginArg::kFloatValue:
            absl::StrAppend(&out, PythonFloat64Literal(a.float_value()));
            break;
          case proto::PluginArg::kStringValue:
            absl::StrAppend(&out, PythonStringLiteral(a.string_value()));
            break;
          case proto::PluginArg::kBoolValue: absl::StrAppend(&out, PyBool(a.bool_value())); break;
          case proto::PluginArg::VALUE_NOT_SET: absl::StrAppend(&out, "None"); break;
        }
      }
      return out + ")";
    }
    case proto::MapOp::kParseExample:
      return absl::StrCat("parse_example(", ExampleParser::ToExpression(m.parse_example()), ")");
    case proto::MapOp::kImage:
      return ImageFnExpression(m.image());  // core/data/ops/image_ops.h
    case proto::MapOp::FN_NOT_SET:
      break;
  }
  return "<unset fn>()";
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
    ElementFn apply = [fn = *std::move(fn)](Element e) { return fn->Apply(std::move(e)); };
    const int64_t threads = ResolveParallelCalls(m.num_parallel_calls(), args.options);
    const bool deterministic = !m.has_deterministic() || m.deterministic();
    return IteratorFactory([label, input, apply, threads, deterministic] {
      return NewMapIterator(label, input(), apply, threads, deterministic);
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
