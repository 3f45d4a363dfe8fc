// tf_record_dataset(files, ...): the registration of the source (core/data/op_registry.h); the
// reader is in record_iterators.h.
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/data/op_parse.h"
#include "core/data/op_registry.h"
#include "core/data/ops/random_access_source.h"
#include "core/data/ops/record_iterators.h"
#include "core/util/status_macros.h"

namespace sluice {

SLUICE_REGISTER_OPS(tf_record_op) {
  SourceRegistration r;
  r.name = "tf_record_dataset";
  r.infer_spec = [](const proto::SourceDef& s) -> absl::StatusOr<ElementSpec> {
    RETURN_IF_ERROR(ValidateTFRecordSource(s.tf_record()));
    return ElementSpec(TensorSpec{DType::kString, Shape()});
  };
  // Cardinality: unknown without reading the files, as TF.
  r.expression = [](const proto::SourceDef& s) { return TFRecordSourceExpression(s.tf_record()); };
  r.build = [](const SourceBuildArgs& args) -> absl::StatusOr<IteratorFactory> {
    const std::string label = args.label;
    const proto::TFRecordSource source = args.source.tf_record();
    return IteratorFactory([label, source] { return NewTFRecordIterator(label, source); });
  };
  {
    SourceParseRule p;
    p.name = "tf_record_dataset";
    p.list_order = 4;
    p.aliases = {"TFRecordDataset"};
    p.params = {{"filenames", true},           {"compression_type", false}, {"buffer_size", false},
                {"num_parallel_reads", false}, {"start_record", false},     {"num_records", false}};
    p.parse = [](const ParseCall& c, proto::SourceDef* source) -> absl::Status {
      proto::TFRecordSource* t = source->mutable_tf_record();
      RETURN_IF_ERROR(c.Filenames(*c.arg(0), t->mutable_filenames()));
      if (c.given(1)) {
        ASSIGN_OR_RETURN(*t->mutable_compression_type(), c.Str("compression_type", *c.arg(1)));
      }
      if (c.given(2)) {
        ASSIGN_OR_RETURN(int64_t n, c.Int("buffer_size", *c.arg(2)));
        t->set_buffer_size(n);
      }
      if (c.given(3)) {
        ASSIGN_OR_RETURN(int64_t n, c.Int("num_parallel_reads", *c.arg(3)));
        t->set_num_parallel_reads(n);
      }
      if (c.given(4) || c.given(5)) RETURN_IF_ERROR(c.RecordRange(4, t->mutable_record_range()));
      return absl::OkStatus();
    };
    r.parse.push_back(std::move(p));
  }
  r.random_access = [](const proto::SourceDef& s) {
    return CheckUncompressedRandomAccess(s, s.tf_record().compression_type());
  };
  registry.AddSource(proto::SourceDef::kTfRecord, std::move(r));
}

}  // namespace sluice
