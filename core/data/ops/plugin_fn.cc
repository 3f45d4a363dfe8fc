// plugin(op, **args) for map(): the registration (core/data/op_registry.h) of a loaded plugin's
// op (core/data/plugin_loader.h).
#include <memory>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/data/op_expression.h"
#include "core/data/op_parse.h"
#include "core/data/op_registry.h"
#include "core/data/plugin_loader.h"
#include "core/format/python_literal.h"
#include "core/util/status_macros.h"

namespace sluice {
namespace {

std::string PluginExpression(const proto::PluginFn& p) {
  std::string out = absl::StrCat("plugin(", PythonStringLiteral(p.op()));
  for (const proto::PluginArg& a : p.args()) {
    absl::StrAppend(&out, ", ", a.key(), "=");
    switch (a.value_case()) {
      case proto::PluginArg::kIntValue:
        absl::StrAppend(&out, a.int_value());
        break;
      case proto::PluginArg::kFloatValue:
        absl::StrAppend(&out, PythonFloat64Literal(a.float_value()));
        break;
      case proto::PluginArg::kStringValue:
        absl::StrAppend(&out, PythonStringLiteral(a.string_value()));
        break;
      case proto::PluginArg::kBoolValue:
        absl::StrAppend(&out, PyBool(a.bool_value()));
        break;
      case proto::PluginArg::VALUE_NOT_SET:
        absl::StrAppend(&out, "None");
        break;
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
  {
    MapFnParseRule p;
    p.name = "plugin";
    p.list_order = 5;
    p.unbound = true;
    p.parse = [](const ParseCall& c, proto::MapOp* m) -> absl::Status {
      const std::vector<ParsedArg>& args = c.args();
      if (args.empty() || args[0].keyword.has_value()) {
        return c.Error(c.at(),
                       "plugin: the first argument must be the op name, as in "
                       "plugin('my_op', arg=1)");
      }
      ASSIGN_OR_RETURN(std::string op, c.Str("op", args[0].value));
      m->mutable_plugin()->set_op(op);
      for (size_t i = 1; i < args.size(); ++i) {
        const ParsedArg& x = args[i];
        if (!x.keyword.has_value()) {
          return c.Error(x.at, "plugin: arguments after the op name must be keyword arguments");
        }
        proto::PluginArg* p = m->mutable_plugin()->add_args();
        p->set_key(*x.keyword);
        switch (x.value.kind) {
          case PyValue::Kind::kInt: {
            ASSIGN_OR_RETURN(int64_t n, c.Int(*x.keyword, x.value));
            p->set_int_value(n);
            break;
          }
          case PyValue::Kind::kFloat:
            p->set_float_value(x.value.float_value);
            break;
          case PyValue::Kind::kStr:
          case PyValue::Kind::kBytes:
            p->set_string_value(x.value.text);
            break;
          case PyValue::Kind::kBool:
            p->set_bool_value(x.value.bool_value);
            break;
          default:
            return c.Error(x.value.begin, absl::StrCat("plugin: argument ", *x.keyword,
                                                       " must be an int, float, string or bool, "
                                                       "got ",
                                                       c.Text(x.value)));
        }
      }
      return absl::OkStatus();
    };
    r.parse.push_back(std::move(p));
  }
  registry.AddMapFn(proto::MapOp::kPlugin, std::move(r));
}

}  // namespace sluice
