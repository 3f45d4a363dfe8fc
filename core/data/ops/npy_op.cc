// npy_dataset(files): the registration of the source (core/data/op_registry.h); the reader is in
// npy_reader.h.
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/data/op_expression.h"
#include "core/data/op_registry.h"
#include "core/data/ops/npy_reader.h"

namespace sluice {
namespace {

absl::StatusOr<ElementSpec> NpySourceSpec(const proto::NpySource& source) {
  const DType d = static_cast<DType>(source.dtype());
  if (d == DType::kInvalid || d == DType::kString || DTypeName(d).empty()) {
    return absl::InvalidArgumentError(
        "npy_dataset: dtype is not set (the parser reads it from the first file's header, or "
        "give dtype= and shape=)");
  }
  for (int64_t x : source.row_shape()) {
    if (x < 0) {
      return absl::InvalidArgumentError(absl::StrCat("npy_dataset: bad row shape dimension ", x));
    }
  }
  return ElementSpec(TensorSpec{
      d, Shape(std::vector<int64_t>(source.row_shape().begin(), source.row_shape().end()))});
}

}  // namespace

SLUICE_REGISTER_OPS(npy_op) {
  SourceRegistration r;
  r.name = "npy_dataset";
  r.infer_spec = [](const proto::SourceDef& s) { return NpySourceSpec(s.npy()); };
  // Cardinality: unknown without reading the files' headers.
  r.expression = [](const proto::SourceDef& s) {
    const proto::NpySource& n = s.npy();
    return absl::StrCat("npy_dataset(", StringList(n.filenames()), ", dtype=",
                        TfDType(n.dtype()), ", shape=[", absl::StrJoin(n.row_shape(), ", "),
                        "])");
  };
  r.build = [](const SourceBuildArgs& args) -> absl::StatusOr<IteratorFactory> {
    const std::string label = args.label;
    const proto::NpySource npy = args.source.npy();
    return IteratorFactory([label, npy] { return NewNpyIterator(label, npy); });
  };
  registry.AddSource(proto::SourceDef::kNpy, std::move(r));
}

}  // namespace sluice
