// filter(predicate, key): the registration of the op (core/data/op_registry.h); the iterator is
// in filter_iterator.h.
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/data/op_expression.h"
#include "core/data/op_parse.h"
#include "core/data/op_registry.h"
#include "core/data/ops/filter_iterator.h"
#include "core/tensor/proto_convert.h"
#include "core/util/status_macros.h"

namespace sluice {

namespace {

// filter's predicate from its call: less(5), value_in([0, 1]), not_empty(), ...
absl::Status ParsePredicate(const ParseCall& c, proto::FilterOp* f) {
  static const std::pair<const char*, proto::FilterOp::Predicate> kNames[] = {
      {"equal", proto::FilterOp::EQUAL},         {"not_equal", proto::FilterOp::NOT_EQUAL},
      {"less", proto::FilterOp::LESS},           {"less_equal", proto::FilterOp::LESS_EQUAL},
      {"greater", proto::FilterOp::GREATER},     {"greater_equal", proto::FilterOp::GREATER_EQUAL},
      {"value_in", proto::FilterOp::VALUE_IN},   {"label_in", proto::FilterOp::VALUE_IN},
      {"not_empty", proto::FilterOp::NOT_EMPTY},
  };
  const char* kKnown =
      "equal, not_equal, less, less_equal, greater, greater_equal, value_in "
      "(label_in), not_empty";
  const ParsedArg* arg = c.slot(0);
  const PyValue& v = *c.arg(0);
  if (arg == nullptr || arg->call_args == nullptr) {
    return c.Error(v.begin, absl::StrCat("filter: predicate must be a call such as less(5), got ",
                                         c.Text(v), "; known: ", kKnown));
  }
  const std::string name = StripCallPrefixes(v.text);
  auto bind = [&](std::vector<ParseParam> params) {
    return ParseCall::Bind(c.context(), name, v.begin, *arg->call_args, params);
  };
  for (const auto& [n, p] : kNames) {
    if (name != n) continue;
    f->set_predicate(p);
    if (p == proto::FilterOp::NOT_EMPTY) {
      RETURN_IF_ERROR(bind({}).status());
    } else if (p == proto::FilterOp::VALUE_IN) {
      ASSIGN_OR_RETURN(ParseCall a, bind({{"values", true}}));
      const PyValue& values = *a.arg(0);
      if (values.kind != PyValue::Kind::kList && values.kind != PyValue::Kind::kTuple) {
        return c.Error(values.begin, absl::StrCat(name, ": values must be a list such as [0, 1]"));
      }
      for (const PyValue& x : values.items) {
        ASSIGN_OR_RETURN(Tensor t, a.Scalar("values", x));
        *f->add_values() = TensorToProto(t);
      }
    } else {
      ASSIGN_OR_RETURN(ParseCall a, bind({{"value", true}}));
      ASSIGN_OR_RETURN(Tensor t, a.Scalar("value", *a.arg(0)));
      *f->add_values() = TensorToProto(t);
    }
    return absl::OkStatus();
  }
  return c.Error(v.begin,
                 absl::StrCat("filter: unknown predicate '", v.text, "'; known: ", kKnown));
}

}  // namespace

SLUICE_REGISTER_OPS(filter_op) {
  OpRegistration r;
  r.name = "filter";
  r.infer_spec = [](const proto::OpDef& op, const ElementSpec& input) {
    return InferFilterSpec(op.filter(), input);
  };
  r.cardinality = [](const proto::OpDef&, const ElementSpec&, int64_t n) {
    return n == kInfiniteCardinality ? n : kUnknownCardinality;
  };
  r.expression = [](const proto::OpDef& op) {
    const proto::FilterOp& f = op.filter();
    std::vector<std::string> values;
    for (const proto::TensorProto& v : f.values()) values.push_back(TensorLiteral(v));
    std::string operands = f.predicate() == proto::FilterOp::VALUE_IN
                               ? absl::StrCat("[", absl::StrJoin(values, ", "), "]")
                               : absl::StrJoin(values, ", ");
    return absl::StrCat("filter(", FilterPredicateName(f.predicate()), "(", operands, ")",
                        KeyArg(f, f.component_case() == proto::FilterOp::kKey,
                               f.component_case() == proto::FilterOp::kIndex),
                        ")");
  };
  r.build = [](OpBuildArgs args) -> absl::StatusOr<IteratorFactory> {
    const std::string label = args.label;
    IteratorFactory input = std::move(args.input);
    const proto::FilterOp f = args.op.filter();
    return IteratorFactory([label, input, f] { return NewFilterIterator(label, input(), f); });
  };
  r.keeps_batch_size = true;
  r.global_order_conflict = [](const proto::OpDef&) -> std::string {
    return "drops elements depending on their values";
  };
  {
    OpParseRule p;
    p.name = "filter";
    p.list_order = 11;
    p.params = {{"predicate", true}, {"key", false}};
    p.parse = [](const ParseCall& c, proto::OpDef* op) -> absl::Status {
      proto::FilterOp* f = op->mutable_filter();
      RETURN_IF_ERROR(ParsePredicate(c, f));
      RETURN_IF_ERROR(c.Component(c.arg(1), f));
      return absl::OkStatus();
    };
    r.parse.push_back(std::move(p));
  }
  registry.AddOp(proto::OpDef::kFilter, std::move(r));
}

}  // namespace sluice
