// parse_example(features) for map(): the registration (core/data/op_registry.h) of the function
// in parse_example.h.
#include <memory>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/data/op_registry.h"
#include "core/data/ops/example_parser.h"
#include "core/data/ops/parse_example.h"

namespace sluice {

SLUICE_REGISTER_OPS(parse_example_fn) {
  MapFnRegistration r;
  r.name = "parse_example";
  r.make = [](const proto::MapOp& m) { return MakeParseExampleComponentFn(m.parse_example()); };
  r.expression = [](const proto::MapOp& m) {
    return absl::StrCat("parse_example(", ExampleParser::ToExpression(m.parse_example()), ")");
  };
  registry.AddMapFn(proto::MapOp::kParseExample, std::move(r));
}

}  // namespace sluice
