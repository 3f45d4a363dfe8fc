// parse_example(features) for map(): the registration (core/data/op_registry.h) of the function
// in parse_example.h.
#include <memory>
#include <string>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "core/data/op_parse.h"
#include "core/data/op_registry.h"
#include "core/data/ops/example_parser.h"
#include "core/data/ops/parse_example.h"
#include "core/util/status_macros.h"

namespace sluice {

namespace {

// parse_example(features) / parse_example(features={...}, var_len_as_dense=False) from its '(':
// the dict holds FixedLenFeature / VarLenFeature / RaggedFeature calls, which ExampleParser
// reads.
absl::StatusOr<proto::MapOp> ParseExampleText(absl::string_view text, size_t* pos) {
  auto peek = [&] { return *pos < text.size() ? text[*pos] : '\0'; };
  auto skip_ws = [&] {
    while (*pos < text.size() && absl::ascii_isspace(static_cast<unsigned char>(text[*pos]))) {
      ++*pos;
    }
  };
  ++*pos;  // '('
  skip_ws();
  if (absl::ascii_isalpha(peek()) || peek() == '_') {
    const size_t save = *pos;
    while (absl::ascii_isalnum(peek()) || peek() == '_') ++*pos;
    const absl::string_view kw = text.substr(save, *pos - save);
    skip_ws();
    if (kw != "features" || peek() != '=') {
      *pos = save;
      return PipelineExpected(text, *pos,
                              "the feature dict of parse_example, as in "
                              "parse_example({'x': FixedLenFeature([], tf.int64)})");
    }
    ++*pos;
  }
  proto::MapOp m;
  ASSIGN_OR_RETURN(*m.mutable_parse_example(), ExampleParser::ParseFeatureSpec(text, pos));
  skip_ws();
  if (peek() == ',') {
    ++*pos;
    skip_ws();
  }
  // var_len_as_dense=True|False (Sluice's: VarLenFeatures as dense tensors, parse_example.h).
  constexpr absl::string_view kDense = "var_len_as_dense";
  if (text.substr(*pos, kDense.size()) == kDense) {
    *pos += kDense.size();
    skip_ws();
    if (peek() != '=') return PipelineExpected(text, *pos, "'=' after var_len_as_dense");
    ++*pos;
    skip_ws();
    bool value = false;
    if (text.substr(*pos, 4) == "True") {
      value = true;
      *pos += 4;
    } else if (text.substr(*pos, 5) == "False") {
      *pos += 5;
    } else {
      return PipelineExpected(text, *pos, "True or False for var_len_as_dense");
    }
    m.mutable_parse_example()->set_var_len_as_dense(value);
    skip_ws();
    if (peek() == ',') {
      ++*pos;
      skip_ws();
    }
  }
  if (peek() != ')')
    return PipelineExpected(text, *pos, "')' to close the arguments of parse_example");
  ++*pos;
  return m;
}

}  // namespace

SLUICE_REGISTER_OPS(parse_example_fn) {
  MapFnRegistration r;
  r.name = "parse_example";
  r.make = [](const proto::MapOp& m) { return MakeParseExampleComponentFn(m.parse_example()); };
  r.expression = [](const proto::MapOp& m) {
    return absl::StrCat("parse_example(", ExampleParser::ToExpression(m.parse_example()),
                        m.parse_example().var_len_as_dense() ? ", var_len_as_dense=True" : "",
                        ")");
  };
  {
    MapFnParseRule p;
    p.name = "parse_example";
    p.list_order = 6;
    p.parse_text = ParseExampleText;
    p.parse = [](const ParseCall& c, proto::MapOp* m) -> absl::Status {
      // Not reached: parse_text reads the call (map() takes the fn the parser kept).
      (void)m;
      return c.Error(c.at(),
                     "parse_example: give the feature dict, as in parse_example({'x': "
                     "FixedLenFeature([], tf.int64)})");
    };
    r.parse.push_back(std::move(p));
  }
  registry.AddMapFn(proto::MapOp::kParseExample, std::move(r));
}

}  // namespace sluice
