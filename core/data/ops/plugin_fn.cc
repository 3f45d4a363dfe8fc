// plugin(op, **args) for map(): the registration (core/data/op_registry.h) of a loaded plugin's
// op (core/data/plugin_loader.h).
#include <memory>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/data/op_expression.h"
#include "core/data/op_registry.h"
#include "core/data/plugin_loader.h"
#include "core/format/python_literal.h"

namespace sluice {
namespace {

std::string PluginExpression(const proto::PluginFn& p) {
  std::string out = absl::StrCat("plugin(", PythonStringLiteral(p.op()));
  for (const proto::PluginArg& a : p.args()) {
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

}  // namespace

SLUICE_REGISTER_OPS(plugin_fn) {
  MapFnRegistration r;
  r.name = "plugin";
  r.make = [](const proto::MapOp& m) { return MakePluginComponentFn(m.plugin()); };
  r.expression = [](const proto::MapOp& m) { return PluginExpression(m.plugin()); };
  registry.AddMapFn(proto::MapOp::kPlugin, std::move(r));
}

}  // namespace sluice
