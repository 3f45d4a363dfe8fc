#include "core/data/ops/parse_example.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "core/data/ops/example_parser.h"
#include "core/util/status_macros.h"

namespace sluice {
namespace {

class ParseExampleComponentFn : public ComponentFn {
 public:
  explicit ParseExampleComponentFn(ExampleParser parser) : parser_(std::move(parser)) {}

  std::string Describe() const override { return "parse_example(...)"; }
  absl::StatusOr<ElementSpec> OutputSpec(const TensorSpec& input) const override {
    return parser_.OutputSpec(input);
  }
  absl::StatusOr<Element> Apply(const Tensor& input) const override {
    return parser_.Parse(input);
  }

 private:
  const ExampleParser parser_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<ComponentFn>> MakeParseExampleComponentFn(
    const proto::ParseExampleFn& fn) {
  ASSIGN_OR_RETURN(ExampleParser parser, ExampleParser::Create(fn));
  return std::unique_ptr<ComponentFn>(
      new ParseExampleComponentFn(std::move(parser)));
}

}  // namespace sluice
