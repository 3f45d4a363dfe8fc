// Fuzz target: the tf.train.Example parser (core/data/ops/example_parser.h) on arbitrary serialized
// bytes, with a spec of every feature kind, as one Example and as a batch of two; and the
// feature-spec syntax parser on the same bytes as text. Errors must be INVALID_ARGUMENT; a
// successful parse must give tensors of the promised shapes.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/data/ops/example_parser.h"
#include "sluice/composite_tensor.h"

namespace {

const sluice::ExampleParser& Parser() {
  static const sluice::ExampleParser* parser = [] {
    size_t pos = 0;
    auto fn = sluice::ExampleParser::ParseFeatureSpec(
        "{'image': FixedLenFeature([], tf.string, default_value=''), "
        "'label': FixedLenFeature([], tf.int64, default_value=-1), "
        "'scores': FixedLenFeature([2], tf.float32, default_value=[0.0, 0.0]), "
        "'tags': VarLenFeature(tf.string), 'ids': VarLenFeature(tf.int64), "
        "'f': VarLenFeature(tf.float32), 'm': FixedLenFeature([2, 2], tf.int64, "
        "default_value=[[1, 2], [3, 4]]), "
        "'r': RaggedFeature(tf.int64, value_key='ids2', partitions=["
        "RaggedFeature.RowLengths('lens'), RaggedFeature.RowSplits('spl'), "
        "RaggedFeature.UniformRowLength(2)], row_splits_dtype=tf.int64)}",
        &pos);
    if (!fn.ok()) std::abort();
    auto p = sluice::ExampleParser::Create(*fn);
    if (!p.ok()) std::abort();
    return new sluice::ExampleParser(*std::move(p));
  }();
  return *parser;
}

void Check(const absl::StatusOr<sluice::Element>& parsed, int64_t batch) {
  if (!parsed.ok()) {
    if (!absl::IsInvalidArgument(parsed.status())) std::abort();
    return;
  }
  if (parsed->children().size() != 8) std::abort();
  // SparseTensors (VarLen) and the RaggedTensor hold consistent components.
  if (!sluice::CheckComposites(*parsed, "fuzz").ok()) std::abort();
  for (const sluice::Element& c : parsed->children()) {
    if (c.is_composite()) {
      const std::vector<int64_t>& dims = c.composite_dims();
      if (batch >= 0 && (dims.empty() || dims[0] != batch)) std::abort();
      continue;
    }
    const sluice::Tensor& t = c.leaf();
    if (batch >= 0 && (t.shape().rank() < 1 || t.shape().dim(0) != batch)) std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string bytes(reinterpret_cast<const char*>(data), size);
  const sluice::ExampleParser& parser = Parser();
  Check(parser.ParseSingle(bytes), -1);
  Check(parser.ParseBatch({bytes, bytes.substr(0, size / 2)}), 2);
  size_t pos = 0;
  auto spec = sluice::ExampleParser::ParseFeatureSpec(bytes, &pos);
  if (spec.ok() && (pos > size || !sluice::ExampleParser::Create(*spec).ok())) std::abort();
  return 0;
}
