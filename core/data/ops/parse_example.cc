#include "core/data/ops/parse_example.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "core/data/ops/example_parser.h"
#include "core/util/status_macros.h"

namespace sluice {
namespace {

class ParseExampleComponentFn : public ComponentFn {
 public:
  ParseExampleComponentFn(ExampleParser parser, bool element_wise)
      : parser_(std::move(parser)), element_wise_(element_wise) {}

  std::string Describe() const override { return "parse_example(...)"; }
  absl::StatusOr<ElementSpec> OutputSpec(const TensorSpec& input) const override {
    return parser_.OutputSpec(input);
  }
  absl::StatusOr<Element> Apply(const Tensor& input) const override {
    return parser_.Parse(input);
  }
  // With FixedLenFeatures only, parsing a batch gives its rows' parses stacked (tf.io.parse_example
  // against parse_single_example), and fails only where some row fails: the bulk path parses
  // whole blocks of records. A VarLenFeature (its dense shape is the longest row of the batch)
  // or RaggedFeature (a batch gains a ragged dimension) is not element-wise.
  bool ElementWise() const override { return element_wise_; }
  // Apply's batch parse on the records' bytes where they are (a reader's buffers).
  bool MapsSerializedRows() const override { return element_wise_; }
  absl::StatusOr<Element> ApplyToSerializedRows(const std::vector<absl::string_view>& rows,
                                                const RowCheck& check) const override {
    return parser_.ParseBatch(rows, check);
  }

 private:
  const ExampleParser parser_;
  const bool element_wise_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<ComponentFn>> MakeParseExampleComponentFn(
    const proto::ParseExampleFn& fn) {
  ASSIGN_OR_RETURN(ExampleParser parser, ExampleParser::Create(fn));
  bool element_wise = true;
  for (const proto::FeatureSpec& f : fn.features()) {
    if (f.kind() != proto::FeatureSpec::FIXED_LEN) element_wise = false;
  }
  return std::unique_ptr<ComponentFn>(
      new ParseExampleComponentFn(std::move(parser), element_wise));
}

}  // namespace sluice
