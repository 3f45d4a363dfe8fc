// npy_dataset(files): the registration of the source (core/data/op_registry.h); the reader is in
// npy_reader.h.
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/data/op_expression.h"
#include "core/data/op_parse.h"
#include "core/data/op_registry.h"
#include "core/data/ops/npy_reader.h"
#include "core/util/status_macros.h"

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
    return absl::StrCat("npy_dataset(", StringList(n.filenames()), ", dtype=", TfDType(n.dtype()),
                        ", shape=[", absl::StrJoin(n.row_shape(), ", "), "])");
  };
  r.build = [](const SourceBuildArgs& args) -> absl::StatusOr<IteratorFactory> {
    const std::string label = args.label;
    const proto::NpySource npy = args.source.npy();
    return IteratorFactory([label, npy] { return NewNpyIterator(label, npy); });
  };
  {
    SourceParseRule p;
    p.name = "npy_dataset";
    p.list_order = 7;
    p.params = {{"filenames", true}, {"dtype", false}, {"shape", false}};
    p.parse = [](const ParseCall& c, proto::SourceDef* source) -> absl::Status {
      proto::NpySource* n = source->mutable_npy();
      RETURN_IF_ERROR(c.Filenames(*c.arg(0), n->mutable_filenames()));
      if (c.given(1) != c.given(2)) {
        return c.Error(c.at(),
                       "npy_dataset: give both dtype= and shape= (the row shape), or neither");
      }
      if (c.given(1)) {
        ASSIGN_OR_RETURN(DType t, c.DTypeArg("dtype", *c.arg(1)));
        ASSIGN_OR_RETURN(std::vector<int64_t> shape, c.Ints("shape", *c.arg(2), false));
        if (c.arg(2)->kind != PyValue::Kind::kList && c.arg(2)->kind != PyValue::Kind::kTuple) {
          return c.Error(c.arg(2)->begin, "npy_dataset: shape must be a list such as [28, 28]");
        }
        n->set_dtype(static_cast<proto::DataType>(t));
        for (int64_t d : shape) n->add_row_shape(d);
        return absl::OkStatus();
      }
      if (n->filenames_size() == 0) {
        return c.Error(c.at(), "npy_dataset: in a lambda, give dtype= and shape= (the row shape)");
      }
      // The spec comes from the first file's header.
      absl::StatusOr<proto::NpySource> read =
          MakeNpySource(std::vector<std::string>(n->filenames().begin(), n->filenames().end()));
      if (!read.ok()) return PipelineError(c.at(), read.status(), "npy_dataset: ");
      *n = *std::move(read);
      return absl::OkStatus();
    };
    r.parse.push_back(std::move(p));
  }
  r.random_access = [](const proto::SourceDef&) { return absl::OkStatus(); };
  registry.AddSource(proto::SourceDef::kNpy, std::move(r));
}

}  // namespace sluice
