// fixed_length_record_dataset(files, record_bytes, ...): the registration of the source
// (core/data/op_registry.h); the reader is in record_iterators.h.
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/data/op_parse.h"
#include "core/data/op_registry.h"
#include "core/data/ops/random_access_source.h"
#include "core/data/ops/record_iterators.h"
#include "core/util/status_macros.h"

namespace sluice {

SLUICE_REGISTER_OPS(fixed_length_record_op) {
  SourceRegistration r;
  r.name = "fixed_length_record_dataset";
  r.infer_spec = [](const proto::SourceDef& s) -> absl::StatusOr<ElementSpec> {
    RETURN_IF_ERROR(ValidateFixedLengthRecordSource(s.fixed_length_record()));
    return ElementSpec(TensorSpec{DType::kString, Shape()});
  };
  // Cardinality: unknown without reading the files, as TF.
  r.expression = [](const proto::SourceDef& s) {
    return FixedLengthRecordSourceExpression(s.fixed_length_record());
  };
  r.build = [](const SourceBuildArgs& args) -> absl::StatusOr<IteratorFactory> {
    const std::string label = args.label;
    const proto::FixedLengthRecordSource source = args.source.fixed_length_record();
    return IteratorFactory([label, source] { return NewFixedLengthRecordIterator(label, source); });
  };
  {
    SourceParseRule p;
    p.name = "fixed_length_record_dataset";
    p.list_order = 5;
    p.aliases = {"FixedLengthRecordDataset"};
    p.params = {{"filenames", true},     {"record_bytes", true}, {"header_bytes", false},
                {"footer_bytes", false}, {"buffer_size", false}, {"compression_type", false},
                {"start_record", false}, {"num_records", false}};
    p.parse = [](const ParseCall& c, proto::SourceDef* source) -> absl::Status {
      proto::FixedLengthRecordSource* f = source->mutable_fixed_length_record();
      RETURN_IF_ERROR(c.Filenames(*c.arg(0), f->mutable_filenames()));
      ASSIGN_OR_RETURN(int64_t record_bytes, c.Int("record_bytes", *c.arg(1)));
      f->set_record_bytes(record_bytes);
      if (c.given(2)) {
        ASSIGN_OR_RETURN(int64_t n, c.Int("header_bytes", *c.arg(2)));
        f->set_header_bytes(n);
      }
      if (c.given(3)) {
        ASSIGN_OR_RETURN(int64_t n, c.Int("footer_bytes", *c.arg(3)));
        f->set_footer_bytes(n);
      }
      if (c.given(4)) {
        ASSIGN_OR_RETURN(int64_t n, c.Int("buffer_size", *c.arg(4)));
        f->set_buffer_size(n);
      }
      if (c.given(5)) {
        ASSIGN_OR_RETURN(*f->mutable_compression_type(), c.Str("compression_type", *c.arg(5)));
      }
      if (c.given(6) || c.given(7)) RETURN_IF_ERROR(c.RecordRange(6, f->mutable_record_range()));
      return absl::OkStatus();
    };
    r.parse.push_back(std::move(p));
  }
  r.random_access = [](const proto::SourceDef& s) {
    return CheckUncompressedRandomAccess(s, s.fixed_length_record().compression_type());
  };
  registry.AddSource(proto::SourceDef::kFixedLengthRecord, std::move(r));
}

}  // namespace sluice
